"""Celery tasks: thin, idempotent, acks_late. Each calls a service; the claim in the database
makes a repeated or duplicated message harmless."""

from celery import shared_task

from notifications.services import do_send, send_due


@shared_task(name="notifications.tasks.send_notification", acks_late=True, ignore_result=True)
def send_notification(delivery_id: int) -> str | None:
    """The fast path: send one delivery if it is due and no other worker has it."""
    return do_send(delivery_id)


@shared_task(name="notifications.tasks.send_due_notifications", acks_late=True, ignore_result=True)
def send_due_notifications() -> dict[str, int]:
    """Celery beat's periodic sweep: every delivery that is due (retries, lost messages, claims
    of workers that died)."""
    return send_due()
