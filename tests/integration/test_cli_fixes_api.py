"""QA's mlq defects against the real API (the Django app in process, as test_cli_groups.py runs
it): the documented rerun-one-shard recipe runs as written; a replayed submit or create says so;
a refused batch prints its error once; a group's parent has no log, said with a 409; the API
reference describes the spec's blocks; a schedule's time zone is an IANA name."""

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from django.contrib.auth import get_user_model

from mlqueue import cli
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.cli.groups import FAILURES_LOWERED
from mlqueue.client import Client
from scheduling.core.cron import UNKNOWN_TIMEZONE
from scheduling.models import Job, Schedule
from scheduling.web.api import GROUP_HAS_NO_LOG
from teams.models import ApiToken
from tests.conftest import make_spec
from tests.integration.test_cli_groups import DjangoTransport, mlq  # noqa: F401  (the fixture)
from tests.integration.test_submit_batch import small

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]

# An array alice may submit (her team, a GPU type of the demo cluster).
ARRAY = make_spec(
    client_job_id=None,
    name="infer",
    command=["python", "infer.py", "--shard", "{index}"],
    resources={"gpu_count": 1, "gpu_type": "H100"},
    topology_hint="none",
    array={"count": 3},
)


@pytest.fixture
def victor(demo, monkeypatch, tmp_path):
    """mlq(*args) run as victor, of research-vision: the team docs/groups.md's array and
    examples/shards.json name."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _, token = ApiToken.issue(user=get_user_model().objects.get(username="victor"))
    transport = DjangoTransport()

    def run(*args):
        def build():
            return Client(server="http://testserver", token=token, transport=transport)

        return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)

    return run


def docs_array_spec() -> str:
    """The YAML of docs/groups.md's "Arrays" section, as written there."""
    text = (ROOT / "docs" / "groups.md").read_text()
    return text.split("## Arrays", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_docs_rerun_one_shard_recipe_runs_as_written(victor, tmp_path):
    path = tmp_path / "infer.yaml"
    path.write_text(docs_array_spec())
    assert "max_failures: 5" in path.read_text()

    result = victor(
        "submit", str(path), "--array", "7", "--set", 'command=[python, infer.py, --shard, "{index}", --of, "200"]'
    )

    assert result.exit_code == 0, result.output
    lowered = FAILURES_LOWERED.format(where="", indices="7", elements="1 element", kept=5, lowered=0)
    assert result.stderr.strip() == lowered
    parent = Job.objects.get(group_kind="array")
    assert (parent.group["count"], parent.group["max_failures"]) == (1, 0)
    assert Job.objects.get(parent=parent).command == ["python", "infer.py", "--shard", "7", "--of", "200"]


def test_the_example_shards_rerun_one_shard(victor):
    result = victor("submit", str(ROOT / "examples" / "shards.json"), "--array", "5")
    assert result.exit_code == 0, result.output
    parent = Job.objects.get(group_kind="array")
    assert (parent.group["count"], parent.group["max_failures"]) == (1, 0)


def test_a_replayed_submit_and_schedule_create_say_they_were_made_before(clock, mlq, tmp_path):  # noqa: F811
    job_file, nightly = tmp_path / "single.yaml", tmp_path / "nightly.yaml"
    job_file.write_text(yaml.safe_dump(small("single", name="single")))
    nightly.write_text(yaml.safe_dump(small(None, name="nightly", schedule={"cron": "0 3 * * *"})))

    first, again = mlq("submit", str(job_file)), mlq("submit", str(job_file))
    created, existing = mlq("schedules", "create", "-f", str(nightly)), mlq("schedules", "create", "-f", str(nightly))

    job = Job.objects.get()
    assert (first.output, again.output) == (
        f"submitted job {job.pk} (single): PENDING\n",
        f"job {job.pk} (single) was submitted before with this spec: PENDING\n",
    )
    schedule = Schedule.objects.get()
    assert created.output.startswith(f"created schedule {schedule.pk} (nightly): '0 3 * * *' in UTC")
    assert existing.output.startswith(f"schedule {schedule.pk} (nightly) exists already with these settings: ")


def test_a_refused_batch_prints_its_error_once(mlq, tmp_path):  # noqa: F811
    path = tmp_path / "mixed.jsonl"
    specs = [small(f"j{n}") for n in range(3)] + [small("bad", resources={"gpu_count": 3, "gpus_per_task": 2})]
    path.write_text("".join(json.dumps(spec) + "\n" for spec in specs))
    result = mlq("submit", str(path))
    assert result.exit_code == EXIT_REFUSED
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"{path}:4: jobs[3].resources.gpu_count: 3 GPUs cannot be split")


