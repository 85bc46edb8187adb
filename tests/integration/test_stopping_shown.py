"""A running job being stopped says so (QA): during a preemption's grace period `mlq status`,
`mlq why` and GET /api/v1/jobs/{id} showed a plain RUNNING; only the job page's Stop column and
the events told. The job's answer and its why carry `stopping`: why, and when the SIGKILL comes."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from scheduling import nodes
from scheduling.core.decisions import Preemption, PreemptionReason
from scheduling.leader.apply import _preempt
from scheduling.models import Job
from scheduling.stopping import escalate_overdue
from tests.conftest import make_spec
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)
from tests.integration.test_notifications import start

RECLAIM = "preempted for job {urgent} (P1, team research-vision): reclaiming capacity its team is guaranteed"


def submit(api, **overrides) -> Job:
    spec = make_spec(resources={"gpu_count": 8}, grace_period_seconds=120, **{"client_job_id": None, **overrides})
    response = api("alice").post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def test_a_preempted_job_in_its_grace_period_says_why_and_when_it_is_killed(
    clock,
    api,
    leader,
    mlq,  # noqa: F811
):
    job = submit(api)
    urgent = submit(api, client_job_id="urgent")
    start(job)
    detail = api("alice").get(f"/api/v1/jobs/{job.pk}").json()
    assert (detail["state"], detail["stopping"]) == ("RUNNING", None)
    assert api("alice").get(f"/api/v1/jobs/{job.pk}/why").json()["stopping"] is None

    clock.shift(timedelta(minutes=30))  # 09:30
    message = RECLAIM.format(urgent=urgent.pk)
    assert _preempt(Preemption(job.pk, urgent.pk, PreemptionReason.RECLAIM, message), epoch=leader, now=timezone.now())
    stopping = {
        "cause": "RECLAIM",
        "message": message,
        "preempted_for": urgent.pk,
        "signal": "SIGTERM",
        "requested_at": "2026-04-20T09:30:00Z",
        "kill_at": "2026-04-20T09:32:00Z",
    }
    detail = api("alice").get(f"/api/v1/jobs/{job.pk}").json()
    assert (detail["state"], detail["stopping"]) == ("RUNNING", stopping)
    assert api("alice").get(f"/api/v1/jobs/{job.pk}/why").json()["stopping"] == stopping
    line = (
        f"stopping: RECLAIM: {message} (SIGTERM sent at 2026-04-20T09:30:00Z, SIGKILL at 2026-04-20T09:32:00Z "
        "unless it exits first)"
    )
    status = mlq("status", str(job.pk))
    assert status.exit_code == 0 and line in status.output.splitlines(), status.output
    why = mlq("why", str(job.pk))
    assert why.output.splitlines()[:2] == [f"job {job.pk}: RUNNING", line], why.output

    clock.shift(timedelta(minutes=2))  # it ignored SIGTERM
    assert escalate_overdue() == 1
    killed = api("alice").get(f"/api/v1/jobs/{job.pk}").json()["stopping"]
    assert killed == {**stopping, "signal": "SIGKILL"}
    assert f"stopping: RECLAIM: {message} (SIGKILL sent at 2026-04-20T09:32:00Z)" in mlq("status", str(job.pk)).output


def test_a_drained_job_says_its_node_is_draining(api, leader):
    job = submit(api)
    start(job)
    node = job.tasks.get().node
    nodes.do_drain(node=node, user=get_user_model().objects.get(username="ops"), reason="replace the NIC")
    stopping = api("alice").get(f"/api/v1/jobs/{job.pk}").json()["stopping"]
    assert (stopping["cause"], stopping["message"], stopping["preempted_for"], stopping["signal"]) == (
        "DRAIN",
        f"node {node.name} is draining: replace the NIC",
        None,
        "SIGTERM",
    )
