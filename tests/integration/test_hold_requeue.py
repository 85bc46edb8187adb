"""Hold, release and requeue (issue 15): POST /api/v1/jobs/{id}/hold, /release, /requeue."""

import pytest

from scheduling import reports
from scheduling.job_control import (
    ALREADY_STOPPING,
    HELD_ABOVE,
    HOLD_NOT_PENDING,
    NOT_HELD,
    NOT_YOURS,
    REQUEUE_CANCELLING,
    REQUEUE_NOT_PLACED,
)
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Task, UsageRecord
from scheduling.web.explanations import why_answer
from teams.models import AuditEvent
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.integration.test_scheduler_pass import submit as submit_spec

TEAM = "research-foundation-models"


def submit(api, user="alice", **overrides) -> Job:
    return submit_spec(api, user, client_job_id=None, **overrides)  # a new job each time


def post(api, user: str, job: Job, verb: str, body: dict | None = None):
    return api(user).post(f"/api/v1/jobs/{job.pk}/{verb}", body or {}, format="json")


# --- hold and release ----------------------------------------------------------------------


def test_a_held_job_is_not_placed_while_a_smaller_one_is_and_released_it_is(api, leader):
    big = submit(api, resources={"gpu_count": 16})
    response = post(api, "alice", big, "hold", {"reason": "waiting for the data"})
    assert response.status_code == 200, response.json()
    assert response.json()["held"] is True and response.json()["held_by_name"] == "alice"
    small = submit(api, resources={"gpu_count": 8})

    run_pass(epoch=leader)
    big.refresh_from_db()
    small.refresh_from_db()
    assert (big.state, small.state) == ("PENDING", "ASSIGNED")
    assert (big.reason_code, big.reason_message) == ("HELD", "held by alice: waiting for the data")
    why = api("alice").get(f"/api/v1/jobs/{big.pk}/why").json()
    assert why["reason"]["code"] == "HELD" and why["reason"]["message"] == "held by alice: waiting for the data"

    response = post(api, "alice", big, "release")
    assert response.status_code == 200, response.json()
    assert (response.json()["held"], response.json()["held_by_name"], response.json()["held_reason"]) == (False, "", "")
    big.refresh_from_db()
    assert big.reason_code == "NOT_YET_SCHEDULED"  # not the pass's stale HELD
    run_pass(epoch=leader)
    big.refresh_from_db()
    assert big.state == "ASSIGNED"


def test_hold_and_release_are_audited(api, leader):
    job = submit(api)
    post(api, "alice", job, "hold")
    post(api, "rita", job, "release")  # a lead of the job's team may
    events = AuditEvent.objects.filter(job=job, kind="JOB_CHANGED").order_by("id")
    assert [(e.actor_name, e.message, e.data) for e in events] == [
        (
            "alice",
            "held by alice: it will not start until it is released",
            {"field": "held", "before": False, "after": True},
        ),
        ("rita", "released by rita", {"field": "held", "before": True, "after": False}),
    ]


def test_holding_a_held_job_changes_nothing(api, leader):
    job = submit(api)
    post(api, "alice", job, "hold", {"reason": "first"})
    response = post(api, "rita", job, "hold", {"reason": "second"})
    assert response.status_code == 200
    assert (response.json()["held_by_name"], response.json()["held_reason"]) == ("alice", "first")
    assert AuditEvent.objects.filter(job=job, kind="JOB_CHANGED").count() == 1


def test_only_a_pending_job_can_be_held(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    response = post(api, "alice", job, "hold")
    assert response.status_code == 409
    assert response.json()["detail"] == HOLD_NOT_PENDING.format(job_id=job.pk, state="ASSIGNED")
    job.refresh_from_db()
    assert not job.held and not AuditEvent.objects.filter(job=job, kind="JOB_CHANGED").exists()


def test_releasing_a_job_not_held_is_a_409(api, leader):
    job = submit(api)
    response = post(api, "alice", job, "release")
    assert response.status_code == 409
    assert response.json()["detail"] == NOT_HELD.format(job_id=job.pk)


@pytest.mark.parametrize("verb", ["hold", "release", "requeue"])
def test_who_may_not_cancel_may_not_hold_release_or_requeue(api, leader, verb):
    job = submit(api, user="rita")
    response = post(api, "alice", job, verb)
    assert response.status_code == 403
    assert response.json()["detail"] == NOT_YOURS.format(owner="rita", team=TEAM, verb=verb, job_id=job.pk)
    assert post(api, "paul", job, verb).status_code == 404  # not even visible
    assert post(api, None, job, verb).status_code in (401, 403)
    job.refresh_from_db()
    assert not job.held and not AuditEvent.objects.filter(job=job, kind__in=("JOB_CHANGED", "STOP_REQUESTED")).exists()


@pytest.mark.parametrize("holder", ["rita", "ops"])
def test_a_hold_a_lead_or_an_admin_set_is_not_its_owners_to_release(api, leader, holder):
    """QA: a member undid her lead's hold. As Slurm's admin hold: a lead of the job's team (or
    above) or an admin releases it; its owner's own hold stays anyone's who may control it."""
    job = submit(api)
    assert post(api, holder, job, "hold", {"reason": "wait for the eval"}).status_code == 200
    refused = post(api, "alice", job, "release")
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        HELD_ABOVE.format(job_id=job.pk, holder=holder, team=TEAM),
    )
    job.refresh_from_db()
    assert job.held and not AuditEvent.objects.filter(job=job, data__after=False).exists()
    assert post(api, "rita", job, "release").status_code == 200
    assert post(api, "alice", job, "hold").status_code == 200
    assert post(api, "rita", job, "release").status_code == 200  # the owner's own hold: a lead releases it
    assert post(api, "alice", job, "hold").status_code == 200
    assert post(api, "alice", job, "release").status_code == 200


