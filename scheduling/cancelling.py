"""Cancelling one job: the request stamped once, what has not started cancelled at once; what
runs is stopped by the leader's sweep (reconcile: cancelled jobs still running -> stop). Used
by a user's cancel (services.do_cancel_job) and by a group that failed (groups.py)."""

from django.db import transaction
from django.utils import timezone

from scheduling import lifecycle, notify
from scheduling.models import Job, StopReason, Task, TaskState
from scheduling.states import ON_NODE

NOT_STARTED_OR_SETTLING = (TaskState.PENDING, TaskState.FAILED, TaskState.PREEMPTED)


def request_cancel(job_id: int, *, actor, actor_name: str, why: str, now=None) -> bool:
    """Stamp the job's cancel request and record it (False: a request came first), in the
    caller's transaction."""
    now = now or timezone.now()
    if not Job.objects.filter(pk=job_id, cancel_requested_at__isnull=True).update(cancel_requested_at=now):
        return False
    # A requeue under way is a cancel now: its stop (signal and deadline as sent) says so, as
    # the job's `stopping` and the agents' signals show (QA: it said REQUEUED while cancelling).
    Task.objects.filter(job_id=job_id, state__in=ON_NODE, stop_reason=StopReason.REQUEUED).update(
        stop_reason=StopReason.CANCELLED, updated_at=now
    )
    lifecycle.cancel_request_event(job_id, actor=actor, actor_name=actor_name, why=why, now=now).save()
    notify.jobs_changed([job_id])
    return True


def do_cancel(job_id: int, *, actor, actor_name: str, why: str, now=None, wake: bool = True) -> bool:
    """Request the cancel and cancel the tasks not on a node, in one transaction. False when
    another request came first (it did, or does, the same). `wake`: wake the scheduler (a
    caller cancelling many jobs wakes it once itself)."""
    with transaction.atomic():
        if not request_cancel(job_id, actor=actor, actor_name=actor_name, why=why, now=now):
            return False
        if wake:
            notify.wake_scheduler("cancel")
        # One transition per state its tasks are in (read once), not one try per state.
        present = set(Task.objects.filter(job_id=job_id).values_list("state", flat=True))
        for from_state in (state for state in NOT_STARTED_OR_SETTLING if state in present):
            lifecycle.transition_gang(
                job_id,
                from_state=from_state,
                to_state=TaskState.CANCELLED,
                require_all=False,
                actor=actor,
                actor_name=actor_name,
                reason="CANCELLED",
                message=why,
                failure_class="CANCELLED",
                now=now,
            )
    return True
