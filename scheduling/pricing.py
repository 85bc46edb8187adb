"""Prices per resource class, with history: services for the admin API and the Django admin.
A change is a new row from its date on; costs are computed from the ledger at read time
(scheduling/accounting.py), so a price set for a past date re-prices what ran since."""

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import PermissionDenied, ValidationError

from scheduling.core.model import CPU_CLASS
from scheduling.models import Price
from teams.models import AuditEvent, EventKind
from teams.resources import known_classes, unknown_class_message
from teams.selectors import is_site_admin

ONLY_ADMINS = "only site admins may set or remove prices."
CPU_CLASS_NO_GPU_PRICE = "the cpu class has no GPUs: set cpu_hour only."
ALREADY_SET = "{rclass} already has a price from {at}: remove it first, or choose another time."


def check_admin(user) -> None:
    if not is_site_admin(user):
        raise PermissionDenied(ONLY_ADMINS)


def check_price(*, resource_class: str, gpu_hour: Decimal, effective_from: datetime) -> None:
    known = known_classes()
    if resource_class not in known:
        raise ValidationError({"resource_class": [unknown_class_message(resource_class, known)]})
    if resource_class == CPU_CLASS and gpu_hour:
        raise ValidationError({"gpu_hour": [CPU_CLASS_NO_GPU_PRICE]})
    if Price.objects.filter(resource_class=resource_class, effective_from=effective_from).exists():
        at = effective_from.isoformat()
        raise ValidationError({"effective_from": [ALREADY_SET.format(rclass=resource_class, at=at)]})


def do_set_price(
    *, user, resource_class: str, gpu_hour: Decimal, cpu_hour: Decimal, effective_from: datetime, now: datetime
) -> Price:
    """A new price for the class from `effective_from` on (until its next change), audited."""
    check_admin(user)
    check_price(resource_class=resource_class, gpu_hour=gpu_hour, effective_from=effective_from)
    with transaction.atomic():
        price = Price.objects.create(
            resource_class=resource_class,
            gpu_hour=gpu_hour,
            cpu_hour=cpu_hour,
            effective_from=effective_from,
            set_by_name=user.get_username(),
            created_at=now,
        )
        audit(user, "PRICE_SET", f"{price}: {gpu_hour} per GPU-hour, {cpu_hour} per CPU-hour", now=now)
    return price


def do_remove_price(*, user, price: Price, now: datetime | None = None) -> None:
    check_admin(user)
    with transaction.atomic():
        price.delete()
        audit(user, "PRICE_REMOVED", f"{price} removed", now=now)


def audit(user, reason: str, message: str, *, now: datetime | None = None) -> None:
    """A price change in the audit log (the API's and the Django admin's alike)."""
    now = now or timezone.now()
    AuditEvent.objects.create(
        kind=EventKind.PRICE_CHANGED,
        actor=user,
        actor_name=user.get_username(),
        reason=reason,
        message=message,
        created_at=now,
    )
