"""Writes about teams: quota changes, each one audited with who, what and why, and the GPU
types nodes report (the resource classes quotas may name)."""

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from teams.models import AuditEvent, EventKind, Quota, ReportedGpuType, Team

OVER_PARENT = "{team} and its sibling teams would be guaranteed {total} {rclass}, more than {parent}'s {parent_amount}."
UNDER_CHILDREN = "{team}'s teams are guaranteed {children} {rclass} in all; its guarantee cannot go below that."


def do_update_quotas(*, team: Team, changes: dict[str, dict], user, reason: str) -> list[Quota]:
    """Apply {resource_class: {field: value}} to the team's quotas in one transaction, after
    checking the tree stays consistent (children never promised more than their parent)."""
    with transaction.atomic():
        # One writer per tree at a time, so two leads cannot both squeeze under the parent.
        list(Team.objects.select_for_update().filter(pk__in=[team.pk] + [t.pk for t in team.ancestors()]))
        updated = [
            _apply_quota_change(team=team, rclass=rclass, fields=fields, user=user, reason=reason)
            for rclass, fields in sorted(changes.items())
        ]
    return updated


def _apply_quota_change(*, team: Team, rclass: str, fields: dict, user, reason: str) -> Quota:
    quota, _ = Quota.objects.get_or_create(team=team, resource_class=rclass)
    before = {name: getattr(quota, name) for name in fields}
    for name, value in fields.items():
        setattr(quota, name, value)
    _check_tree(team=team, rclass=rclass, guaranteed=quota.guaranteed)
    quota.updated_at = timezone.now()
    quota.save()
    changed = ", ".join(f"{name} {before[name]} -> {value}" for name, value in fields.items())
    AuditEvent.objects.create(
        team=team,
        kind=EventKind.QUOTA_CHANGED,
        actor=user,
        actor_name=user.get_username(),
        reason="QUOTA",
        message=f"{team.name} {rclass}: {changed} ({reason})",
        data={"resource_class": rclass, "before": before, "after": fields, "reason": reason},
    )
    return quota


def _guaranteed(team_ids, rclass: str) -> int:
    return Quota.objects.filter(team_id__in=team_ids, resource_class=rclass).aggregate(s=Sum("guaranteed"))["s"] or 0


def _check_tree(*, team: Team, rclass: str, guaranteed: int) -> None:
    field = f"quotas.{rclass}.guaranteed"
    if team.parent_id is not None:
        siblings = Team.objects.filter(parent_id=team.parent_id).exclude(pk=team.pk).values_list("pk", flat=True)
        total = guaranteed + _guaranteed(siblings, rclass)
        parent_amount = _guaranteed([team.parent_id], rclass)
        if total > parent_amount:
            raise ValidationError(
                {
                    field: [
                        OVER_PARENT.format(
                            team=team.name,
                            total=total,
                            rclass=rclass,
                            parent=team.parent.name,
                            parent_amount=parent_amount,
                        )
                    ]
                }
            )
    children = _guaranteed(team.children.values_list("pk", flat=True), rclass)
    if guaranteed < children:
        raise ValidationError({field: [UNDER_CHILDREN.format(team=team.name, children=children, rclass=rclass)]})


def do_note_gpu_type(gpu_type: str) -> None:
    """A node reported `gpu_type` (empty for a CPU node): from now on quotas may name its class.
    One statement; a type already known changes nothing."""
    if gpu_type:
        ReportedGpuType.objects.bulk_create([ReportedGpuType(name=gpu_type)], ignore_conflicts=True)
