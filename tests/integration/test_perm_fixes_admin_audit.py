"""Memberships and the team tree changed in the Django admin are audited: a member made lead
there (who then may change quotas, submit at P0 and cancel the team's jobs) or a team moved
under another division left no entry in the audit log (found by QA)."""

import re

import pytest
from django.test import Client

from teams.models import ApiToken, AuditEvent, EventKind, Membership, Role, Team
from teams.team_changes import MEMBER_ADDED, MEMBER_REMOVED, ROLE_CHANGED, TEAM_CREATED, TEAM_DELETED, TEAM_MOVED

FM = "research-foundation-models"


@pytest.fixture
def admin(demo) -> Client:
    client = Client()
    assert client.login(username="ops", password="demo")
    return client


def entries(reason: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.SECURITY, reason=reason).order_by("id"))


def membership(username: str, team: str = FM) -> Membership:
    return Membership.objects.select_related("user", "team").get(user__username=username, team__name=team)


def test_a_role_changed_in_the_admin_is_audited_with_before_and_after(admin):
    alice = membership("alice")
    url = f"/admin/teams/membership/{alice.pk}/change/"
    response = admin.post(url, {"user": alice.user_id, "team": alice.team_id, "role": Role.LEAD})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert membership("alice").role == Role.LEAD
    (entry,) = entries(ROLE_CHANGED)
    assert (entry.team.name, entry.actor.username, entry.actor_name) == (FM, "ops", "ops")
    assert entry.message == f"alice's role in {FM}: member -> lead by ops"
    assert entry.data == {"team": FM, "user": "alice", "before": "member", "after": "lead"}


def test_saving_a_membership_unchanged_writes_nothing(admin):
    alice = membership("alice")
    url = f"/admin/teams/membership/{alice.pk}/change/"
    assert admin.post(url, {"user": alice.user_id, "team": alice.team_id, "role": Role.MEMBER}).status_code == 302
    assert not AuditEvent.objects.filter(kind=EventKind.SECURITY, team__name=FM).exists()


def test_a_member_added_and_removed_in_the_admin_is_audited(admin):
    victor = membership("victor", "research-vision")
    team = Team.objects.get(name=FM)
    response = admin.post("/admin/teams/membership/add/", {"user": victor.user_id, "team": team.pk, "role": "lead"})
    assert response.status_code == 302, response.content.decode()[:2000]
    (added,) = entries(MEMBER_ADDED)
    assert (added.team.name, added.message) == (FM, f"victor added to {FM} as lead by ops")
    added_pk = membership("victor").pk
    assert admin.post(f"/admin/teams/membership/{added_pk}/delete/", {"post": "yes"}).status_code == 302
    bobs = membership("bob", "production-ranking").pk
    action = {"action": "delete_selected", "_selected_action": [bobs], "post": "yes"}
    assert admin.post("/admin/teams/membership/", action).status_code == 302
    assert not Membership.objects.filter(pk__in=[added_pk, bobs]).exists()
    assert [(e.team.name, e.message, e.data["before"]) for e in entries(MEMBER_REMOVED)] == [
        (FM, f"victor (lead) removed from {FM} by ops", "lead"),
        ("production-ranking", "bob (member) removed from production-ranking by ops", "member"),
    ]


def test_a_membership_moved_to_another_team_is_a_removal_and_an_addition(admin):
    alice = membership("alice")
    vision = Team.objects.get(name="research-vision")
    response = admin.post(
        f"/admin/teams/membership/{alice.pk}/change/", {"user": alice.user_id, "team": vision.pk, "role": "member"}
    )
    assert response.status_code == 302
    assert [(e.reason, e.team.name) for e in AuditEvent.objects.filter(kind=EventKind.SECURITY).order_by("id")] == [
        (MEMBER_REMOVED, FM),
        (MEMBER_ADDED, "research-vision"),
    ]


def team_form(client: Client, team: Team, **changes) -> tuple[str, dict]:
    """The team's change page as the browser would post it back, with `changes` applied: its
    fields, the inline formsets' management fields and each membership row."""
    url = f"/admin/teams/team/{team.pk}/change/"
    html = client.get(url).content.decode()
    form = dict(re.findall(r'name="([^"]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d+)"', html))
    form.update(
        {
            "name": team.name,
            "parent": team.parent_id or "",
            "description": team.description,
            "created_at_0": team.created_at.strftime("%Y-%m-%d"),
            "created_at_1": team.created_at.strftime("%H:%M:%S"),
        }
    )
    rows = re.findall(r'name="(memberships-\d+)-id" value="(\d+)"', html)
    for prefix, pk in rows:
        row = Membership.objects.get(pk=pk)
        form.update({f"{prefix}-id": pk, f"{prefix}-team": team.pk, f"{prefix}-user": row.user_id})
        form[f"{prefix}-role"] = row.role
    form.update(changes)
    return url, form


