"""Writes about teams: quota changes, each one audited with who, what and why; the GPU types
nodes report (the resource classes quotas may name); and people's own API tokens, created and
revoked in the audit log (never with the raw value)."""

from datetime import timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from teams.authentication import forget_api_tokens
from teams.models import ApiToken, AuditEvent, EventKind, Quota, ReportedGpuType, Team
from teams.quota_rules import check_capacity, check_field_rights
from teams.selectors import can_read_quotas

OVER_PARENT = "{team} and its sibling teams would be guaranteed {total} {rclass}, more than {parent}'s {parent_amount}."
# For who may not read the parent's quotas (MLQ_QUOTAS_PUBLIC off): no figure of theirs.
OVER_PARENT_HIDDEN = (
    "{team} and its sibling teams would be guaranteed more {rclass} than {parent} has: ask a lead of {parent}."
)
QUOTA_FIELDS = ("guaranteed", "borrowing_limit", "weight")
UNDER_CHILDREN = "{team}'s teams are guaranteed {children} {rclass} in all; its guarantee cannot go below that."


def do_update_quotas(*, team: Team, changes: dict[str, dict], user, reason: str) -> list[Quota]:
    """Apply {resource_class: {field: value}} to the team's quotas in one transaction, after
    checking the tree stays consistent (children never promised more than their parent)."""
    with transaction.atomic():
        lock_quota_tree(team)
        updated = [
            _apply_quota_change(team=team, rclass=rclass, fields=fields, user=user, reason=reason)
            for rclass, fields in sorted(changes.items())
        ]
    return updated


def lock_quota_tree(team: Team) -> None:
    """One writer per tree at a time, so two leads cannot both squeeze under the parent; a
    division's change locks every division, as they share the cluster. In a transaction; the
    teams page takes it before comparing its form with the quota (scheduling/web/teams_page.py)."""
    tree = Team.objects.filter(pk__in=[team.pk] + [t.pk for t in team.ancestors()])
    if team.parent_id is None:
        tree = Team.objects.filter(parent__isnull=True)
    list(tree.select_for_update(no_key=True).order_by("pk"))


def _apply_quota_change(*, team: Team, rclass: str, fields: dict, user, reason: str) -> Quota:
    """One class's change, checked and audited; the fields already at the value asked are left
    out, and a change of none is no change at all (applied again, a PATCH writes nothing). A
    class the team had no quota for is a change even at the defaults: without a quota it could
    borrow without bound, with one at 0 it cannot (audited as added, before: {}). Who may set
    what, and the cluster's size, are checked on the fields that change (teams/quota_rules.py)."""
    quota, added = Quota.objects.get_or_create(team=team, resource_class=rclass)
    current = {name: getattr(quota, name) for name in QUOTA_FIELDS}
    fields = {name: value for name, value in fields.items() if current[name] != value}
    if not (added or fields):
        return quota
    check_field_rights(user=user, team=team, rclass=rclass, changed=fields)
    before = {} if added else {name: current[name] for name in fields}
    for name, value in fields.items():
        setattr(quota, name, value)
    # The parent first: its guarantee is the tighter bound, and a lead who may not read it
    # learns no figure of it from the cluster's size either.
    check_quota_tree(team=team, rclass=rclass, guaranteed=quota.guaranteed, user=user)
    check_capacity(team=team, rclass=rclass, before=current, changed=fields)
    quota.updated_at = timezone.now()
    quota.save()
    if added:
        fields = {name: getattr(quota, name) for name in QUOTA_FIELDS}
        changed = "quota added: " + ", ".join(f"{name} {value}" for name, value in fields.items())
    else:
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


def check_quota_tree(*, team: Team, rclass: str, guaranteed: int, user=None) -> None:
    """A ValidationError (`quotas.<class>.guaranteed`) unless `guaranteed` keeps the tree
    consistent: siblings within their parent, the team at least its children's total. `user`:
    who asks; the parent's and siblings' figures are named only if they may read them."""
    field = f"quotas.{rclass}.guaranteed"
    if team.parent_id is not None:
        siblings = Team.objects.filter(parent_id=team.parent_id).exclude(pk=team.pk).values_list("pk", flat=True)
        total = guaranteed + _guaranteed(siblings, rclass)
        parent_amount = _guaranteed([team.parent_id], rclass)
        if total > parent_amount:
            if user is not None and not can_read_quotas(user, team.parent):
                message = OVER_PARENT_HIDDEN.format(team=team.name, rclass=rclass, parent=team.parent.name)
            else:
                message = OVER_PARENT.format(
                    team=team.name, total=total, rclass=rclass, parent=team.parent.name, parent_amount=parent_amount
                )
            raise ValidationError({field: [message]})
    children = _guaranteed(team.children.values_list("pk", flat=True), rclass)
    if guaranteed < children:
        raise ValidationError({field: [UNDER_CHILDREN.format(team=team.name, children=children, rclass=rclass)]})


def do_note_gpu_type(gpu_type: str) -> None:
    """A node reported `gpu_type` (empty for a CPU node): from now on quotas may name its class.
    One statement; a type already known changes nothing."""
    if gpu_type:
        ReportedGpuType.objects.bulk_create([ReportedGpuType(name=gpu_type)], ignore_conflicts=True)


TOKEN_OUTLIVES_CALLER = (
    "may not outlive the token this request is made with, which expires at {expires_at}: "
    "leave expires_in_days out to expire with it, or create the token with your password."
)


def do_create_token(
    *, user, name: str, expires_in_days: int | None = None, actor=None, made_with: ApiToken | None = None
) -> tuple[ApiToken, str]:
    """A new API token for `user` (made by `actor`, the user by default); the raw value is
    returned once and only its digest is kept. `made_with`: the token the request came with;
    the new one expires no later than it, or a short-lived token (a CI job's) could mint
    one that never expires."""
    actor = actor or user
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days is not None else None
    ceiling = made_with.expires_at if made_with is not None else None
    if ceiling is not None and expires_at is not None and expires_at > ceiling:
        raise ValidationError({"expires_in_days": [TOKEN_OUTLIVES_CALLER.format(expires_at=ceiling.isoformat())]})
    capped = ceiling is not None and expires_at is None
    expires_at = ceiling if capped else expires_at
    with transaction.atomic():
        token, raw = ApiToken.issue(user=user, name=name, expires_at=expires_at)
        message = f"created, expires {expires_at.isoformat() if expires_at else 'never'}"
        if capped:
            message += f" (the expiry of token {made_with.hint}…, which created it)"
        _audit_token(token=token, actor=actor, reason="API_TOKEN_CREATED", message=message)
    return token, raw


def do_revoke_token(*, token: ApiToken, actor) -> bool:
    """Revoke `token` (the selectors decide who may); False when it was already revoked, which
    changes and records nothing."""
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            return False
        forget_api_tokens()
        token.refresh_from_db(fields=["revoked_at"])
        _audit_token(token=token, actor=actor, reason="API_TOKEN_REVOKED", message="revoked")
    return True


def _audit_token(*, token: ApiToken, actor, reason: str, message: str) -> None:
    owner = token.user.get_username()
    AuditEvent.objects.create(
        kind=EventKind.SECURITY,
        actor=actor,
        actor_name=actor.get_username(),
        reason=reason,
        message=f"API token {token.hint}… ({token.name}) of {owner} {message}",
        data={
            "api_token": token.pk,
            "user": owner,
            "name": token.name,
            "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        },
    )
