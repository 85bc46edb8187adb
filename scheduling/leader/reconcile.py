"""The leader's sweeps before each pass: the guarantees behind every timer and every retry.

1. grace deadlines past due -> SIGKILL; unstarted assignments of earlier leaders adopted;
   nodes silent too long -> SUSPECT, then LOST with their tasks failed (scheduling/leader/failures.py);
2. tasks past `max_runtime_hours` -> stop (TIMEOUT);
3. gangs with a failed rank -> stop the other ranks (PEER_FAILED);
4. attempts that ended without success -> cancel, fail, or requeue as a retry, a restart or
   after a preemption (the verdict is core/settle.py's; `do_settle` applies it);
5. pending jobs whose dependency conditions can no longer be met -> CANCELLED, a pipeline's
   steps SKIPPED (DEPENDENCY, scheduling/dependencies.py);
6. job groups that failed -> their unfinished children cancelled (scheduling/groups.py);
7. sweeps with new metric reports -> trials worse than the median stopped (EARLY_STOPPED,
   scheduling/leader/early_stopping.py);
8. cancelled jobs still running -> stop (CANCELLED).
Only the leader requeues or retries, and every write here is fenced by its epoch.
"""

import functools
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Min, OuterRef, Q

from scheduling import dependencies, groups, job_control, ledger, lifecycle, metrics, notify, signals
from scheduling.core.reasons import ReasonCode
from scheduling.core.settle import (
    MAKING_ROOM,
    Action,
    Attempt,
    Counter,
    EndedTask,
    Outcome,
    RestartMode,
    RestartPolicy,
    TaskEnd,
    Verdict,
    settle,
)
from scheduling.fencing import fenced
from scheduling.group_state import sync_group_state, sync_parent_of
from scheduling.leader import failures
from scheduling.leader.early_stopping import stop_worse_trials
from scheduling.models import FailureClass, Job, StopReason, Task, TaskState
from scheduling.states import ON_NODE, UNSUCCESSFUL
from scheduling.stop_requests import requests_of, stop_cause
from scheduling.stopping import do_request_stop, escalate_overdue
from teams.models import AuditEvent, EventKind

S = TaskState
HOUR = timedelta(hours=1)


@dataclass
class Swept:
    killed: int = 0
    stops: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0
    skipped: int = 0
    nodes: dict[str, int] = field(default_factory=dict)

    def count(self, verdict: Verdict | None) -> None:
        """A verdict that committed (None: another actor settled the job first)."""
        if verdict is None:
            return
        if verdict.action == Action.REQUEUE:
            if verdict.counter == Counter.RETRIES:
                self.retried += 1
            else:
                self.requeued += 1
        elif verdict.action == Action.FAIL:
            self.failed += 1
        elif verdict.action == Action.CANCEL:
            self.cancelled += 1


def reconcile(*, epoch: int, now) -> Swept:
    """The sweeps, in the module's order. Every count is taken after its transaction commits:
    a sweep that rolls back counts nothing."""
    swept = Swept()
    with fenced(epoch):
        killed = escalate_overdue(now=now)
        # Assignments made under an earlier leader, not yet started, are this leader's now:
        # an agent that has seen this epoch would refuse the older one.
        Task.objects.filter(state=S.ASSIGNED, epoch__lt=epoch).update(epoch=epoch)
    swept.killed = killed
    swept.nodes = failures.detect(epoch=epoch, now=now)
    swept.stops[StopReason.TIMEOUT] = _stop_each(_timed_out(now), StopReason.TIMEOUT, epoch=epoch, now=now)
    swept.stops[StopReason.PEER_FAILED] = _stop_each(_broken_gangs(), StopReason.PEER_FAILED, epoch=epoch, now=now)
    swept.cancelled += _settle_cancelled(epoch=epoch, now=now)
    for job_id in Job.objects.filter(_attempt_over()).order_by("id").values_list("id", flat=True):
        swept.count(do_settle(job_id, epoch=epoch, now=now))
    cancelled, skipped = dependencies.end_never_runnable(epoch=epoch, now=now)
    swept.cancelled += cancelled
    swept.skipped += skipped
    swept.cancelled += groups.cancel_rest_of_failed(epoch=epoch, now=now)
    swept.stops[StopReason.EARLY_STOPPED] = stop_worse_trials(epoch=epoch, now=now)
    # Last, so that the children of a group that failed in this sweep are stopped in it too.
    swept.stops[StopReason.CANCELLED] = _stop_each(_cancelled_running(), StopReason.CANCELLED, epoch=epoch, now=now)
    return swept


