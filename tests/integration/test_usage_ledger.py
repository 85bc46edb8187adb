"""The usage ledger: a row per attempt, opened at placement and closed when its last rank ends,
in the transitions' transactions; the work lost since the confirmed checkpoint and why; rows
that outlive their job. Through the agent API, on a frozen clock."""

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling.leader.worker import run_pass
from scheduling.ledger import EndedRank, attempt_lost_cause
from scheduling.models import Job, LostCause, UsageDay, UsageRecord, UsageWaitDay
from tests.conftest import FROZEN_AT as START
from tests.integration.test_agent_api import JOIN, beat
from tests.integration.test_checkpoints import A, checkpoint, drain_and_settle, report, running_job, send


@pytest.fixture(autouse=True)
def join_token(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def row(job_id: int, attempt: int = 1) -> UsageRecord:
    return UsageRecord.objects.get(job_id=job_id, attempt=attempt)


def rolled() -> tuple[list, list]:
    """The usage rollup's rows: (day, outcome, lost cause, GPU- and CPU-microseconds, endings,
    lost GPU-hours, endings superseded) and (day, wait bar, attempts)."""
    days = UsageDay.objects.order_by("day", "outcome").values_list(
        "day", "outcome", "lost_cause", "gpu_us", "cpu_us", "ended", "lost_gpu_hours", "superseded"
    )
    waits = UsageWaitDay.objects.order_by("day", "bar").values_list("day", "bar", "attempts")
    return list(days), list(waits)


def test_a_placed_attempt_opens_a_row_with_what_the_reports_need(clock, api, leader):
    job_id, _ = running_job(api, leader)
    record = row(job_id)
    job = Job.objects.select_related("team", "owner").get(pk=job_id)
    assert (record.team_id, record.team_name, record.owner_id, record.owner_name) == (
        job.team_id,
        "research-foundation-models",
        job.owner_id,
        "alice",
    )
    assert (record.resource_class, record.priority, record.gpus, record.cpus) == ("gpu:H100", "P1", 8, 16)
    assert (record.queued_at, record.started_at, record.ended_at, record.outcome) == (START, START, None, "")


def test_a_succeeded_attempt_closes_at_its_last_ranks_end_and_lost_nothing(clock, api, leader):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(hours=2, minutes=30))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])
    record = row(job_id)
    assert (record.ended_at, record.outcome, record.lost_gpu_hours, record.lost_cause) == (
        START + timedelta(hours=2, minutes=30),
        "SUCCEEDED",
        0.0,
        "",
    )
    # The same transaction added it to the rollup: 8 GPUs and 16 CPUs for 2.5 h, one ending.
    held_us = int(2.5 * 3600e6)
    assert rolled() == (
        [(START.date(), "SUCCEEDED", "", 8 * held_us, 16 * held_us, 1, 0.0, 0)],
        [(START.date(), 0.0, 1)],
    )


def test_a_drained_attempt_records_the_work_lost_since_its_checkpoint_and_the_next_attempt_waits_from_then(
    clock, api, leader
):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(minutes=30))
    saved = timezone.now() - timedelta(minutes=6)
    send(clients[A], A, checkpoint(job_id, step=300, at=saved, epoch=leader))
    clock.shift(timedelta(minutes=1))
    drain_and_settle(api, leader, clients, job_id, clock)
    ended = START + timedelta(minutes=31, seconds=3)
    first = row(job_id)
    assert (first.ended_at, first.outcome, first.stop_reason, first.failure_class) == (
        ended,
        "PREEMPTED",
        "DRAIN",
        "INFRA",
    )
    assert (first.lost_cause, first.lost_since) == (LostCause.DRAIN, saved)
    assert first.lost_gpu_hours == round(8 * (ended - saved).total_seconds() / 3600, 4)  # 0.8067

    api("ops").post(f"/api/v1/nodes/{A}/uncordon", {"reason": "done"}, format="json")
    clock.shift(timedelta(minutes=4))
    run_pass(epoch=leader)
    second = row(job_id, 2)
    assert (second.queued_at, second.started_at, second.ended_at) == (ended, ended + timedelta(minutes=4), None)
    # The drained attempt is in the rollup with its loss, superseded by the one that opened;
    # the running one is not, yet.
    held_us = (ended - START) // timedelta(microseconds=1)
    day = START.date()
    assert rolled() == (
        [(day, "PREEMPTED", LostCause.DRAIN, 8 * held_us, 16 * held_us, 1, first.lost_gpu_hours, 1)],
        [(day, 0.0, 1)],
    )
    assert row(job_id).superseded and not second.superseded
    window = {"from": START.isoformat(), "to": (START + timedelta(days=1)).isoformat()}
    total = api("ops").get("/api/v1/usage", window).json()["total"]
    assert (total["attempts_by_outcome"], total["jobs_by_outcome"]) == ({"PREEMPTED": 1}, {})  # it runs again
    incremental = rolled()
    call_command("rebuild_usage_rollup", stdout=io.StringIO())
    assert rolled() == incremental