def test_a_groups_parent_has_no_log_its_children_have(api, mlq):  # noqa: F811
    submitted = api("alice").post("/api/v1/jobs", ARRAY, format="json")
    parent = submitted.json()["id"]
    said = GROUP_HAS_NO_LOG.format(job=parent, kind="an array")
    assert said == (
        f"job {parent} is an array: its children have the logs "
        f"(mlq children {parent} / GET /api/v1/jobs/{parent}/children)"
    )
    for query in ("", "?rank=5", "?follow=1"):
        response = api("alice").get(f"/api/v1/jobs/{parent}/logs{query}")
        assert (response.status_code, response.json()["detail"]) == (409, said), query
    child = Job.objects.filter(parent_id=parent).order_by("group_index").first()
    assert api("alice").get(f"/api/v1/jobs/{child.pk}/logs").status_code == 200

    for args in ([], ["-f"]):
        result = mlq("logs", str(parent), *args)
        assert (result.exit_code, result.stderr.strip(), result.stdout) == (EXIT_REFUSED, said, "")


def test_the_api_reference_describes_the_specs_blocks(api):
    schema = api("alice").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    components = schema["components"]["schemas"]
    spec = components["JobSpec"]["properties"]
    refs = {
        name: spec[name]["allOf"][0]["$ref"].rsplit("/", 1)[1] for name in ("array", "sweep", "pipeline", "schedule")
    }
    assert refs == {"array": "Array", "sweep": "Sweep", "pipeline": "Pipeline", "schedule": "ScheduleBlock"}
    assert set(components["Array"]["properties"]) == {"count", "indices", "parallelism", "max_failures"}
    assert {"method", "parameters", "max_trials", "max_failures", "metric", "early_stop", "seed"} <= set(
        components["Sweep"]["properties"]
    )
    assert components["Pipeline"]["properties"]["steps"]["items"]["$ref"].endswith("/Step")
    assert {"cron", "timezone", "concurrency"} <= set(components["ScheduleBlock"]["properties"])


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "Factory", "posix/Europe/Berlin", "utc"])
def test_a_schedule_in_a_zone_that_is_no_iana_name_is_refused(clock, api, zone):
    body = small(None, schedule={"cron": "0 3 * * *", "timezone": zone})
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert (response.status_code, response.json()["fields"]) == (
        400,
        {"schedule.timezone": [UNKNOWN_TIMEZONE.format(name=zone)]},
    )
    assert not Schedule.objects.exists()


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Etc/UTC"])
def test_a_schedule_in_an_iana_zone_is_created(clock, api, zone):
    body = small(None, name=f"in-{zone}", schedule={"cron": "0 3 * * *", "timezone": zone})
    assert api("alice").post("/api/v1/jobs", body, format="json").status_code == 201


def test_mlq_logs_says_when_the_log_reached_what_the_server_keeps(api, mlq, settings):  # noqa: F811
    """QA: a log past MLQ_MAX_LOG_CHARS printed its head and exited 0 without a word (only the
    timeline said it was capped)."""
    from scheduling.models import TaskLog

    settings.MLQ_MAX_LOG_CHARS = 12
    job = api("alice").post("/api/v1/jobs", make_spec(client_job_id=None), format="json").json()["id"]
    TaskLog.objects.create(job_id=job, rank=0, attempt=1, stream="stdout", offset=0, text="line 1\nline")
    answer = api("alice").get(f"/api/v1/jobs/{job}/logs").json()
    assert (answer["next_offset"], answer["capped"]) == (11, False)
    TaskLog.objects.create(job_id=job, rank=0, attempt=1, stream="stdout", offset=11, text=" ")
    assert api("alice").get(f"/api/v1/jobs/{job}/logs").json()["capped"] is True
    result = mlq("logs", str(job))
    assert (result.exit_code, result.stdout) == (0, "line 1\nline \n")
    assert result.stderr == (
        "mlq: the stdout of rank 0, attempt 1, reached the 12 characters the server keeps "
        "(MLQ_MAX_LOG_CHARS): what it printed after that was not stored.\n"
    )
