"""Celery tasks: thin, idempotent, acks_late. Each loads rows and calls a service."""

from celery import shared_task

from scheduling.schedules import fire_due
from scheduling.stopping import escalate_overdue


@shared_task(acks_late=True, ignore_result=True)
def enforce_grace_deadline(job_id: int) -> int:
    """The fast path for a grace deadline; the leader's sweep is the guarantee."""
    return escalate_overdue(job_id=job_id)


@shared_task(name="scheduling.tasks.fire_due_schedules", acks_late=True, ignore_result=True)
def fire_due_schedules() -> int:
    """Celery beat's periodic task: fire the schedules due now. The fast path; the leader's
    sweep is the guarantee, and the claim in the database makes either safe to repeat."""
    return len(fire_due())