def test_a_failed_attempt_without_a_checkpoint_lost_everything_since_its_start(clock, api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    clock.shift(timedelta(minutes=45))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=3)])
    record = row(job_id)
    assert (record.outcome, record.failure_class, record.lost_cause, record.lost_since) == (
        "FAILED",
        "APP",
        LostCause.FAILURE,
        START,
    )
    assert record.lost_gpu_hours == 6.0  # 8 GPUs x 45 minutes


def test_a_cancelled_attempt_lost_nothing_the_owner_did_not_choose_to_lose(clock, api, leader):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(minutes=20))
    api("alice").post(f"/api/v1/jobs/{job_id}/cancel")
    run_pass(epoch=leader)
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=143)])
    record = row(job_id)
    assert (record.outcome, record.stop_reason, record.lost_cause, record.lost_gpu_hours) == (
        "CANCELLED",
        "CANCELLED",
        "",
        0.0,
    )


def test_a_users_requeue_is_no_preemption_in_the_ledger(clock, api, leader):
    """QA: an attempt its user requeued (`mlq requeue`) was an outcome PREEMPTED in usage and
    on the reports page, while the job counts no preemption."""
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(minutes=20))
    response = api("alice").post(f"/api/v1/jobs/{job_id}/requeue", {"reason": "new data"}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=143)])
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job_id).preemptions == 0
    record = row(job_id)
    assert (record.outcome, record.stop_reason) == ("REQUEUED", "REQUEUED")
    answer = api("alice").get("/api/v1/usage?group_by=team&to=2026-04-20T10:00:00Z").json()  # past its end
    outcomes = answer["total"]["attempts_by_outcome"]
    assert "PREEMPTED" not in outcomes and outcomes.get("REQUEUED") == 1


def test_the_ledger_outlives_its_job(clock, api, leader):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(hours=1))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])
    Job.objects.filter(pk=job_id).delete()
    assert row(job_id).gpus == 8


def test_a_transition_that_rolls_back_leaves_no_row(clock, api, leader):
    from django.db import transaction

    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(hours=1))
    with pytest.raises(RuntimeError), transaction.atomic():
        beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])
        raise RuntimeError
    assert (row(job_id).ended_at, row(job_id).outcome) == (None, "")


T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


def rank(state="FAILED", stop="", failure="", *, ended_min=10, reclaimed=False) -> EndedRank:
    return EndedRank(state, stop, failure, T0, T0 + timedelta(minutes=ended_min), None, 8, reclaimed)


@pytest.mark.parametrize(
    "ranks, cause",
    [
        ([rank("SUCCEEDED")], None),
        ([rank("PREEMPTED", "PREEMPTED", "INFRA")], LostCause.PREEMPTION),
        ([rank("PREEMPTED", "DRAIN", "INFRA")], LostCause.DRAIN),
        ([rank("FAILED", "DRAIN", "INFRA", reclaimed=True)], LostCause.RECLAIM),
        ([rank("FAILED", "", "INFRA")], LostCause.NODE_LOSS),
        ([rank("FAILED", "", "APP")], LostCause.FAILURE),
        ([rank("FAILED", "TIMEOUT", "TIMEOUT")], LostCause.FAILURE),
        ([rank("CANCELLED", "CANCELLED", "CANCELLED")], None),
        ([rank("PREEMPTED", "REQUEUED", "INFRA")], None),
        ([rank("EARLY_STOPPED", "EARLY_STOPPED", "EARLY_STOPPED")], None),
        # A gang: the rank that ended first says why; its peers were stopped because of it.
        (
            [rank("FAILED", "PEER_FAILED", "INFRA", ended_min=12), rank("FAILED", "", "INFRA", ended_min=11)],
            LostCause.NODE_LOSS,
        ),
        ([rank("FAILED", "PEER_FAILED", "INFRA", ended_min=12), rank("SUCCEEDED", ended_min=5)], LostCause.FAILURE),
    ],
)
def test_why_an_attempts_work_was_lost(ranks, cause):
    assert attempt_lost_cause(ranks) == cause
