"""The leader's sweeps before each pass: the guarantees behind every timer and every retry.

1. grace deadlines past due -> SIGKILL; unstarted assignments of earlier leaders adopted;
   nodes silent too long -> SUSPECT, then LOST with their tasks failed (agents/failures.py);
2. tasks past `max_runtime_hours` -> stop (TIMEOUT);
3. cancelled jobs still running -> stop (CANCELLED);
4. gangs with a failed rank -> stop the other ranks (PEER_FAILED);
5. attempts that ended without success -> retry, requeue or fail, by failure class;
6. pending jobs whose dependency failed -> FAILED (DEPENDENCY).
Only the leader requeues or retries, and every write here is fenced by its epoch.
"""
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, Min, OuterRef, Q

from agents import failures
from scheduling import lifecycle, metrics, notify
from scheduling.fencing import fenced
from scheduling.models import (
    EventKind, FailureClass, Job, JobEvent, RestartMode, StopReason, Task, TaskState,
)
from scheduling.stopping import do_request_stop, escalate_overdue

S = TaskState
ACTIVE = (S.ASSIGNED, S.RUNNING)
ENDED = (S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED)
HOUR = timedelta(hours=1)


@dataclass
class Swept:
    killed: int = 0
    stops: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    requeued: int = 0
    failed: int = 0
    cancelled: int = 0
    nodes: dict[str, int] = field(default_factory=dict)


def reconcile(*, epoch: int, now) -> Swept:
    swept = Swept()
    with fenced(epoch):
        swept.killed = escalate_overdue(now=now)
        # Assignments made under an earlier leader, not yet started, are this leader's now:
        # an agent that has seen this epoch would refuse the older one.
        Task.objects.filter(state=S.ASSIGNED, epoch__lt=epoch).update(epoch=epoch)
    swept.nodes = failures.detect(epoch=epoch, now=now)
    swept.stops[StopReason.TIMEOUT] = _stop_each(_timed_out(now), StopReason.TIMEOUT, epoch=epoch, now=now)
    swept.stops[StopReason.CANCELLED] = _stop_each(_cancelled_running(), StopReason.CANCELLED, epoch=epoch, now=now)
    swept.stops[StopReason.PEER_FAILED] = _stop_each(_broken_gangs(), StopReason.PEER_FAILED, epoch=epoch, now=now)
    for job in Job.objects.filter(_attempt_over()).order_by("id"):
        _settle(job, swept, epoch=epoch, now=now)
    swept.failed += _fail_orphans(epoch=epoch, now=now)
    return swept


STOP_MESSAGES = {
    StopReason.TIMEOUT: "ran past max_runtime_hours ({hours:g} h)",
    StopReason.CANCELLED: "cancelled while running",
    StopReason.PEER_FAILED: "another rank of its gang failed; the gang restarts whole",
}


def _stop_each(jobs, reason: str, *, epoch: int, now) -> int:
    stopped = 0
    for job in jobs:
        with fenced(epoch):
            stopped += bool(do_request_stop(job_id=job.pk, reason=reason, grace_s=job.grace_period_seconds, now=now,
                                            message=STOP_MESSAGES[reason].format(hours=job.max_runtime_hours)))
    return stopped


def _timed_out(now):
    """Jobs whose current attempt has run past max_runtime_hours (measured from the attempt's
    first rank to start: a restart gets its full allowance again)."""
    starts = dict(Task.objects.filter(state=S.RUNNING, stop_reason="").values("job_id").annotate(
        start=Min("started_at")).values_list("job_id", "start"))
    jobs = Job.objects.filter(pk__in=starts).only("id", "max_runtime_hours", "grace_period_seconds")
    return [job for job in jobs if starts[job.pk] and starts[job.pk] + job.max_runtime_hours * HOUR <= now]


def _cancelled_running():
    return Job.objects.filter(cancel_requested_at__isnull=False, tasks__state__in=ACTIVE,
                              tasks__stop_reason="").distinct().only("id", "grace_period_seconds", "max_runtime_hours")