STOP_MESSAGES = {
    StopReason.TIMEOUT: "ran past max_runtime_hours ({hours:g} h)",
    StopReason.CANCELLED: "cancelled while on its nodes",  # ASSIGNED (starting) or RUNNING
    StopReason.PEER_FAILED: "another rank of its gang failed; the gang restarts whole",
}


def _stop_each(jobs, reason: str, *, epoch: int, now) -> int:
    stopped = 0
    for job in jobs:
        with fenced(epoch):
            asked = do_request_stop(
                job_id=job.pk,
                reason=reason,
                grace_s=job.grace_period_seconds,
                now=now,
                message=STOP_MESSAGES[reason].format(hours=job.max_runtime_hours),
            )
        stopped += bool(asked)
    return stopped


def _timed_out(now):
    """Jobs whose current attempt has run past max_runtime_hours (measured from the attempt's
    first rank to start: a restart gets its full allowance again)."""
    starts = dict(
        Task.objects.filter(state=S.RUNNING, stop_reason="")
        .values("job_id")
        .annotate(start=Min("started_at"))
        .values_list("job_id", "start")
    )
    jobs = Job.objects.filter(pk__in=starts).only("id", "max_runtime_hours", "grace_period_seconds")
    return [job for job in jobs if starts[job.pk] and starts[job.pk] + job.max_runtime_hours * HOUR <= now]


def _cancelled_running():
    return (
        Job.objects.filter(cancel_requested_at__isnull=False, tasks__state__in=ON_NODE, tasks__stop_reason="")
        .distinct()
        .only("id", "grace_period_seconds", "max_runtime_hours")
    )


def _broken_gangs():
    """Jobs with a rank still active and unasked to stop while another rank has failed."""
    failed_peer = Task.objects.filter(job_id=OuterRef("job_id"), state__in=UNSUCCESSFUL)
    job_ids = Task.objects.filter(state__in=ON_NODE, stop_reason="").filter(Exists(failed_peer)).values("job_id")
    return Job.objects.filter(pk__in=job_ids).only("id", "grace_period_seconds", "max_runtime_hours")


def _attempt_over() -> Q:
    """Jobs whose tasks have all ended (that is what these derived states mean), not all in
    success, with no verdict yet."""
    return Q(state__in=UNSUCCESSFUL, failure_class="")


SETTLE_BATCH = 1000


def _settle_cancelled(*, epoch: int, now) -> int:
    """Jobs CANCELLED with every rank CANCELLED and no verdict yet (a cancel that came before
    any rank was placed, or after all had stopped): their verdict is the cancel (core/settle.py,
    rule 1) and nothing is left to move, so they are settled SETTLE_BATCH to a transaction, each
    group derived once, not one `do_settle` each with its group counted again. A cancelled
    2,000-element array held the leader's sweep, and every placement, for 30 s (QA)."""
    other_ranks = Task.objects.filter(job_id=OuterRef("pk")).exclude(state=S.CANCELLED)
    settled = 0
    while True:
        with fenced(epoch):
            ids = list(
                Job.objects.select_for_update(no_key=True)
                .filter(state=S.CANCELLED, failure_class="")
                .exclude(Exists(other_ranks))
                .order_by("pk")
                .values_list("pk", flat=True)[:SETTLE_BATCH]
            )
            if not ids:
                return settled
            Job.objects.filter(pk__in=ids).update(failure_class=FailureClass.CANCELLED, updated_at=now)
            parents = Job.objects.filter(pk__in=ids, parent__isnull=False).values_list("parent_id", flat=True)
            for parent_id in sorted(set(parents)):
                sync_group_state(parent_id, now=now)
            transaction.on_commit(functools.partial(_count_cancelled, len(ids)))
            notify.jobs_changed(ids)
        settled += len(ids)


