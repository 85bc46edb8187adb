"""QA stop 49, usage: an attempt closes with the job's state as it leaves its nodes, PREEMPTED for
a drain, before the leader's verdict; where the verdict ended the job there (its restart policy
fails it on a preemption), the usage report still counted the job among the PREEMPTED, which
docs/usage.md says are waiting to resume. The attempt ended the job: its row and its part of
the rollup say FAILED, as a rebuild of the rollup does; the reports page still counts it among
the preemptions (a review: its column read outcomes). A user's requeue cancelled before the
next pass likewise ends CANCELLED, not REQUEUED."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command

from scheduling.leader.worker import run_pass
from scheduling.models import Job, LostCause
from tests.conftest import FROZEN_AT as START
from tests.integration.test_agent_api import beat
from tests.integration.test_checkpoints import A, report, running_job
from tests.integration.test_reports_page import table
from tests.integration.test_usage_ledger import join_token, rolled, row  # noqa: F401 (join_token: a fixture)


@pytest.mark.parametrize("policy, outcome", [("fail", "FAILED"), ("resume_from_checkpoint", "PREEMPTED")])
def test_an_attempt_whose_preemption_ended_its_job_counts_as_the_jobs_end(
    clock, api, leader, logged_in, policy, outcome
):
    job_id, clients = running_job(api, leader, checkpoint=False)
    Job.objects.filter(pk=job_id).update(on_preemption=policy)
    clock.shift(timedelta(minutes=30))
    api("ops").post(f"/api/v1/nodes/{A}/drain", {"reason": "kernel upgrade"}, format="json")
    clock.shift(timedelta(seconds=3))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])
    assert row(job_id).outcome == "PREEMPTED"  # off its nodes; the leader's verdict to come
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job_id).state == ("FAILED" if policy == "fail" else "PENDING")

    record = row(job_id)
    assert (record.outcome, record.lost_cause, record.stop_reason) == (outcome, LostCause.DRAIN, "DRAIN")
    jobs = {outcome: 1} if outcome == "FAILED" else {"PREEMPTED": 1}  # still its last attempt
    for window in (
        {"from": START.isoformat(), "to": (START + timedelta(hours=2)).isoformat()},  # the ledger's rows
        {"from": START.date().isoformat(), "to": (START.date() + timedelta(days=1)).isoformat()},  # the rollup
    ):
        total = api("ops").get("/api/v1/usage", window).json()["total"]
        assert (total["attempts_by_outcome"], total["jobs_by_outcome"]) == ({outcome: 1}, jobs), window
    incremental = rolled()
    assert [day[1] for day in incremental[0]] == [outcome]
    call_command("rebuild_usage_rollup", stdout=io.StringIO())
    assert rolled() == incremental
    day = START.date().isoformat()
    page = logged_in("ops").get("/reports/", {"from": day, "to": day}).content.decode()
    assert [cells[:2] for cells in table(page, "lost")] == [["research-foundation-models", "1"]]  # preempted


def test_a_users_requeue_cancelled_before_the_next_pass_ends_cancelled(clock, api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    clock.shift(timedelta(minutes=20))
    assert api("alice").post(f"/api/v1/jobs/{job_id}/requeue", {}, format="json").status_code == 200
    run_pass(epoch=leader)
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=143)])
    assert (Job.objects.get(pk=job_id).state, row(job_id).outcome) == ("PREEMPTED", "REQUEUED")
    assert api("alice").post(f"/api/v1/jobs/{job_id}/cancel", {}, format="json").status_code in (200, 202)
    run_pass(epoch=leader)
    assert (Job.objects.get(pk=job_id).state, row(job_id).outcome) == ("CANCELLED", "CANCELLED")
    window = {"from": START.isoformat(), "to": (START + timedelta(hours=2)).isoformat()}
    total = api("ops").get("/api/v1/usage", window).json()["total"]
    assert total["jobs_by_outcome"] == {"CANCELLED": 1}