def _broken_gangs():
    """Jobs with a rank still active and unasked to stop while another rank has failed."""
    failed_peer = Task.objects.filter(job_id=OuterRef("job_id"), state__in=(S.FAILED, S.PREEMPTED, S.CANCELLED))
    job_ids = Task.objects.filter(state__in=ACTIVE, stop_reason="").filter(Exists(failed_peer)).values("job_id")
    return Job.objects.filter(pk__in=job_ids).only("id", "grace_period_seconds", "max_runtime_hours")


def _attempt_over() -> Q:
    """Jobs whose tasks have all ended (that is what these derived states mean), not all in
    success, with no verdict yet."""
    return Q(state__in=(S.FAILED, S.PREEMPTED, S.CANCELLED), failure_class="")


def _settle(job: Job, swept: Swept, *, epoch: int, now) -> None:
    """Decide what an ended attempt means: the user's cancel, a final failure, or a new
    attempt. Only here are retries and restarts spent. Decided under the job's row lock, on
    what is true then (a cancel may have landed since the job was listed)."""
    with fenced(epoch):
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in (S.FAILED, S.PREEMPTED, S.CANCELLED) or job.failure_class:
            return
        tasks = list(job.tasks.values("rank", "state", "failure_class", "stop_reason", "exit_code", "exit_signal"))
        classes = {t["failure_class"] for t in tasks if t["state"] in (S.FAILED, S.PREEMPTED)}
        cancelled = any(t["state"] == S.CANCELLED for t in tasks)
        if job.cancel_requested_at is not None or cancelled:
            _end_cancelled(job, now=now)
            swept.cancelled += 1
        elif FailureClass.TIMEOUT in classes:
            _end_failed(job, FailureClass.TIMEOUT, f"ran past max_runtime_hours ({job.max_runtime_hours:g} h)", now)
            swept.failed += 1
        elif FailureClass.APP in classes:
            _after_app_failure(job, tasks, swept, now=now)
        else:
            _after_infra_failure(job, tasks, swept, now=now)


def _after_app_failure(job: Job, tasks: list[dict], swept: Swept, *, now) -> None:
    failed = next(t for t in tasks if t["failure_class"] == FailureClass.APP)
    how = f"exit code {failed['exit_code']}" if failed["exit_code"] is not None else f"signal {failed['exit_signal']}"
    if job.retries_used >= job.max_retries:
        _end_failed(job, FailureClass.APP, f"rank {failed['rank']} failed ({how}); no retries left "
                                           f"({job.max_retries} allowed)", now)
        swept.failed += 1
        return
    delay = backoff_seconds(job.retries_used)
    _requeue(job, now=now, retries_used=job.retries_used + 1, not_before=now + timedelta(seconds=delay),
             message=f"rank {failed['rank']} failed ({how}); retry {job.retries_used + 1} of {job.max_retries} "
                     f"after {delay:.0f} s back-off")
    swept.retried += 1


def _after_infra_failure(job: Job, tasks: list[dict], swept: Swept, *, now) -> None:
    preempted = any(t["stop_reason"] in (StopReason.PREEMPTED, StopReason.DRAIN) for t in tasks)
    mode = job.on_preemption if preempted else job.on_node_failure
    what = "preempted" if preempted else "lost to an infrastructure failure"
    if mode == RestartMode.FAIL:
        _end_failed(job, FailureClass.INFRA, f"{what}, and its restart policy says fail", now)
        swept.failed += 1
    elif job.restarts_used >= job.max_restarts:
        _end_failed(job, FailureClass.INFRA, f"{what}; no restarts left ({job.max_restarts} allowed)", now)
        swept.failed += 1
    else:
        resume = "resuming from its checkpoint" if mode == RestartMode.RESUME and job.checkpoint else "from the start"
        _requeue(job, now=now, restarts_used=job.restarts_used + 1, not_before=None,
                 message=f"{what}; restart {job.restarts_used + 1} of {job.max_restarts}, {resume} "
                         "(retries not spent)")
        swept.requeued += 1


