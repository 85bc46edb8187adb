"""Who is in a team, in which role, and where the team sits in the tree: each change written
with its audit entry (kind SECURITY, a reason code below, on the team's events), whichever form
makes it (today the Django admin's). A role is a permission (a lead changes quotas, submits at
P0, cancels the team's jobs) and a move changes whose leads rule a team, so neither may change
unrecorded."""

from django.db import transaction

from teams.models import AuditEvent, EventKind, Membership, Team

MEMBER_ADDED = "MEMBER_ADDED"
MEMBER_REMOVED = "MEMBER_REMOVED"
ROLE_CHANGED = "ROLE_CHANGED"
TEAM_CREATED = "TEAM_CREATED"
TEAM_MOVED = "TEAM_MOVED"
TEAM_DELETED = "TEAM_DELETED"
# The codes a team's history (GET /api/v1/teams/{name}/events) shows beside its quota changes.
TEAM_REASONS = (MEMBER_ADDED, MEMBER_REMOVED, ROLE_CHANGED, TEAM_CREATED, TEAM_MOVED)


def do_save_membership(*, membership: Membership, actor) -> None:
    """Save a membership added or edited; what it was is read (locked) from its row, so the
    entry says before -> after. One moved to another user or team is a removal and an addition."""
    with transaction.atomic():
        before = None
        if membership.pk is not None:
            before = Membership.objects.select_for_update().select_related("user", "team").get(pk=membership.pk)
        membership.save()
        if before is None or (before.user_id, before.team_id) != (membership.user_id, membership.team_id):
            if before is not None:
                _audit_membership(before, actor=actor, reason=MEMBER_REMOVED, before=before.role, after=None)
            _audit_membership(membership, actor=actor, reason=MEMBER_ADDED, before=None, after=membership.role)
        elif before.role != membership.role:
            _audit_membership(membership, actor=actor, reason=ROLE_CHANGED, before=before.role, after=membership.role)


def do_remove_membership(*, membership: Membership, actor) -> None:
    with transaction.atomic():
        membership.delete()
        _audit_membership(membership, actor=actor, reason=MEMBER_REMOVED, before=membership.role, after=None)


def _audit_membership(membership: Membership, *, actor, reason: str, before: str | None, after: str | None) -> None:
    name, team = membership.user.get_username(), membership.team
    change = {
        MEMBER_ADDED: f"{name} added to {team.name} as {after}",
        MEMBER_REMOVED: f"{name} ({before}) removed from {team.name}",
        ROLE_CHANGED: f"{name}'s role in {team.name}: {before} -> {after}",
    }[reason]
    _audit(team, actor=actor, reason=reason, message=change, user=name, before=before, after=after)


def do_save_team(*, team: Team, actor) -> None:
    """Save a team created or edited; a new one and a new parent are audited (its name and
    description are not permissions)."""
    with transaction.atomic():
        before = Team.objects.select_for_update().filter(pk=team.pk).first() if team.pk is not None else None
        team.save()
        parent = team.parent.name if team.parent_id else None
        if before is None:
            where = f"under {parent}" if parent else "as a division"
            message = f"{team.name} created {where}"
            _audit(team, actor=actor, reason=TEAM_CREATED, message=message, before=None, after=parent)
        elif before.parent_id != team.parent_id:
            old = before.parent.name if before.parent_id else None
            message = f"{team.name} moved from {old or '(a division)'} to {parent or '(a division)'}"
            _audit(team, actor=actor, reason=TEAM_MOVED, message=message, before=old, after=parent)


def do_delete_team(*, team: Team, actor) -> None:
    """Delete a team (its memberships and quotas with it). The entry names no team row: the
    team's own events go with it, this one stays."""
    members = sorted(Membership.objects.filter(team=team).values_list("user__username", flat=True))
    parent = team.parent.name if team.parent_id else None
    with transaction.atomic():
        team.delete()
        AuditEvent.objects.create(
            kind=EventKind.SECURITY,
            actor=actor,
            actor_name=actor.get_username(),
            reason=TEAM_DELETED,
            message=f"{team.name} deleted by {actor.get_username()}",
            data={"team": team.name, "parent": parent, "members": members},
        )


def _audit(team: Team, *, actor, reason: str, message: str, **data) -> None:
    AuditEvent.objects.create(
        team=team,
        kind=EventKind.SECURITY,
        actor=actor,
        actor_name=actor.get_username(),
        reason=reason,
        message=f"{message} by {actor.get_username()}",
        data={"team": team.name, **data},
    )