def _count_cancelled(count: int) -> None:
    metrics.OUTCOMES.labels("cancelled", FailureClass.CANCELLED).inc(count)


def do_settle(job_id: int, *, epoch: int, now) -> Verdict | None:
    """Decide what the job's ended attempt means (core/settle.py) and apply the verdict, under
    the job's row lock and on what is true then (a cancel may have landed since the job was
    listed). Only here are retries and restarts spent. Returns the verdict once committed;
    None when there was nothing left to settle."""
    with fenced(epoch):
        job = Job.objects.select_for_update(no_key=True).get(pk=job_id)
        if job.state not in UNSUCCESSFUL or job.failure_class:
            return None
        verdict = settle(_attempt(job), _outcome(job), restart_policy(job))
        do_apply_verdict(job, verdict, now=now, lost=lost_work(job, now=now))
    return verdict


def _attempt(job: Job) -> Attempt:
    return Attempt(retries_used=job.retries_used, restarts_used=job.restarts_used, preemptions=job.preemptions)


def _outcome(job: Job) -> Outcome:
    fields = ("rank", "state", "failure_class", "stop_reason", "exit_code", "exit_signal", "exit_cause")
    tasks = tuple(
        EndedTask(
            row["rank"],
            TaskEnd(row["state"]),
            row["failure_class"],
            row["stop_reason"],
            row["exit_code"],
            row["exit_signal"],
            row["exit_cause"],
        )
        for row in job.tasks.values(*fields)
    )
    making_room = any(task.stop_reason in MAKING_ROOM for task in tasks)
    return Outcome(
        tasks,
        cancel_requested=job.cancel_requested_at is not None,
        stop_cause=_making_room_cause(job.pk) if making_room else "",
    )


def _making_room_cause(job_id: int) -> str:
    """Why the attempt was stopped to make room, as `mlq why` says it (a reclaim, a node's fault,
    a drain, a preemption): one query, only for such a stop."""
    request = requests_of(job_id, tuple(MAKING_ROOM)).first()
    return stop_cause(request["request"]) if request else ""


def lost_work(job: Job, *, now) -> dict:
    """What the ended attempt lost (ledger.lost_work), read before the requeue clears the
    attempt's placement and checkpoints. Nothing for an attempt the owner stopped (a user's
    requeue): the usage ledger's rule (ledger.attempt_lost_cause), so the timeline and the
    reports agree."""
    ranks = ledger.ended_ranks(job.pk)
    return ledger.lost_work(ranks, now=now) if ledger.attempt_lost_cause(ranks) else {}


def restart_policy(job: Job) -> RestartPolicy:
    """The job's restart policy, with the cluster's back-off settings."""
    return RestartPolicy(
        max_retries=job.max_retries,
        max_restarts=job.max_restarts,
        on_preemption=RestartMode(job.on_preemption),
        on_node_failure=RestartMode(job.on_node_failure),
        checkpointing=bool(job.checkpoint),
        max_runtime_hours=job.max_runtime_hours,
        backoff_base_s=settings.MLQ_RETRY_BACKOFF_BASE_S,
        backoff_max_s=settings.MLQ_RETRY_BACKOFF_MAX_S,
    )


def do_apply_verdict(job: Job, verdict: Verdict, *, now, lost: dict | None = None) -> None:
    """The one place a verdict becomes writes, inside the caller's fenced transaction that
    holds the job's row lock (do_settle): the fenced, conditional transitions of the gang, the
    job's counter, the event, and the outcome counted once it commits. The attempt's `lost`
    work goes on the event that ends it (a requeue or a failure; a cancel is the user's)."""
    if verdict.action == Action.REQUEUE:
        _requeue(job, verdict, now=now, lost=lost or {})
    elif verdict.action == Action.FAIL:
        _end_failed(job, verdict, now=now, lost=lost or {})
    else:
        _end_stopped(job, verdict, now=now)


