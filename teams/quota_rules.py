"""What a quota change must respect besides the team tree (services.check_quota_tree): who
may set each field, and the size of the cluster (docs/quotas.md, "Who sets what")."""

from rest_framework import status
from rest_framework.exceptions import ValidationError

from scheduling.core.model import gpu_type_of
from teams.models import Quota, Team
from teams.resources import class_capacity
from teams.selectors import can_rank_among_siblings

# Fields that only rank a team against its siblings: set from the team above.
SIBLING_FIELDS = ("weight",)
SET_FROM_ABOVE = (
    "only site admins and leads of {parent} (or of a team above it) may change {team}'s {field}: "
    "it ranks {team} against its sibling teams, so it is set from the team above, not by {team}'s own leads."
)
SET_BY_ADMINS = (
    "only site admins may change {team}'s {field}: it ranks the division {team} against the other divisions."
)
GUARANTEE_OVER_CAPACITY = (
    "the cluster has {capacity} {unit} in all (every registered node, cordoned or not): "
    "a guarantee of {value} could never be met."
)
LIMIT_OVER_CAPACITY = (
    "the cluster has {capacity} {unit} in all (every registered node, cordoned or not): "
    "a borrowing limit of {value} is more than could ever be borrowed; give at most {capacity}."
)
DIVISIONS_OVER_CAPACITY = (
    "the divisions would be guaranteed {total} {unit} in all, more than the cluster's {capacity} "
    "(every registered node, cordoned or not)."
)


class QuotaFieldForbidden(ValidationError):
    """A 403 naming the field (`quotas.<class>.weight`). A ValidationError all the same, so
    the teams page, which shows a refused save's errors beside their fields, shows this one
    beside the weight (the API's error handler keeps the status)."""

    status_code = status.HTTP_403_FORBIDDEN


def check_field_rights(*, user, team: Team, rclass: str, changed: dict) -> None:
    """Refuse a change to a sibling-ranking field (the weight) by who may not set it."""
    refused = [name for name in SIBLING_FIELDS if name in changed]
    if not refused or can_rank_among_siblings(user, team):
        return
    field = refused[0]
    if team.parent_id is None:
        message = SET_BY_ADMINS.format(team=team.name, field=field)
    else:
        message = SET_FROM_ABOVE.format(team=team.name, field=field, parent=team.parent.name)
    raise QuotaFieldForbidden({f"quotas.{rclass}.{field}": [message]})


def check_capacity(*, team: Team, rclass: str, before: dict, changed: dict) -> None:
    """Refuse raising a guarantee or a borrowing limit past the cluster's size in the class,
    or the divisions' guarantees together past it. Only a raise is refused: a lowered figure
    always passes, even if nodes have left since and it is still above. A class no node has
    joined yet (capacity 0) is not checked, so quotas can be set before its machines arrive."""
    capacity = class_capacity(rclass)
    if not capacity:
        return
    unit = f"{gpu_type_of(rclass)} GPUs" if gpu_type_of(rclass) else "CPU cores"
    figures = {"capacity": capacity, "unit": unit}
    raised = {name: changed[name] for name in ("guaranteed", "borrowing_limit") if changed.get(name, 0) > before[name]}
    if raised.get("guaranteed", 0) > capacity:
        message = GUARANTEE_OVER_CAPACITY.format(value=raised["guaranteed"], **figures)
        raise ValidationError({f"quotas.{rclass}.guaranteed": [message]})
    if raised.get("borrowing_limit", 0) > capacity:
        message = LIMIT_OVER_CAPACITY.format(value=raised["borrowing_limit"], **figures)
        raise ValidationError({f"quotas.{rclass}.borrowing_limit": [message]})
    if "guaranteed" in raised and team.parent_id is None:
        _check_divisions(team=team, rclass=rclass, guaranteed=raised["guaranteed"], figures=figures)


def _check_divisions(*, team: Team, rclass: str, guaranteed: int, figures: dict) -> None:
    """The divisions share the cluster as teams share their division."""
    others = Quota.objects.filter(team__parent__isnull=True, resource_class=rclass).exclude(team=team)
    total = guaranteed + sum(others.values_list("guaranteed", flat=True))
    if total > figures["capacity"]:
        message = DIVISIONS_OVER_CAPACITY.format(total=total, **figures)
        raise ValidationError({f"quotas.{rclass}.guaranteed": [message]})
