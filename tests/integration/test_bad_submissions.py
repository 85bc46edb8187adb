"""Malformed and forbidden submissions: every one a 4xx naming the field, none writes a row."""
import json

import pytest

from scheduling.models import Job, Task
from teams.models import AuditEvent
from tests.conftest import make_spec

OVERSIZED = json.dumps(make_spec(env={f"V{i}": "x" * 1000 for i in range(300)})).encode()


def without(key: str) -> dict:
    spec = make_spec()
    del spec[key]
    return spec


# (case, user, body: a spec dict or raw bytes, content type, status, field the error must name)
CASES = [
    ("missing team", "alice", without("team"), None, 400, "team"),
    ("unknown team", "alice", make_spec(team="nope"), None, 400, "team"),
    ("team the caller is not in", "alice", make_spec(team="production-ranking"), None, 403, "team"),
    ("negative gpu_count", "alice", make_spec(resources={"gpu_count": -8}), None, 400, "resources.gpu_count"),
    ("gpu_count as a string", "alice", make_spec(resources={"gpu_count": "64"}), None, 400, "resources.gpu_count"),
    ("fractional gpu_count", "alice", make_spec(resources={"gpu_count": 8.5}), None, 400, "resources.gpu_count"),
    ("boolean gpu_count", "alice", make_spec(resources={"gpu_count": True}), None, 400, "resources.gpu_count"),
    ("gpu_count not divisible", "alice", make_spec(resources={"gpu_count": 12, "gpus_per_task": 8}), None, 400,
     "resources.gpu_count"),
    ("unknown gpu_type", "alice", make_spec(resources={"gpu_type": "V100"}), None, 400, "resources.gpu_type"),
    ("more GPUs than the cluster", "alice", make_spec(resources={"gpu_count": 4096}), None, 400,
     "resources.gpu_count"),
    ("more GPUs per task than a node", "alice", make_spec(resources={"gpu_count": 16, "gpus_per_task": 16}), None,
     400, "resources.gpus_per_task"),
    ("GPUs without a type", "alice", make_spec(resources={"gpu_type": None}), None, 400, "resources.gpu_type"),
    ("a type without GPUs", "alice", make_spec(resources={"gpu_count": 0}), None, 400, "resources.gpu_count"),
    ("tasks disagree with GPUs", "alice", make_spec(resources={"tasks": 4}), None, 400, "resources.tasks"),
    ("more CPUs per task than a node", "alice", make_spec(resources={"cpu_per_rank": 1000}), None, 400,
     "resources.cpu_per_rank"),
    ("resources not an object", "alice", make_spec(resources=None) | {"resources": "lots"}, None, 400, "resources"),
    ("unknown priority", "alice", make_spec(priority="P9"), None, 400, "priority"),
    ("priority as a word", "alice", make_spec(priority="high"), None, 400, "priority"),
    ("P0 by a member", "alice", make_spec(priority="P0"), None, 403, "priority"),
    ("zero max runtime", "alice", make_spec(max_runtime_hours=0), None, 400, "max_runtime_hours"),
    ("max runtime over the limit", "alice", make_spec(max_runtime_hours=10_000), None, 400, "max_runtime_hours"),
    ("max runtime as a word", "alice", make_spec(max_runtime_hours="forever"), None, 400, "max_runtime_hours"),
    ("unknown topology hint", "alice", make_spec(topology_hint="same_rack"), None, 400, "topology_hint"),
    ("missing command", "alice", without("command"), None, 400, "command"),
    ("command as a string", "alice", make_spec(command="python train.py"), None, 400, "command"),
    ("empty command", "alice", make_spec(command=[]), None, 400, "command"),
    ("command of numbers", "alice", make_spec(command=[1, 2]), None, 400, "command.0"),
    ("unknown field", "alice", make_spec(gpu=8), None, 400, "gpu"),
    ("misspelt resource field", "alice", make_spec(resources={"gpu_cont": 8}), None, 400, "resources.gpu_cont"),
    ("reserved env name", "alice", make_spec(env={"MLQ_EPOCH": "9"}), None, 400, "env"),
    ("invalid env name", "alice", make_spec(env={"1BAD": "x"}), None, 400, "env"),
    ("env value not a string", "alice", make_spec(env={"A": 1}), None, 400, "env.A"),
    ("node selector as a list", "alice", make_spec(node_selector=["ib"]), None, 400, "node_selector"),
    ("node selector nothing carries", "alice", make_spec(node_selector={"ib": "nope"}), None, 400, "node_selector"),
    ("checkpoint without a path", "alice", make_spec(checkpoint={"interval_minutes": 5}), None, 400,
     "checkpoint.path"),
    ("unknown restart mode", "alice", make_spec(restart_policy={"on_preemption": "retry"}), None, 400,
     "restart_policy.on_preemption"),
    ("negative max_retries", "alice", make_spec(restart_policy={"max_retries": -1}), None, 400,
     "restart_policy.max_retries"),
    ("grace period too long", "alice", make_spec(grace_period_seconds=99_999), None, 400, "grace_period_seconds"),
    ("dependency that does not exist", "alice", make_spec(depends_on=[999_999]), None, 400, "depends_on"),
    ("dependency not an id", "alice", make_spec(depends_on=["abc"]), None, 400, "depends_on.0"),
    ("client_job_id with spaces", "alice", make_spec(client_job_id="my job"), None, 400, "client_job_id"),
    ("client_job_id too long", "alice", make_spec(client_job_id="x" * 200), None, 400, "client_job_id"),
    ("name too long", "alice", make_spec(name="n" * 500), None, 400, "name"),
    ("malformed JSON", "alice", b'{"team": "research-', "application/json", 400, None),
    ("NaN is not JSON", "alice", b'{"team": "research-vision", "max_runtime_hours": NaN}', "application/json", 400,
     None),
    ("a list, not an object", "alice", b"[1, 2]", "application/json", 400, "body"),
    ("oversized body", "alice", OVERSIZED, "application/json", 413, None),
    ("not JSON at all", "alice", b"team=research-vision", "text/plain", 415, None),
    ("no token", None, make_spec(), None, 401, None),
]


def counts() -> tuple[int, int, int, int]:
    return Job.objects.count(), Task.objects.count(), AuditEvent.objects.count(), Job.depends_on.through.objects.count()


@pytest.mark.parametrize("case, username, body, content_type, status, field", CASES, ids=[c[0] for c in CASES])
def test_bad_submission_is_refused_cleanly(api, case, username, body, content_type, status, field):
    client = api(username)
    before = counts()

    if isinstance(body, bytes):
        response = client.generic("POST", "/api/v1/jobs", body, content_type=content_type)
    else:
        response = client.post("/api/v1/jobs", body, format="json")

    assert response.status_code == status, response.content
    payload = response.json()
    assert payload["detail"]
    if field is not None:
        assert field in payload["fields"], payload
        assert payload["detail"].startswith(f"{field}: ")
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
    assert response.json()["fields"] == {"depends_on": [f"job {other['id']} does not exist or is not visible to you."]}
    assert counts() == before


def test_all_errors_are_reported_at_once(api):
    spec = make_spec(priority="P9", topology_hint="x", resources={"gpu_count": -1})
    fields = api("alice").post("/api/v1/jobs", spec, format="json").json()["fields"]
    assert {"priority", "topology_hint", "resources.gpu_count"} <= set(fields)