def _count_outcome(outcome: str, failure_class: str) -> None:
    """Counted once the transaction commits: a verdict rolled back (a deposed leader, a lost
    connection) ended nothing."""
    transaction.on_commit(metrics.OUTCOMES.labels(outcome, failure_class).inc)


def _requeue(job: Job, verdict: Verdict, *, now, lost: dict) -> None:
    """The whole gang goes back to PENDING as a new attempt (its finished ranks too)."""
    moved = lifecycle.transition_gang(
        job.pk,
        from_state=(S.FAILED, S.PREEMPTED, S.SUCCEEDED),
        to_state=S.PENDING,
        require_all=False,
        actor_name="scheduler",
        reason=verdict.code,
        message=verdict.message,
        data=lost,
        now=now,
    )
    if not moved:
        return
    not_before = now + timedelta(seconds=verdict.backoff_s) if verdict.backoff_s else None
    counted = {verdict.counter: verdict.count} if verdict.counter else {}  # a user's requeue counts nothing
    Job.objects.filter(pk=job.pk).update(
        not_before=not_before,
        finished_at=None,
        queued_at=now,  # its wait starts again (metrics, the queue page)
        updated_at=now,
        pending_reason_code=ReasonCode.BACKOFF if not_before else "",
        pending_reason_message=verdict.message if not_before else "",
        pending_histogram={},
        resume_next=verdict.resume,
        **counted,
    )
    held = job_control.hold_with_group(job, now=now)
    AuditEvent.objects.create(
        job=job,
        kind=EventKind.RETRY,
        actor_name="scheduler",
        reason=verdict.code,
        message=verdict.message + (HELD_WITH_GROUP.format(group=job.parent_id) if held else ""),
        data=counted,
        created_at=now,
    )
    notify.jobs_changed([job.pk])
    notify.wake_scheduler("requeue")


HELD_WITH_GROUP = "; held with its group (job {group}), which is held"


def _end_failed(job: Job, verdict: Verdict, *, now, lost: dict) -> None:
    """Ranks still PREEMPTED become FAILED, recorded as one transition that carries the
    verdict; when every rank had FAILED already, the job is FAILED already too: the verdict is
    an event that says so, from no state (it read "FAILED -> FAILED" on the timeline)."""
    moved = lifecycle.transition_gang(
        job.pk,
        from_state=S.PREEMPTED,
        to_state=S.FAILED,
        require_all=False,
        actor_name="scheduler",
        reason=verdict.failure_class,
        message=verdict.message,
        data=lost,
        now=now,
        failure_class=verdict.failure_class,
    )
    if not moved:
        AuditEvent.objects.create(
            job=job,
            kind=EventKind.TRANSITION,
            actor_name="scheduler",
            to_state=S.FAILED,
            reason=verdict.failure_class,
            message=verdict.message,
            data=lost,
            created_at=now,
        )
    Job.objects.filter(pk=job.pk).update(failure_class=verdict.failure_class, finished_at=now, updated_at=now)
    signals.job_failed.send(Job, job_id=job.pk, reason=verdict.failure_class, message=verdict.message, now=now)
    sync_parent_of(job, now=now)  # a child failed for good: its group may fail with it
    _count_outcome("failed", verdict.failure_class)
    notify.jobs_changed([job.pk])


def _end_stopped(job: Job, verdict: Verdict, *, now) -> None:
    """CANCELLED, or EARLY_STOPPED: a trial its sweep's rule stopped whose node went meanwhile."""
    to_state = S.EARLY_STOPPED if verdict.action == Action.EARLY_STOP else S.CANCELLED
    lifecycle.transition_gang(
        job.pk,
        from_state=(S.FAILED, S.PREEMPTED),
        to_state=to_state,
        require_all=False,
        actor_name="scheduler",
        reason=verdict.code,
        message=verdict.message,
        now=now,
        failure_class=verdict.failure_class,
    )
    Job.objects.filter(pk=job.pk).update(failure_class=verdict.failure_class, updated_at=now)
    sync_parent_of(job, now=now)
    _count_outcome(to_state.lower(), verdict.failure_class)
    notify.jobs_changed([job.pk])
