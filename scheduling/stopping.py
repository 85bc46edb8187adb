"""Asking running tasks to stop: SIGTERM now (checkpoint and exit), SIGKILL at the grace
deadline. The deadline is a column, so the leader's sweep enforces it even when the Celery
message that should have done so is lost."""

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from mlqueue.breaker import RedisBreaker
from scheduling import notify
from scheduling.models import Signal, Task
from scheduling.states import ON_NODE
from teams.models import AuditEvent, EventKind

log = logging.getLogger(__name__)
_broker = RedisBreaker("Celery's broker (grace deadlines are kept by the leader's sweep)")


def do_request_stop(
    *,
    job_id: int,
    reason: str,
    grace_s: int,
    message: str,
    now=None,
    preempted_for: int | None = None,
    actor_name: str = "scheduler",
    preemption: str = "",
) -> int:
    """Signal the job's active tasks that have no stop pending yet. Returns how many.
    `preemption`: for a preemption, why (core PreemptionReason: PRIORITY or RECLAIM), kept in
    the event's data so that its notification tells a reclaim from a priority preemption."""
    now = now or timezone.now()
    kill_at = now + timedelta(seconds=grace_s)
    signal = Signal.TERM if grace_s > 0 else Signal.KILL
    stopped = Task.objects.filter(job_id=job_id, state__in=ON_NODE, stop_reason="").update(
        stop_reason=reason,
        stop_signal=signal,
        stop_requested_at=now,
        kill_at=kill_at,
        preempted_for_id=preempted_for,
        updated_at=now,
    )
    if stopped:
        AuditEvent.objects.create(
            job_id=job_id,
            kind=EventKind.STOP_REQUESTED,
            actor_name=actor_name,
            reason=reason,
            message=message,
            data={
                "tasks": stopped,
                "grace_s": grace_s,
                "kill_at": kill_at.isoformat(),
                **({"preemption": preemption} if preemption else {}),
            },
            created_at=now,
        )
        if grace_s > 0:
            transaction.on_commit(lambda: _schedule_kill(job_id, grace_s))
        notify.jobs_changed([job_id])
        notify.wake_agents(_nodes_of(job_id), "signal")
    return stopped


def _nodes_of(*job_ids: int) -> list[str]:
    return list(
        Task.objects.filter(job_id__in=job_ids, state__in=ON_NODE, node__isnull=False).values_list(
            "node__name", flat=True
        )
    )


def _schedule_kill(job_id: int, grace_s: int) -> None:
    """The fast path for the grace deadline. While the broker fails, it is not tried for a few
    seconds at a time (a hung broker costs its 2 s timeout once, not on every stop)."""
    from scheduling.tasks import enforce_grace_deadline

    if not _broker.allowed():
        log.warning(
            "not scheduling the SIGKILL of job %s in %s s (the broker is down); the leader's sweep will "
            "still kill it on time",
            job_id,
            grace_s,
        )
        return
    try:
        enforce_grace_deadline.apply_async(args=[job_id], countdown=grace_s)
    except Exception as exc:  # the broker is down: the timer is only the fast path
        _broker.failed(exc)
        log.warning(
            "could not schedule the SIGKILL of job %s in %s s (%s); the leader's sweep will still kill it on time",
            job_id,
            grace_s,
            exc,
        )
    else:
        _broker.worked()


def escalate_overdue(*, now=None, job_id: int | None = None) -> int:
    """TERM -> KILL for tasks past their grace deadline. Idempotent (a conditional update)."""
    now = now or timezone.now()
    overdue = Task.objects.filter(state__in=ON_NODE, stop_signal=Signal.TERM, kill_at__lte=now)
    if job_id is not None:
        overdue = overdue.filter(job_id=job_id)
    job_ids = list(overdue.values_list("job_id", flat=True).distinct())
    escalated = overdue.update(stop_signal=Signal.KILL, updated_at=now)
    if escalated:
        notify.jobs_changed(job_ids)
        notify.wake_agents(_nodes_of(*job_ids), "signal")
    return escalated
