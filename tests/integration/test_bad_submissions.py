"""Malformed and forbidden submissions: every one a 4xx naming the field with its exact message,
none writes a row."""

import json

import pytest
from django.conf import settings

from mlqueue.errors import BODY_TOO_LARGE
from mlqueue.parsers import MALFORMED_JSON, NOT_JSON_CONSTANT
from mlqueue.serializer_fields import UNKNOWN_FIELD
from scheduling.core.feasibility import (
    AT_MOST_IN_ONE,
    LARGER_THAN_ANY_NODE,
    MORE_THAN_THE_CLUSTER,
    NO_NODE_WITH_LABELS,
)
from scheduling.models import Job, Task
from scheduling.services import A_DIVISION, NOT_A_MEMBER, P0_RESERVED, UNKNOWN_DEPENDENCY, UNKNOWN_TEAM
from scheduling.spec import (
    CLIENT_JOB_ID_RULE,
    ENV_RULE,
    GPU_TYPE_REQUIRED,
    GPU_TYPE_WITHOUT_GPUS,
    GPUS_NOT_DIVISIBLE,
    INVALID_NAME,
    MAX_RUNTIME_RANGE,
    NO_GPUS_PER_TASK,
    NOT_A_NUMBER,
    NOT_A_STRING,
    NOT_AN_INTEGER,
    RESERVED_ENV,
    TASKS_DISAGREE,
    UNKNOWN_GPU_TYPE,
)
from teams.models import AuditEvent
from tests.conftest import make_spec

OVERSIZED = json.dumps(make_spec(env={f"V{i}": "x" * 1000 for i in range(300)})).encode()
# DRF's own messages, word for word (its serializer fields and views say them, not our code).
REQUIRED = "This field is required."
NOT_A_DICT = "Invalid data. Expected a dictionary, but got {kind}."
NOT_A_CHOICE = '"{value}" is not a valid choice (one of {choices}).'
PRIORITIES = "P0, P1, P2, P3"
AT_LEAST = "Ensure this value is greater than or equal to {limit}."
AT_MOST = "Ensure this value is less than or equal to {limit}."
AT_MOST_CHARACTERS = "Ensure this field has no more than {limit} characters."
NOT_A_LIST = 'Expected a list of items but got type "{kind}".'
NOT_A_MAPPING = 'Expected a dictionary of items but got type "{kind}".'
EMPTY_LIST = "This list may not be empty."
UNSUPPORTED_MEDIA_TYPE = 'Unsupported media type "{media_type}" in request.'
NOT_AUTHENTICATED = "Authentication credentials were not provided."
# The demo fleet (seed_demo): 16 nodes of 8 H100, each with 192 CPUs.
H100_NODES, H100_GPUS, H100_CPUS = 16, 128, 192


def without(key: str) -> dict:
    spec = make_spec()
    del spec[key]
    return spec


