"""What node agents report, as services the agent API calls: a task started, a task exited,
a checkpoint was written. Reports carry the attempt they are about; a report about an
attempt that is no longer current changes nothing."""

import logging
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduling import lifecycle, metrics, notify
from scheduling.models import FailureClass, Job, StopReason, Task, TaskState
from scheduling.states import ON_NODE
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent, EventKind

log = logging.getLogger(__name__)
S = TaskState

# What an exit means once the scheduler has asked the task to stop.
STOPPED_AS = {
    StopReason.PREEMPTED: (S.PREEMPTED, FailureClass.INFRA),
    StopReason.DRAIN: (S.PREEMPTED, FailureClass.INFRA),
    StopReason.CANCELLED: (S.CANCELLED, FailureClass.CANCELLED),
    StopReason.TIMEOUT: (S.FAILED, FailureClass.TIMEOUT),
    StopReason.PEER_FAILED: (S.FAILED, FailureClass.INFRA),
    StopReason.REQUEUED: (S.PREEMPTED, FailureClass.INFRA),
    StopReason.EARLY_STOPPED: (S.EARLY_STOPPED, FailureClass.EARLY_STOPPED),
}


# Exits the agent reports as not the task's own doing: (reason, what happened).
CAUSES = {
    "lease_expired": (
        "LEASE_EXPIRED",
        "stopped on its node: the node agent could not renew its lease with the control plane within the outage bound",
    ),
    "lost": ("AGENT_LOST_TASK", "lost when its node agent restarted"),
    "no_task_user": ("NO_TASK_USER", "not started: its node agent had no user to run it as (see the task's log)"),
    "no_container_runtime": (
        "NO_CONTAINER_RUNTIME",
        "not started: it names an image and its node has no container runtime (see the task's log)",
    ),
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
    task = Task.objects.select_related("node").filter(job_id=job_id, rank=rank).first()
    if task is None or task.attempt != attempt:
        log.info("report about job %s rank %s attempt %s ignored: not the current attempt", job_id, rank, attempt)
        return None
    return task


def agent_name(task: Task) -> str:
    """The timeline's actor for what a task's agent reported: its node's name, as every other
    agent entry names it (it was the node's id: "agent:9" beside "agent:z2-r1-h100-01")."""
    return f"agent:{task.node.name}" if task.node else "agent"


def do_report_started(*, job_id: int, rank: int, attempt: int, now=None) -> bool:
    task = current_task(job_id, rank, attempt)
    if task is None or task.state != S.ASSIGNED:
        return False
    moved = lifecycle.transition_task(
        task,
        to_state=S.RUNNING,
        attempt=attempt,
        actor_name=agent_name(task),
        reason="STARTED",
        message=f"rank {rank} started",
        now=now,
    )
    notify.jobs_changed([job_id])
    return moved


def do_report_exited(
    *, job_id: int, rank: int, attempt: int, exit_code: int | None, signal: str = "", cause: str = "", now=None
) -> str | None:
    """Record an exit; a failed rank of a gang has its peers stopped. Returns the new state."""
    now = now or timezone.now()
    task = current_task(job_id, rank, attempt)
    if task is None or task.state not in ON_NODE:
        return None
    to_state, failure_class = exit_outcome(task.stop_reason, exit_code, cause)
    how = f"exit code {exit_code}" if exit_code is not None else f"signal {signal}" if signal else "no exit status"
    reason, why = CAUSES.get(cause, ("EXITED", "")) if not task.stop_reason else (task.stop_reason, "")
    moved = lifecycle.transition_task(
        task,
        to_state=to_state,
        attempt=attempt,
        actor_name=agent_name(task),
        reason=reason,
        message=f"rank {rank} ended ({how}){': ' + why if why else ''}",
        now=now,
        exit_code=exit_code,
        exit_signal=signal or "",
        exit_cause=cause if cause in CAUSES else "",
        failure_class=failure_class,
    )
    if not moved:
        return None
    if Job.objects.filter(pk=job_id, state=S.SUCCEEDED).exists():
        metrics.OUTCOMES.labels("succeeded", "").inc()
    if to_state == S.FAILED and failure_class == FailureClass.APP:
        grace = Job.objects.values_list("grace_period_seconds", flat=True).get(pk=job_id)
        do_request_stop(
            job_id=job_id,
            reason=StopReason.PEER_FAILED,
            grace_s=grace,
            now=now,
            message=f"rank {rank} failed ({how}); stopping the other ranks",
        )
    notify.jobs_changed([job_id])
    notify.wake_scheduler("exit")
    return to_state


# At most one CHECKPOINT event per job this often: a job confirming every second still gets
# its task fields updated each time, not a timeline row each time.
CHECKPOINT_EVENT_EVERY = timedelta(minutes=1)


def do_report_checkpoint(
    *, job_id: int, rank: int, attempt: int, node_name: str, step: int, at: float, epoch: int = 0, now=None
) -> str:
    """A rank's current attempt confirmed a checkpoint at `at` (epoch seconds, the job's own
    clock; a time in the future counts as now). Recorded by one conditional update, only for
    the attempt still active on that node and only if newer than the one recorded; a
    checkpoint from before the attempt was placed is an earlier attempt's file. The job keeps
    its latest. Returns "" if it was recorded, else why not (the agent's reply lists it as
    refused)."""
    now = now or timezone.now()
    when = min(datetime.fromtimestamp(at, UTC), now)
    recorded = (
        Task.objects.filter(
            job_id=job_id,
            rank=rank,
            attempt=attempt,
            node__name=node_name,
            state__in=ON_NODE,
            epoch__gte=epoch,
            assigned_at__lte=when,
        )
        .filter(Q(last_checkpoint_at__isnull=True) | Q(last_checkpoint_at__lt=when))
        .update(last_checkpoint_at=when, checkpoint_step=step)
    )
    if not recorded:
        why = checkpoint_refusal(job_id=job_id, rank=rank, attempt=attempt, node_name=node_name, epoch=epoch, when=when)
        log.info("checkpoint of job %s rank %s attempt %s at %s ignored: %s", job_id, rank, attempt, when, why)
        return why
    Job.objects.filter(pk=job_id).filter(Q(last_checkpoint_at__isnull=True) | Q(last_checkpoint_at__lt=when)).update(
        last_checkpoint_at=when
    )
    if _note_checkpoint(job_id=job_id, rank=rank, attempt=attempt, step=step, when=when, node_name=node_name, now=now):
        notify.jobs_changed([job_id])  # as rate-limited as the event: live views need no more
    return ""


def checkpoint_refusal(*, job_id: int, rank: int, attempt: int, node_name: str, epoch: int, when) -> str:
    """Why a checkpoint report changed nothing (read after the conditional update missed: the
    rare path, so the common one stays a single statement)."""
    prefix = f"job {job_id} rank {rank} attempt {attempt}: checkpoint saved {when:%Y-%m-%d %H:%M:%S} UTC not recorded"
    task = Task.objects.filter(job_id=job_id, rank=rank, attempt=attempt, node__name=node_name).first()
    if task is None or task.state not in ON_NODE:
        return f"{prefix}: the attempt is no longer running on {node_name}."
    if task.epoch < epoch:
        return f"{prefix}: reported under epoch {epoch}, newer than the attempt's placement (epoch {task.epoch})."
    if task.assigned_at and task.assigned_at > when:
        return f"{prefix}: saved before the attempt was placed (an earlier attempt's file)."
    if task.last_checkpoint_at is None:
        return f"{prefix}."
    return f"{prefix}: a checkpoint as new is already recorded ({task.last_checkpoint_at:%Y-%m-%d %H:%M:%S} UTC)."


def _note_checkpoint(*, job_id: int, rank: int, attempt: int, step: int, when, node_name: str, now) -> bool:
    """The job's timeline says so, at most once per CHECKPOINT_EVENT_EVERY (the ranks of a gang
    reporting the same checkpoint at once are serialized on the job's row)."""
    recent = AuditEvent.objects.filter(
        job_id=job_id, kind=EventKind.CHECKPOINT, created_at__gt=now - CHECKPOINT_EVENT_EVERY
    )
    if recent.exists():
        return False
    with transaction.atomic():
        list(Job.objects.select_for_update(no_key=True).filter(pk=job_id).values_list("pk", flat=True))
        if recent.exists():
            return False
        AuditEvent.objects.create(
            job_id=job_id,
            kind=EventKind.CHECKPOINT,
            actor_name=f"agent:{node_name}",
            reason="CHECKPOINT",
            message=f"rank {rank} confirmed a checkpoint at step {step} (attempt {attempt}, saved {when:%H:%M:%S} UTC)",
            data={"rank": rank, "attempt": attempt, "step": step, "at": when.isoformat()},
            created_at=now,
        )
    return True
