"""GET /api/v1/teams/{name}/events: a team's quota history and the changes to its members,
for whoever may read its quotas (no API showed the QUOTA_CHANGED entries, found by QA)."""

from django.test import Client

from mlqueue.query_parameters import UNKNOWN_PARAMETER_NO_FILTERS
from teams.api import NOT_A_MEMBER
from teams.models import AuditEvent, EventKind, Membership, Role, Team

FM = "research-foundation-models"
EVENTS = f"/api/v1/teams/{FM}/events"


def change_quota(api, guaranteed: int, reason: str) -> None:
    body = {"reason": reason, "quotas": {"gpu:H100": {"guaranteed": guaranteed}}}
    assert api("rita").patch(f"/api/v1/teams/{FM}/quotas", body, format="json").status_code == 200


def test_a_lead_reads_the_teams_quota_changes_newest_first(api):
    change_quota(api, 33, "new nodes")
    change_quota(api, 34, "more nodes")
    response = api("rita").get(EVENTS)
    assert response.status_code == 200, response.json()
    rows = response.json()["results"]
    assert [(row["kind"], row["actor"], row["data"]["reason"]) for row in rows] == [
        ("QUOTA_CHANGED", "rita", "more nodes"),
        ("QUOTA_CHANGED", "rita", "new nodes"),
    ]
    assert rows[0]["message"] == f"{FM} gpu:H100: guaranteed 33 -> 34 (more nodes)"
    assert (rows[0]["data"]["before"], rows[0]["data"]["after"]) == ({"guaranteed": 33}, {"guaranteed": 34})
    assert set(rows[0]) == {"id", "kind", "actor", "reason", "message", "data", "created_at"}


def test_membership_changes_made_in_the_admin_are_in_it(api, demo):
    admin = Client()
    assert admin.login(username="ops", password="demo")
    alice = Membership.objects.get(user__username="alice", team__name=FM)
    change = {"user": alice.user_id, "team": alice.team_id, "role": Role.LEAD}
    assert admin.post(f"/admin/teams/membership/{alice.pk}/change/", change).status_code == 302
    (row,) = api("alice").get(EVENTS).json()["results"]
    assert (row["kind"], row["reason"], row["actor"]) == ("SECURITY", "ROLE_CHANGED", "ops")
    assert row["data"] == {"team": FM, "user": "alice", "before": "member", "after": "lead"}


def test_it_pages_like_the_other_lists(api):
    for guaranteed in (33, 34, 35):
        change_quota(api, guaranteed, f"to {guaranteed}")
    client = api("alice")
    page = client.get(f"{EVENTS}?limit=2").json()
    seen = [row["data"]["reason"] for row in page["results"]]
    page = client.get(page["next"]).json()
    seen += [row["data"]["reason"] for row in page["results"]]
    assert seen == ["to 35", "to 34", "to 33"] and page["next"] is None


def test_other_teams_entries_are_not_in_it_and_its_schedule_entries_only_for_its_members(api):
    """Its schedules' entries are for whoever sees its schedules (docs/schedules.md), not for
    every reader of its quotas."""
    change_quota(api, 33, "ours")
    body = {"reason": "theirs", "quotas": {"gpu:H100": {"guaranteed": 70}}}
    assert api("paul").patch("/api/v1/teams/production-ranking/quotas", body, format="json").status_code == 200
    team = Team.objects.get(name=FM)
    AuditEvent.objects.create(team=team, kind=EventKind.SCHEDULE, actor_name="alice", reason="created", message="x")
    rows = api("rita").get(EVENTS).json()["results"]
    assert [(row["kind"], row["reason"]) for row in rows] == [("SCHEDULE", "created"), ("QUOTA_CHANGED", "QUOTA")]
    assert [row["data"]["reason"] for row in rows if row["kind"] == "QUOTA_CHANGED"] == ["ours"]
    assert [row["kind"] for row in api("bob").get(EVENTS).json()["results"]] == ["QUOTA_CHANGED"]


def test_who_may_read_it_follows_the_quotas_rule(api, settings):
    change_quota(api, 33, "new nodes")
    assert api("bob").get(EVENTS).status_code == 200  # quotas public (the default): every signed-in user
    settings.MLQ_QUOTAS_PUBLIC = False
    refused = api("bob").get(EVENTS)
    assert (refused.status_code, refused.json()["detail"]) == (403, NOT_A_MEMBER.format(team=FM))
    assert api("alice").get(EVENTS).status_code == 200  # a member
    assert api("victor").get("/api/v1/teams/research/events").status_code == 403  # below it, not a member of it
    assert api("ops").get(EVENTS).status_code == 200
    assert api(None).get(EVENTS).status_code == 401


def test_an_unknown_team_is_404_and_an_unknown_parameter_400(api):
    assert api("ops").get("/api/v1/teams/nope/events").status_code == 404
    response = api("rita").get(f"{EVENTS}?kind=QUOTA_CHANGED")
    assert response.status_code == 400
    assert response.json()["fields"] == {"kind": [UNKNOWN_PARAMETER_NO_FILTERS.format(pages="cursor, limit")]}


def test_a_teams_roster_changes_are_its_own_its_quota_changes_everyones(api, demo):
    """With quotas public, any user read another team's membership and lead changes here
    (found in review): its quota changes stay readable by all, its roster changes do not."""
    admin = Client()
    assert admin.login(username="ops", password="demo")
    alice = Membership.objects.get(user__username="alice", team__name=FM)
    admin.post(
        f"/admin/teams/membership/{alice.pk}/change/", {"user": alice.user_id, "team": alice.team_id, "role": Role.LEAD}
    )
    change_quota(api, 33, "new nodes")
    kinds = {name: [row["kind"] for row in api(name).get(EVENTS).json()["results"]] for name in ("bob", "alice", "ops")}
    assert kinds == {
        "bob": ["QUOTA_CHANGED"],
        "alice": ["QUOTA_CHANGED", "SECURITY"],
        "ops": ["QUOTA_CHANGED", "SECURITY"],
    }
