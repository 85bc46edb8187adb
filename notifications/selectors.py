"""Reads about notifications: a user sees only their own deliveries."""

from notifications.models import Delivery


def deliveries_of(user, *, job: int | None = None, status: str | None = None, event: str | None = None):
    rows = Delivery.objects.filter(user=user)
    if job is not None:
        rows = rows.filter(job_ref=job)
    if status:
        rows = rows.filter(status=status)
    if event:
        rows = rows.filter(event=event)
    return rows
