"""Median early stopping on the real store (issue 16): the leader stops a sweep's trial that is
clearly worse than the others, its exit makes it EARLY_STOPPED, the next trial takes its slot,
and the sweep still succeeds. Metrics are written as the ingest writes them (JobMetric rows, and
the parent's `metrics_changed_at` stamped)."""

import pytest
from django.utils import timezone

from scheduling import reports
from scheduling.fencing import Deposed
from scheduling.leader.early_stopping import stop_worse_trials
from scheduling.leader.worker import run_pass
from scheduling.models import Job, JobMetric, StopReason, Task
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent, EventKind
from tests.integration.test_groups import children, states, submit
from tests.integration.test_scheduler_pass import run_all_ranks

SWEEP = {
    "method": "grid",
    "parameters": {"lr": [0.1, 0.01, 0.001, 0.0001]},
    "parallelism": 2,
    "metric": {"name": "val_loss", "goal": "minimize"},
    "early_stop": {"rule": "median", "min_reports": 3},
}
WHY = (
    "val_loss: best 0.9 by step 300 is worse than the median 0.365 of 2 other trials at step 300 "
    "(median stopping rule, after 3 reports)"
)


def report(job: Job, *values: float, rank: int = 0) -> None:
    """What the ingest writes for a trial that reported `values` at steps 100, 200, ...: its
    rows, then its sweep's `metrics_changed_at`."""
    attempt = job.tasks.get(rank=rank).attempt
    first = JobMetric.objects.filter(job=job, rank=rank, attempt=attempt).count()
    JobMetric.objects.bulk_create(
        [
            JobMetric(
                job=job, rank=rank, attempt=attempt, seq=first + n, step=100 * (first + n + 1), name="val_loss", value=v
            )
            for n, v in enumerate(values)
        ]
    )
    Job.objects.filter(pk=job.parent_id).update(metrics_changed_at=timezone.now())


def start(job: Job) -> Job:
    run_all_ranks(job)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def sweep(api, leader):
    """Trial 0 ran well and finished; trials 1 (clearly worse) and 2 (good) run and have each
    reported 3 steps; trial 3 waits for a slot."""
    parent = submit(api, sweep=SWEEP)
    run_pass(epoch=leader)
    first, second = (start(kid) for kid in children(parent)[:2])
    report(first, 0.5, 0.4, 0.35)
    report(second, 1.1, 0.95, 0.9)
    run_pass(epoch=leader)  # one other trial is not enough to judge by: nothing stops
    assert Task.objects.get(job=second).stop_reason == ""
    run_all_ranks(first, exit_code=0)
    run_pass(epoch=leader)
    third = start(children(parent)[2])
    report(third, 0.45, 0.4, 0.38)
    return parent


def test_the_leader_stops_the_clearly_worse_trial_and_the_next_takes_its_slot(api, leader, sweep):
    parent = sweep
    run_pass(epoch=leader)
    worse = children(parent)[1]
    task = worse.tasks.get()
    assert (task.stop_reason, task.stop_signal) == ("EARLY_STOPPED", "TERM")
    event = AuditEvent.objects.get(job=worse, kind=EventKind.STOP_REQUESTED)
    assert (event.reason, event.message, event.actor_name) == ("EARLY_STOPPED", WHY, "scheduler")
    assert Task.objects.get(job=children(parent)[2]).stop_reason == ""  # 0.38 beats the others' median

    reports.do_report_exited(job_id=worse.pk, rank=0, attempt=task.attempt, exit_code=143)  # it took SIGTERM
    body = api("alice").get(f"/api/v1/jobs/{worse.pk}").json()
    assert (body["state"], body["failure_class"]) == ("EARLY_STOPPED", "EARLY_STOPPED")
    assert states(parent) == ["SUCCEEDED", "EARLY_STOPPED", "RUNNING", "PENDING"]

    run_pass(epoch=leader)  # its slot is free: the last trial is placed (parallelism 2)
    assert states(parent) == ["SUCCEEDED", "EARLY_STOPPED", "RUNNING", "ASSIGNED"]
    for kid in children(parent)[2:]:
        run_all_ranks(kid, exit_code=0)
    parent.refresh_from_db()
    assert parent.state == "SUCCEEDED"
    group = api("alice").get(f"/api/v1/jobs/{parent.pk}").json()["group"]
    assert (group["succeeded"], group["early_stopped"], group["failed"]) == (3, 1, 0)


def test_the_rule_looks_again_only_after_new_reports(leader, sweep, django_assert_num_queries):
    parent = sweep
    assert stop_worse_trials(epoch=leader, now=timezone.now()) == 1
    parent.refresh_from_db()
    assert parent.early_stop_checked_at == parent.metrics_changed_at
    with django_assert_num_queries(1):  # which sweeps are due: none
        assert stop_worse_trials(epoch=leader, now=timezone.now()) == 0

    report(children(parent)[2], 0.37)  # a new report: the sweep is judged again, stopping nothing new
    assert stop_worse_trials(epoch=leader, now=timezone.now()) == 0
    assert AuditEvent.objects.filter(kind=EventKind.STOP_REQUESTED, reason="EARLY_STOPPED").count() == 1
    parent.refresh_from_db()
    assert parent.early_stop_checked_at == parent.metrics_changed_at


def test_a_trial_waiting_again_after_a_preemption_ends_early_stopped_at_once(api, leader, sweep):
    parent = sweep
    worse = children(parent)[1]
    task = worse.tasks.get()
    do_request_stop(job_id=worse.pk, reason=StopReason.PREEMPTED, grace_s=30, message="preempted for job 99")
    reports.do_report_exited(job_id=worse.pk, rank=0, attempt=task.attempt, exit_code=143)
    # The pass requeues it (a preemption), then judges the sweep: it waits, with no process to
    # signal, so it ends EARLY_STOPPED there and then, and the last trial takes its slot.
    run_pass(epoch=leader)
    worse.refresh_from_db()
    assert (worse.state, worse.failure_class, worse.preemptions) == ("EARLY_STOPPED", "EARLY_STOPPED", 1)
    ended = AuditEvent.objects.get(job=worse, kind=EventKind.TRANSITION, to_state="EARLY_STOPPED")
    assert (ended.from_state, ended.reason, ended.message) == ("PENDING", "EARLY_STOPPED", WHY)  # the state it was in
    assert states(parent) == ["SUCCEEDED", "EARLY_STOPPED", "RUNNING", "ASSIGNED"]


def test_a_deposed_epoch_writes_nothing(leader, sweep):
    parent = sweep
    checked = Job.objects.get(pk=parent.pk).early_stop_checked_at  # by the passes before trial 2 reported
    with pytest.raises(Deposed):
        stop_worse_trials(epoch=leader - 1, now=timezone.now())
    assert not Task.objects.filter(job__parent=parent).exclude(stop_reason="").exists()
    assert not AuditEvent.objects.filter(kind=EventKind.STOP_REQUESTED).exists()
    parent.refresh_from_db()
    assert parent.early_stop_checked_at == checked < parent.metrics_changed_at