def backoff_seconds(retries_used: int) -> float:
    """Exponential back-off before retry n+1: base x 2^n, capped."""
    return min(settings.MLQ_RETRY_BACKOFF_BASE_S * 2 ** retries_used, settings.MLQ_RETRY_BACKOFF_MAX_S)


def _requeue(job: Job, *, now, message: str, not_before, **counters) -> None:
    """The whole gang goes back to PENDING as a new attempt (its finished ranks too)."""
    moved = lifecycle.transition_gang(job.pk, from_state=ENDED[:3], to_state=S.PENDING, require_all=False,
                                      actor_name="scheduler", reason="RETRY", message=message, now=now)
    if moved:
        Job.objects.filter(pk=job.pk).update(not_before=not_before, finished_at=None, updated_at=now,
                                             pending_reason_code="BACKOFF" if not_before else "",
                                             pending_reason_message=message if not_before else "", **counters)
        JobEvent.objects.create(job=job, kind=EventKind.RETRY, actor_name="scheduler", reason="RETRY",
                                message=message, data=counters, created_at=now)
        notify.jobs_changed([job.pk])
        notify.wake_scheduler("requeue")


def _end_failed(job: Job, failure_class: str, message: str, now) -> None:
    lifecycle.transition_gang(job.pk, from_state=S.PREEMPTED, to_state=S.FAILED, require_all=False,
                              actor_name="scheduler", reason=failure_class, message=message, now=now,
                              failure_class=failure_class)
    Job.objects.filter(pk=job.pk).update(failure_class=failure_class, finished_at=now, updated_at=now)
    metrics.OUTCOMES.labels("failed", failure_class).inc()
    JobEvent.objects.create(job=job, kind=EventKind.TRANSITION, actor_name="scheduler", from_state=job.state,
                            to_state=S.FAILED, reason=failure_class, message=message, created_at=now)
    notify.jobs_changed([job.pk])


def _end_cancelled(job: Job, *, now) -> None:
    lifecycle.transition_gang(job.pk, from_state=(S.FAILED, S.PREEMPTED), to_state=S.CANCELLED, require_all=False,
                              actor_name="scheduler", reason="CANCELLED", message="cancelled", now=now,
                              failure_class=FailureClass.CANCELLED)
    Job.objects.filter(pk=job.pk).update(failure_class=FailureClass.CANCELLED, updated_at=now)
    metrics.OUTCOMES.labels("cancelled", FailureClass.CANCELLED).inc()
    notify.jobs_changed([job.pk])


def _fail_orphans(*, epoch: int, now) -> int:
    """Pending jobs that depend on a job that failed or was cancelled can never run."""
    through = Job.depends_on.through
    dead = through.objects.filter(from_job__state=S.PENDING).filter(
        Q(to_job__state=S.CANCELLED) | Q(to_job__state=S.FAILED) & ~Q(to_job__failure_class="")).values_list(
        "from_job_id", "to_job_id", "to_job__state")
    failed = 0
    for job_id, dependency, state in sorted(set(dead)):
        message = f"job {dependency}, which it depends on, ended {state}"
        with fenced(epoch):
            moved = lifecycle.transition_gang(job_id, from_state=S.PENDING, to_state=S.FAILED, actor_name="scheduler",
                                              reason="DEPENDENCY", message=message, now=now,
                                              failure_class=FailureClass.DEPENDENCY)
            if moved:
                Job.objects.filter(pk=job_id).update(failure_class=FailureClass.DEPENDENCY,
                                                     pending_reason_code="", pending_reason_message="")
                metrics.OUTCOMES.labels("failed", FailureClass.DEPENDENCY).inc()
                notify.jobs_changed([job_id])
                failed += 1
    return failed