def test_roles_changed_and_members_removed_in_the_teams_inline_are_audited(admin):
    team = Team.objects.get(name=FM)
    url, form = team_form(admin, team)
    alice, rita = membership("alice").pk, membership("rita").pk
    prefix = {
        int(form[key]): key.rsplit("-", 1)[0] for key in form if key.startswith("memberships-") and key.endswith("-id")
    }
    form[f"{prefix[alice]}-role"] = "lead"
    form[f"{prefix[rita]}-DELETE"] = "on"
    response = admin.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert membership("alice").role == "lead" and not Membership.objects.filter(pk=rita).exists()
    assert [(e.reason, e.message) for e in AuditEvent.objects.filter(kind=EventKind.SECURITY).order_by("id")] == [
        (MEMBER_REMOVED, f"rita (lead) removed from {FM} by ops"),
        (ROLE_CHANGED, f"alice's role in {FM}: member -> lead by ops"),
    ]


def test_a_team_created_moved_and_deleted_in_the_admin_is_audited(admin):
    response = admin.post(
        "/admin/teams/team/add/",
        {"name": "sandbox", "description": "", "created_at_0": "2026-04-20", "created_at_1": "09:00:00"}
        | {f"{p}-{k}": v for p in ("quotas", "memberships") for k, v in (("TOTAL_FORMS", 0), ("INITIAL_FORMS", 0))},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    sandbox = Team.objects.get(name="sandbox")
    url, form = team_form(admin, sandbox, parent=Team.objects.get(name="research").pk)
    assert admin.post(url, form).status_code == 302
    assert Team.objects.get(pk=sandbox.pk).parent.name == "research"
    (created,) = entries(TEAM_CREATED)
    (moved,) = entries(TEAM_MOVED)
    assert created.message == "sandbox created as a division by ops"
    assert (moved.team.name, moved.message) == ("sandbox", "sandbox moved from (a division) to research by ops")
    assert (moved.data["before"], moved.data["after"]) == (None, "research")
    # Its entries cannot be deleted (the audit log is append-only), so neither can the team here.
    assert admin.post(f"/admin/teams/team/{sandbox.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Team.objects.filter(pk=sandbox.pk).exists()


def test_a_team_deleted_in_the_admin_is_audited_by_name(admin):
    """A team with no entries yet (made in the shell) can go; the entry names it and its members."""
    scratch = Team.objects.create(name="scratch", parent=Team.objects.get(name="research"))
    Membership.objects.create(user=membership("alice").user, team=scratch)
    assert admin.post(f"/admin/teams/team/{scratch.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Team.objects.filter(name="scratch").exists()
    (deleted,) = entries(TEAM_DELETED)
    assert (deleted.team, deleted.actor_name, deleted.message, deleted.data) == (
        None,
        "ops",
        "scratch deleted by ops",
        {"team": "scratch", "parent": "research", "members": ["alice"]},
    )


def test_a_token_deleted_in_the_admin_is_revoked_first_and_its_user_may_still_be_deleted(admin, user):
    """Deleting one stopped it working with no entry in the audit log; refusing deletes
    outright then refused deleting any user who had a token (found in review)."""
    token, _ = ApiToken.issue(user=user("alice"))
    assert admin.post(f"/admin/teams/apitoken/{token.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert AuditEvent.objects.filter(kind="SECURITY", message__contains=token.hint).exists()
    other, _ = ApiToken.issue(user=user("alice"))
    action = {"action": "delete_selected", "_selected_action": [other.pk], "post": "yes"}
    admin.post("/admin/teams/apitoken/", action)
    assert not ApiToken.objects.filter(pk=other.pk).exists()
    assert AuditEvent.objects.filter(kind="SECURITY", message__contains=other.hint).exists()
    victor = user("victor")
    ApiToken.issue(user=victor)
    assert admin.post(f"/admin/auth/user/{victor.pk}/delete/", {"post": "yes"}).status_code == 302
