"""Celery tasks: thin, idempotent, acks_late. Each loads rows and calls a service."""

from celery import shared_task
from django.conf import settings

from scheduling.maintenance import run_due
from scheduling.schedules import fire_due
from scheduling.stopping import escalate_overdue
from scheduling.whatif import do_run_preview


@shared_task(acks_late=True, ignore_result=True)
def enforce_grace_deadline(job_id: int) -> int:
    """The fast path for a grace deadline; the leader's sweep is the guarantee."""
    return escalate_overdue(job_id=job_id)


@shared_task(name="scheduling.tasks.fire_due_schedules", acks_late=True, ignore_result=True)
def fire_due_schedules() -> int:
    """Celery beat's periodic task: fire the schedules due now. The fast path; the leader's
    sweep is the guarantee, and the claim in the database makes either safe to repeat."""
    return len(fire_due())


@shared_task(name="scheduling.tasks.run_due_maintenance", acks_late=True, ignore_result=True)
def run_due_maintenance() -> int:
    """Celery beat's periodic task: start and end the maintenance windows due now. The fast
    path; the leader's pass is the guarantee, and the claim makes either safe to repeat."""
    started, ended = run_due()
    return len(started) + len(ended)


@shared_task(
    acks_late=True,
    ignore_result=True,
    # The preview stops itself at MLQ_WHATIF_TIME_LIMIT_S (scheduling/whatif.py); these are for
    # a replay stuck outside the simulator's passes (a prefork worker enforces them).
    soft_time_limit=settings.MLQ_WHATIF_TIME_LIMIT_S + 30,
    time_limit=settings.MLQ_WHATIF_TIME_LIMIT_S + 60,
)
def run_quota_preview(preview_id: int) -> str | None:
    """A what-if preview: the cluster's history replayed under current and proposed quotas."""
    return do_run_preview(preview_id=preview_id)
