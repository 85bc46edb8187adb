"""QA stop 48: a dry run ignored `depends_on`. A spec waiting on a RUNNING job was told where it
would go now (`would go to: z1-r4-cpu-01 (1 task)`, exit 0) while the real submit waits with
"waiting for job 290 to succeed"; one on a CANCELLED array was placed too, though a real submit
is cancelled at once. The dry run now answers as the pass and the leader's sweep would."""

import json

import pytest
import yaml

from scheduling.leader.worker import run_pass
from scheduling.models import Job
from tests.conftest import make_spec
from tests.integration.test_cli_groups import mlq  # noqa: F401 (the fixture)

NEVER = "dependency {id} ended CANCELLED; this {noun} ran only on its success: a submit would be cancelled at once"


def small(**extra) -> dict:
    return make_spec(client_job_id=None, resources={"gpu_count": 1}, topology_hint="none", **extra)


def submitted(api, state: str, **extra) -> int:
    job_id = api("alice").post("/api/v1/jobs", small(**extra), format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(state=state)
    Job.objects.filter(parent_id=job_id).update(state=state)
    return job_id


def dry_run(api, spec: dict) -> dict:
    response = api("alice").post("/api/v1/jobs/dry-run", spec, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_dependency_still_running_is_the_pass_s_wait_with_no_placement(api, leader):
    first = submitted(api, "RUNNING")
    body = dry_run(api, small(depends_on=[first]))
    assert (body["can_ever_run"], body["placement"], body["suggestions"]) == (True, None, [])
    assert body["reason"] == {
        "code": "DEPENDENCY",
        "category": "user",
        "message": f"waiting for job {first} to succeed",
    }
    # the real submit's pending reason, word for word (the pass's own)
    real = api("alice").post("/api/v1/jobs", small(depends_on=[first]), format="json").json()["id"]
    run_pass(epoch=leader)
    assert Job.objects.get(pk=real).pending_reason_message == body["reason"]["message"]


def test_a_failure_edge_waits_in_the_pass_s_words(api, leader):
    first = submitted(api, "RUNNING")
    body = dry_run(api, small(depends_on=[{"job": first, "on": "failure"}]))
    assert body["reason"]["message"] == f"waiting for job {first} to fail"


@pytest.mark.parametrize("array", [False, True])
def test_a_dependency_that_can_no_longer_be_met_can_never_run(api, leader, array):
    first = submitted(api, "CANCELLED", **({"array": {"count": 2}} if array else {}))
    body = dry_run(api, small(depends_on=[first]))
    assert (body["can_ever_run"], body["placement"]) == (False, None)
    message = NEVER.format(id=first, noun="job")
    assert body["reason"] == {"code": "DEPENDENCY", "category": "user", "message": message, "field": "depends_on"}


def test_a_dependency_that_succeeded_is_met(api, leader):
    first = submitted(api, "SUCCEEDED")
    body = dry_run(api, small(depends_on=[first]))
    assert body["can_ever_run"] is True and body["placement"] is not None and body["reason"] is None


def test_a_pipeline_waits_on_its_own_dependency_in_every_step(api, leader):
    first = submitted(api, "CANCELLED")
    steps = [{"name": "prep", "command": ["true"]}, {"name": "train", "command": ["true"], "after": ["prep"]}]
    body = dry_run(api, small(depends_on=[first], pipeline={"steps": steps}))
    assert body["can_ever_run"] is False
    assert body["reason"]["field"] == "depends_on"
    assert body["reason"]["message"] == NEVER.format(id=first, noun="pipeline")
    assert [step["can_ever_run"] for step in body["steps"]] == [False, False]


def test_the_submit_page_s_dry_run_says_it_waits_or_never_runs(api, leader, logged_in):
    running, cancelled = submitted(api, "RUNNING"), submitted(api, "CANCELLED")
    page = logged_in("alice")
    form = {
        "action": "dry_run",
        "team": "research-foundation-models",
        "command": "python\ntrain.py",
        "resources.gpu_count": "1",
        "resources.gpu_type": "H100",
    }
    waits = page.post("/jobs/new/", {**form, "depends_on": str(running)}).content.decode()
    assert f"waiting for job {running} to succeed" in waits and 'id="dry-run-placement"' not in waits
    never = page.post("/jobs/new/", {**form, "depends_on": str(cancelled)}).content.decode()
    assert 'id="dry-run-never"' in never and f"dependency {cancelled} ended CANCELLED" in never
    assert "Can run on this cluster" not in never


def test_mlq_submit_dry_run_prints_the_wait_or_exits_1_when_it_can_never_run(api, leader, mlq, tmp_path):  # noqa: F811
    running, cancelled = submitted(api, "RUNNING"), submitted(api, "CANCELLED")
    waits, never = tmp_path / "waits.yaml", tmp_path / "never.yaml"
    waits.write_text(yaml.safe_dump(small(depends_on=[running])))
    never.write_text(yaml.safe_dump(small(depends_on=[cancelled])))
    result = mlq("submit", str(waits), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"reason: waiting for job {running} to succeed" in result.stdout.splitlines()
    assert "would go to" not in result.stdout
    result = mlq("submit", str(never), "--dry-run")
    assert result.exit_code == 1, result.output
    line = f"reason: {NEVER.format(id=cancelled, noun='job')} (change depends_on)"
    assert line in result.stdout.splitlines()
    assert json.loads(mlq("submit", str(never), "--dry-run", "-o", "json").stdout)["can_ever_run"] is False
