"""What node agents report, as services the agent API calls: a task started, a task exited,
a checkpoint was written. Reports carry the attempt they are about; a report about an
attempt that is no longer current changes nothing."""
import logging

from django.utils import timezone

from scheduling import lifecycle, metrics, notify
from scheduling.models import FailureClass, Job, StopReason, Task, TaskState
from scheduling.stopping import do_request_stop

log = logging.getLogger(__name__)
S = TaskState
ACTIVE = (S.ASSIGNED, S.RUNNING)

# What an exit means once the scheduler has asked the task to stop.
STOPPED_AS = {
    StopReason.PREEMPTED: (S.PREEMPTED, FailureClass.INFRA),
    StopReason.DRAIN: (S.PREEMPTED, FailureClass.INFRA),
    StopReason.CANCELLED: (S.CANCELLED, FailureClass.CANCELLED),
    StopReason.TIMEOUT: (S.FAILED, FailureClass.TIMEOUT),
    StopReason.PEER_FAILED: (S.FAILED, FailureClass.INFRA),
}


# Exits the agent reports as not the task's own doing: (reason, what happened).
CAUSES = {
    "lease_expired": ("LEASE_EXPIRED", "stopped on its node: the node agent could not renew its lease with the "
                                       "control plane within the outage bound"),
    "lost": ("AGENT_LOST_TASK", "lost when its node agent restarted"),
}


def exit_outcome(stop_reason: str, exit_code: int | None, cause: str = "") -> tuple[str, str]:
    """(task state, failure class) for an exit: a stop the scheduler asked for means what it
    asked for; a stop the agent made (its lease ran out, or it lost the task) is INFRA, whatever
    the exit code (a trainer exits 0 after checkpointing on SIGTERM); otherwise the exit code."""
    if stop_reason:
        return STOPPED_AS[stop_reason]
    if cause in CAUSES:
        return S.FAILED, FailureClass.INFRA
    if exit_code == 0:
        return S.SUCCEEDED, ""
    return S.FAILED, FailureClass.APP


def current_task(job_id: int, rank: int, attempt: int) -> Task | None:
    task = Task.objects.filter(job_id=job_id, rank=rank).first()
    if task is None or task.attempt != attempt:
        log.info("report about job %s rank %s attempt %s ignored: not the current attempt", job_id, rank, attempt)
        return None
    return task


def do_report_started(*, job_id: int, rank: int, attempt: int, now=None) -> bool:
    task = current_task(job_id, rank, attempt)
    if task is None or task.state != S.ASSIGNED:
        return False
    moved = lifecycle.transition_task(task, to_state=S.RUNNING, attempt=attempt, actor_name=f"agent:{task.node_id}",
                                      reason="STARTED", message=f"rank {rank} started", now=now)
    notify.jobs_changed([job_id])
    return moved


def do_report_exited(*, job_id: int, rank: int, attempt: int, exit_code: int | None, signal: str = "",
                     cause: str = "", now=None) -> str | None:
    """Record an exit; a failed rank of a gang has its peers stopped. Returns the new state."""
    now = now or timezone.now()
    task = current_task(job_id, rank, attempt)
    if task is None or task.state not in ACTIVE:
        return None
    to_state, failure_class = exit_outcome(task.stop_reason, exit_code, cause)
    how = f"exit code {exit_code}" if exit_code is not None else f"signal {signal}" if signal else "no exit status"
    reason, why = CAUSES.get(cause, ("EXITED", "")) if not task.stop_reason else (task.stop_reason, "")
    moved = lifecycle.transition_task(
        task, to_state=to_state, attempt=attempt, actor_name=f"agent:{task.node_id}", reason=reason,
        message=f"rank {rank} ended ({how}){': ' + why if why else ''}", now=now, exit_code=exit_code,
        exit_signal=signal or "", failure_class=failure_class)
    if not moved:
        return None
    if Job.objects.filter(pk=job_id, state=S.SUCCEEDED).exists():
        metrics.OUTCOMES.labels("succeeded", "").inc()
    if to_state == S.FAILED and failure_class == FailureClass.APP:
        grace = Job.objects.values_list("grace_period_seconds", flat=True).get(pk=job_id)
        do_request_stop(job_id=job_id, reason=StopReason.PEER_FAILED, grace_s=grace, now=now,
                        message=f"rank {rank} failed ({how}); stopping the other ranks")
    notify.jobs_changed([job_id])
    notify.wake_scheduler("exit")
    return to_state


def do_report_checkpoint(*, job_id: int, attempt: int, at=None) -> None:
    if Task.objects.filter(job_id=job_id, attempt=attempt, state__in=ACTIVE).exists():
        Job.objects.filter(pk=job_id).update(last_checkpoint_at=at or timezone.now())