@pytest.mark.parametrize("verb", ["hold", "requeue"])
def test_a_bad_reason_is_a_400_naming_it(api, leader, verb):
    job = submit(api)
    response = post(api, "alice", job, verb, {"reason": "x" * 501})
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["reason"]
    job.refresh_from_db()
    assert not job.held


# --- requeue -------------------------------------------------------------------------------


def exit_on_sigterm(job: Job) -> None:
    for task in job.tasks.order_by("rank"):
        reports.do_report_exited(job_id=job.pk, rank=task.rank, attempt=task.attempt, exit_code=143)


def test_requeue_stops_a_running_job_gracefully_and_spends_nothing(api, leader):
    job = submit(
        api, resources={"gpu_count": 16}, restart_policy={"max_retries": 0, "max_restarts": 0}, grace_period_seconds=90
    )
    run_pass(epoch=leader)
    run_all_ranks(job)
    response = post(api, "alice", job, "requeue", {"reason": "new data"})
    assert response.status_code == 200, response.json()
    tasks = list(Task.objects.filter(job=job))
    assert {(t.stop_reason, t.stop_signal) for t in tasks} == {("REQUEUED", "TERM")}
    assert {round((t.kill_at - t.stop_requested_at).total_seconds()) for t in tasks} == {90}
    stop = AuditEvent.objects.get(job=job, kind="STOP_REQUESTED")
    assert (stop.actor_name, stop.reason, stop.message) == ("alice", "REQUEUED", "new data")

    exit_on_sigterm(job)
    run_pass(epoch=leader)  # settled: PENDING as a new attempt, and placed again on the idle cluster
    job.refresh_from_db()
    assert (job.state, job.retries_used, job.restarts_used, job.preemptions) == ("ASSIGNED", 0, 0, 0)
    assert {t.attempt for t in job.tasks.all()} == {2}
    retry = AuditEvent.objects.get(job=job, kind="RETRY")
    assert retry.message == (
        "requeued on request, resuming from its last checkpoint, if any (retries and restarts not spent)"
    )
    # The owner stopped the work: no lost work on the timeline, as in the usage reports.
    assert not AuditEvent.objects.filter(job=job, data__has_key="lost_gpu_hours").exists()
    record = UsageRecord.objects.get(job_id=job.pk, attempt=1)
    assert (record.lost_gpu_hours, record.lost_cause) == (0.0, "")
    run_all_ranks(job, exit_code=0)
    job.refresh_from_db()
    assert job.state == "SUCCEEDED"


def test_requeue_ignores_on_preemption_fail(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"on_preemption": "fail"})
    run_pass(epoch=leader)
    run_all_ranks(job)
    post(api, "rita", job, "requeue")
    exit_on_sigterm(job)
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert job.state == "ASSIGNED"


def test_requeuing_twice_changes_nothing(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    post(api, "alice", job, "requeue")
    response = post(api, "alice", job, "requeue")
    assert response.status_code == 200
    assert AuditEvent.objects.filter(job=job, kind="STOP_REQUESTED").count() == 1


def test_a_pending_job_cannot_be_requeued(api, leader):
    job = submit(api)
    response = post(api, "alice", job, "requeue")
    assert response.status_code == 409
    assert response.json()["detail"] == REQUEUE_NOT_PLACED.format(job_id=job.pk, state="PENDING")


def test_a_job_being_stopped_for_another_reason_is_not_requeued(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    Task.objects.filter(job=job).update(stop_reason="DRAIN", stop_signal="TERM")
    response = post(api, "alice", job, "requeue")
    assert response.status_code == 409
    assert response.json()["detail"] == ALREADY_STOPPING.format(job_id=job.pk, reason="DRAIN")


def test_a_job_being_cancelled_is_not_requeued(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    run_all_ranks(job)
    api("alice").post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    response = post(api, "alice", job, "requeue")
    assert response.status_code == 409
    assert response.json()["detail"] == REQUEUE_CANCELLING.format(job_id=job.pk)


def test_why_answer_of_a_held_job_names_who_held_it(api, leader):
    job = submit(api)
    post(api, "alice", job, "hold", {"reason": "not yet"})
    job.refresh_from_db()
    assert why_answer(job)["reason"]["message"] == "held by alice: not yet"


def test_the_job_page_says_who_held_it_and_why(api, leader, logged_in):
    job = submit(api)
    post(api, "rita", job, "hold", {"reason": "the shards are being rewritten"})
    html = logged_in("alice").get(f"/jobs/{job.pk}/").content.decode()
    assert "<code>HELD</code> held by rita: the shards are being rewritten" in html