# (case, user, body: a spec dict or raw bytes, content type, status, field the error names or
# None, the exact message for that field, or the whole `detail` where no field is named)
CASES = [
    ("missing team", "alice", without("team"), None, 400, "team", REQUIRED),
    ("unknown team", "alice", make_spec(team="nope"), None, 400, "team", UNKNOWN_TEAM.format(name="nope")),
    (
        "team the caller is not in",
        "alice",
        make_spec(team="production-ranking"),
        None,
        403,
        "team",
        NOT_A_MEMBER.format(name="production-ranking"),
    ),
    (
        "negative gpu_count",
        "alice",
        make_spec(resources={"gpu_count": -8}),
        None,
        400,
        "resources.gpu_count",
        AT_LEAST.format(limit=0),
    ),
    (
        "gpu_count as a string",
        "alice",
        make_spec(resources={"gpu_count": "64"}),
        None,
        400,
        "resources.gpu_count",
        NOT_AN_INTEGER.format(kind="the string '64'"),
    ),
    (
        "fractional gpu_count",
        "alice",
        make_spec(resources={"gpu_count": 8.5}),
        None,
        400,
        "resources.gpu_count",
        NOT_AN_INTEGER.format(kind="float"),
    ),
    (
        "boolean gpu_count",
        "alice",
        make_spec(resources={"gpu_count": True}),
        None,
        400,
        "resources.gpu_count",
        NOT_AN_INTEGER.format(kind="bool"),
    ),
    (
        "gpu_count not divisible",
        "alice",
        make_spec(resources={"gpu_count": 12, "gpus_per_task": 8}),
        None,
        400,
        "resources.gpu_count",
        GPUS_NOT_DIVISIBLE.format(gpus=12, per_task=8),
    ),
    (
        "unknown gpu_type",
        "alice",
        make_spec(resources={"gpu_type": "V100"}),
        None,
        400,
        "resources.gpu_type",
        UNKNOWN_GPU_TYPE.format(gpu_type="V100", known="H100, A100, L40S"),
    ),
    (
        "more GPUs than the cluster",
        "alice",
        make_spec(resources={"gpu_count": 4096}),
        None,
        400,
        "resources.gpu_count",
        MORE_THAN_THE_CLUSTER.format(asked=4096, kind="H100", total=H100_GPUS)
        + AT_MOST_IN_ONE.format(group="zone", most=H100_GPUS // 2),  # two zones: a gang gets one
    ),
    (
        "more GPUs per task than a node",
        "alice",
        make_spec(resources={"gpu_count": 16, "gpus_per_task": 16}),
        None,
        400,
        "resources.gpus_per_task",
        LARGER_THAN_ANY_NODE.format(asked=16, what="GPUs per task", kind="H100", largest=8, unit=""),
    ),
    (
        "GPUs without a type",
        "alice",
        make_spec(resources={"gpu_type": None}),
        None,
        400,
        "resources.gpu_type",
        GPU_TYPE_REQUIRED.format(gpus=64),
    ),
    (
        "a type without GPUs",
        "alice",
        make_spec(resources={"gpu_count": 0}),
        None,
        400,
        "resources.gpu_count",
        GPU_TYPE_WITHOUT_GPUS.format(gpu_type="H100"),
    ),
    (
        "tasks disagree with GPUs",
        "alice",
        make_spec(resources={"tasks": 4}),
        None,
        400,
        "resources.tasks",
        TASKS_DISAGREE.format(gpus=64, per_task=8, tasks=8, asked=4),
    ),
    (
        "more CPUs per task than a node",
        "alice",
        make_spec(resources={"cpu_per_rank": 1000}),
        None,
        400,
        "resources.cpu_per_rank",
        LARGER_THAN_ANY_NODE.format(asked=1000, what="CPUs per task", kind="H100", largest=H100_CPUS, unit=" CPUs"),
    ),
    (
        "more scratch disk than any node has",
        "alice",
        make_spec(resources={"scratch_disk_gb": 1_000_000}),
        None,
        400,
        "resources.scratch_disk_gb",
        LARGER_THAN_ANY_NODE.format(
            asked=1_000_000, what="GB of scratch disk", kind="H100", largest=30_000, unit=" GB"
        ),
    ),
    (
        "resources not an object",
        "alice",
        make_spec(resources=None) | {"resources": "lots"},
        None,
        400,
        "resources",
        NOT_A_DICT.format(kind="str"),
    ),
    (
        "unknown priority",
        "alice",
        make_spec(priority="P9"),
        None,
        400,
        "priority",
        NOT_A_CHOICE.format(value="P9", choices=PRIORITIES),
    ),
    (
        "priority as a word",
        "alice",
        make_spec(priority="high"),
        None,
        400,
        "priority",
        NOT_A_CHOICE.format(value="high", choices=PRIORITIES),
    ),
    (
        "P0 by a member",
        "alice",
        make_spec(priority="P0"),
        None,
        403,
        "priority",
        P0_RESERVED.format(name="research-foundation-models"),
    ),
    (
        "zero max runtime",
        "alice",
        make_spec(max_runtime_hours=0),
        None,
        400,
        "max_runtime_hours",
        MAX_RUNTIME_RANGE.format(limit=settings.MLQ_MAX_RUNTIME_HOURS, value=0),
    ),
    (
        "zero GPUs per task for a GPU job",
        "alice",
        make_spec(resources={"gpu_count": 8, "gpu_type": "H100", "gpus_per_task": 0}),
        None,
        400,
        "resources.gpus_per_task",
        NO_GPUS_PER_TASK.format(gpus=8),
    ),
    (
        "a max runtime of no time at all",
        "alice",
        make_spec(max_runtime_hours=1e-300),
        None,
        400,
        "max_runtime_hours",
        MAX_RUNTIME_RANGE.format(limit=settings.MLQ_MAX_RUNTIME_HOURS, value=1e-300),
    ),
    (
        "max runtime over the limit",
        "alice",
        make_spec(max_runtime_hours=10_000),
        None,
        400,
        "max_runtime_hours",
        MAX_RUNTIME_RANGE.format(limit=settings.MLQ_MAX_RUNTIME_HOURS, value=10_000),
    ),
    (
        "max runtime as a word",
        "alice",
        make_spec(max_runtime_hours="forever"),
        None,
        400,
        "max_runtime_hours",
        NOT_A_NUMBER.format(kind="the string 'forever'"),
    ),
    (
        "unknown topology hint",
        "alice",
        make_spec(topology_hint="same_rack"),
        None,
        400,
        "topology_hint",
        NOT_A_CHOICE.format(value="same_rack", choices="none, prefer_same_rack, require_same_rack, spread"),
    ),
    ("missing command", "alice", without("command"), None, 400, "command", REQUIRED),
    (
        "command as a string",
        "alice",
        make_spec(command="python train.py"),
        None,
        400,
        "command",
        NOT_A_LIST.format(kind="str"),
    ),
    ("empty command", "alice", make_spec(command=[]), None, 400, "command", EMPTY_LIST),
    ("command of numbers", "alice", make_spec(command=[1, 2]), None, 400, "command.0", NOT_A_STRING.format(kind="int")),
    ("unknown field", "alice", make_spec(gpu=8), None, 400, "gpu", UNKNOWN_FIELD),
    (
        "misspelt resource field",
        "alice",
        make_spec(resources={"gpu_cont": 8}),
        None,
        400,
        "resources.gpu_cont",
        UNKNOWN_FIELD,
    ),
    (
        "reserved env name",
        "alice",
        make_spec(env={"MLQ_EPOCH": "9"}),
        None,
        400,
        "env",
        RESERVED_ENV.format(name="MLQ_EPOCH"),
    ),
    (
        "invalid env name",
        "alice",
        make_spec(env={"1BAD": "x"}),
        None,
        400,
        "env",
        INVALID_NAME.format(name="1BAD", rule=ENV_RULE),
    ),
    ("env value not a string", "alice", make_spec(env={"A": 1}), None, 400, "env.A", NOT_A_STRING.format(kind="int")),
    (
        "node selector as a list",
        "alice",
        make_spec(node_selector=["ib"]),
        None,
        400,
        "node_selector",
        NOT_A_MAPPING.format(kind="list"),
    ),
    (
        "node selector nothing carries",
        "alice",
        make_spec(node_selector={"ib": "nope"}),
        None,
        400,
        "node_selector",
        NO_NODE_WITH_LABELS.format(kind="H100", wanted="ib=nope", count=H100_NODES),
    ),
    (
        "checkpoint without a path",
        "alice",
        make_spec(checkpoint={"interval_minutes": 5}),
        None,
        400,
        "checkpoint.path",
        REQUIRED,
    ),
    (
        "unknown restart mode",
        "alice",
        make_spec(restart_policy={"on_preemption": "retry"}),
        None,
        400,
        "restart_policy.on_preemption",
        NOT_A_CHOICE.format(value="retry", choices="resume_from_checkpoint, restart, fail"),
    ),
    (
        "negative max_retries",
        "alice",
        make_spec(restart_policy={"max_retries": -1}),
        None,
        400,
        "restart_policy.max_retries",
        AT_LEAST.format(limit=0),
    ),
    (
        "grace period too long",
        "alice",
        make_spec(grace_period_seconds=99_999),
        None,
        400,
        "grace_period_seconds",
        AT_MOST.format(limit=3600),
    ),
    (
        "dependency that does not exist",
        "alice",
        make_spec(depends_on=[999_999]),
        None,
        400,
        "depends_on.0",
        UNKNOWN_DEPENDENCY.format(id=999_999),
    ),
    (
        "dependency not an id",
        "alice",
        make_spec(depends_on=["abc"]),
        None,
        400,
        "depends_on.0",
        NOT_AN_INTEGER.format(kind="the string 'abc'"),
    ),
    (
        "client_job_id with spaces",
        "alice",
        make_spec(client_job_id="my job"),
        None,
        400,
        "client_job_id",
        CLIENT_JOB_ID_RULE,
    ),
    (
        "client_job_id too long",
        "alice",
        make_spec(client_job_id="x" * 200),
        None,
        400,
        "client_job_id",
        AT_MOST_CHARACTERS.format(limit=128),
    ),
    ("name too long", "alice", make_spec(name="n" * 500), None, 400, "name", AT_MOST_CHARACTERS.format(limit=200)),
    # The problem in parentheses is Python's json module's own words.
    (
        "malformed JSON",
        "alice",
        b'{"team": "research-',
        "application/json",
        400,
        "body",
        MALFORMED_JSON.format(problem="Unterminated string starting at: line 1 column 10 (char 9)"),
    ),
    (
        "NaN is not JSON",
        "alice",
        b'{"team": "research-vision", "max_runtime_hours": NaN}',
        "application/json",
        400,
        "body",
        MALFORMED_JSON.format(problem=NOT_JSON_CONSTANT.format(name="NaN")),
    ),
    ("a list, not an object", "alice", b"[1, 2]", "application/json", 400, "body", NOT_A_DICT.format(kind="list")),
    (
        "oversized body",
        "alice",
        OVERSIZED,
        "application/json",
        413,
        None,
        BODY_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
    ),
    (
        "not JSON at all",
        "alice",
        b"team=research-vision",
        "text/plain",
        415,
        None,
        UNSUPPORTED_MEDIA_TYPE.format(media_type="text/plain"),
    ),
    ("no token", None, make_spec(), None, 401, None, NOT_AUTHENTICATED),
]


def counts() -> tuple[int, int, int, int]:
    return Job.objects.count(), Task.objects.count(), AuditEvent.objects.count(), Job.depends_on.through.objects.count()


@pytest.mark.parametrize("case, username, body, content_type, status, field, message", CASES, ids=[c[0] for c in CASES])
def test_bad_submission_is_refused_cleanly(api, case, username, body, content_type, status, field, message):
    client = api(username)
    before = counts()

    if isinstance(body, bytes):
        response = client.generic("POST", "/api/v1/jobs", body, content_type=content_type)
    else:
        response = client.post("/api/v1/jobs", body, format="json")

    assert response.status_code == status, response.content
    payload = response.json()
    if field is None:
        assert payload == {"detail": message}
    else:
        assert payload["fields"][field][0] == message, payload
        assert payload["detail"] == f"{field}: {message}"
    assert counts() == before


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30


def test_a_bad_token_is_401(api):
    client = api(None)
    client.credentials(HTTP_AUTHORIZATION="Bearer mlq_not-a-real-token")
    response = client.post("/api/v1/jobs", make_spec(), format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_dependency_in_another_team_is_not_visible(api):
    other = api("bob").post("/api/v1/jobs", make_spec(team="production-ranking"), format="json").json()
    before = counts()
    response = api("alice").post("/api/v1/jobs", make_spec(depends_on=[other["id"]]), format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "depends_on.0": [f"job {other['id']} does not exist or is not visible to you."]
    }
    assert counts() == before


def test_all_errors_are_reported_at_once(api):
    spec = make_spec(priority="P9", topology_hint="x", resources={"gpu_count": -1})
    fields = api("alice").post("/api/v1/jobs", spec, format="json").json()["fields"]
    assert {"priority", "topology_hint", "resources.gpu_count"} <= set(fields)


def test_a_job_of_a_division_is_refused_naming_its_teams(api, django_user_model):
    """A division's own jobs used its teams' guarantees: a team within its guarantee then
    waited with nothing marked borrowed to reclaim (found by QA)."""
    from teams.models import Membership, Role, Team

    dora = django_user_model.objects.create_user("dora", password="demo")
    Membership.objects.create(user=dora, team=Team.objects.get(name="research"), role=Role.MEMBER)
    response = api("dora").post("/api/v1/jobs", make_spec(team="research", client_job_id=None), format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "team": [A_DIVISION.format(name="research", children="research-foundation-models, research-vision")]
    }
    assert not Job.objects.exists()
    outsider = api("alice").post("/api/v1/jobs", make_spec(team="production", client_job_id=None), format="json")
    assert (outsider.status_code, outsider.json()["fields"]) == (
        403,
        {"team": [NOT_A_MEMBER.format(name="production")]},
    )
    # QA: a member of one of its teams was told she is no member (403), not where to submit.
    below = api("alice").post("/api/v1/jobs", make_spec(team="research", client_job_id=None), format="json")
    assert (below.status_code, below.json()["fields"]) == (
        400,
        {"team": [A_DIVISION.format(name="research", children="research-foundation-models, research-vision")]},
    )


def test_a_gpu_type_a_node_reports_may_be_asked_for(api, monkeypatch):
    """MLQ_GPU_TYPES is H100, A100, L40S; a B200 node joined, went READY, and every job asking
    for B200 was refused as an unknown type (found by QA)."""
    from agents.services import do_register_node
    from scheduling import spec as spec_module

    monkeypatch.setattr(spec_module, "_SEEN_REPORTED", set())  # this process's memory: not past this test

    spec = make_spec(resources={"gpu_type": "B200", "gpu_count": 4}, client_job_id=None)
    before = api("alice").post("/api/v1/jobs", spec, format="json")
    assert before.json()["fields"]["resources.gpu_type"] == [
        UNKNOWN_GPU_TYPE.format(gpu_type="B200", known="H100, A100, L40S")
    ]
    inventory = {"zone": "z1", "rack": "z1-r9", "gpu_type": "B200", "gpu_count": 4, "cpu_count": 64, "memory_gb": 512}
    do_register_node(name="z1-r9-b200-01", inventory=inventory)
    assert api("alice").post("/api/v1/jobs", spec, format="json").status_code == 201
    assert spec_module.gpu_types() == ["H100", "A100", "L40S", "B200"]  # the submit form's choices too
