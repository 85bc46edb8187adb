"""Quota edits: validated against the team tree, written to the audit log."""

from teams.models import AuditEvent, Quota
from teams.services import OVER_PARENT, UNDER_CHILDREN

URL = "/api/v1/teams/research-foundation-models/quotas"


def quota(team: str, rclass: str) -> Quota:
    return Quota.objects.get(team__name=team, resource_class=rclass)


def test_lead_edit_is_applied_and_audited(api):
    body = {"reason": "llama run needs headroom", "quotas": {"gpu:H100": {"guaranteed": 35, "borrowing_limit": 40}}}
    response = api("rita").patch(URL, body, format="json")

    assert response.status_code == 200, response.json()
    h100 = next(q for q in response.json() if q["resource_class"] == "gpu:H100")
    assert (h100["guaranteed"], h100["borrowing_limit"]) == (35, 40)
    event = AuditEvent.objects.get(kind="QUOTA_CHANGED")
    assert (event.team.name, event.actor_name) == ("research-foundation-models", "rita")
    assert event.message == (
        "research-foundation-models gpu:H100: guaranteed 32 -> 35, borrowing_limit 64 -> 40 (llama run needs headroom)"
    )


def test_children_cannot_be_promised_more_than_their_division(api):
    # research has 51 H100; research-vision holds 16, so foundation models may have at most 35.
    body = {"reason": "too much", "quotas": {"gpu:H100": {"guaranteed": 36}}}
    response = api("rita").patch(URL, body, format="json")

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "quotas.gpu:H100.guaranteed": [
            OVER_PARENT.format(
                team="research-foundation-models", total=52, rclass="gpu:H100", parent="research", parent_amount=51
            )
        ]
    }
    assert quota("research-foundation-models", "gpu:H100").guaranteed == 32
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_a_division_cannot_drop_below_its_teams(api):
    body = {"reason": "shrink", "quotas": {"gpu:H100": {"guaranteed": 40}}}
    response = api("ops").patch("/api/v1/teams/research/quotas", body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["quotas.gpu:H100.guaranteed"] == [
        UNDER_CHILDREN.format(team="research", children=48, rclass="gpu:H100")
    ]


def test_a_failing_class_rolls_back_the_whole_patch(api):
    body = {"reason": "mixed", "quotas": {"gpu:A100": {"guaranteed": 5}, "gpu:H100": {"guaranteed": 99}}}
    assert api("rita").patch(URL, body, format="json").status_code == 400
    assert quota("research-foundation-models", "gpu:A100").guaranteed == 10


def test_a_new_resource_class_row_is_created(api):
    body = {"reason": "start on L40S", "quotas": {"gpu:L40S": {"borrowing_limit": 8}}}
    assert api("rita").patch(URL, body, format="json").status_code == 200
    assert quota("research-foundation-models", "gpu:L40S").borrowing_limit == 8


def test_bad_patches_name_the_field(api):
    client = api("rita")
    cases = [
        ({"quotas": {"gpu:H100": {"guaranteed": 1}}}, "reason"),
        ({"reason": "x", "quotas": {}}, "quotas"),
        ({"reason": "x", "quotas": {"gpu:V100": {"guaranteed": 1}}}, "quotas.gpu:V100"),
        ({"reason": "x", "quotas": {"gpu:H100": {"guaranteed": -1}}}, "quotas.gpu:H100.guaranteed"),
        ({"reason": "x", "quotas": {"gpu:H100": {"weight": 0}}}, "quotas.gpu:H100.weight"),
        ({"reason": "x", "quotas": {"gpu:H100": {}}}, "quotas.gpu:H100"),
    ]
    for body, field in cases:
        response = client.patch(URL, body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["fields"], (body, response.json())
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_unknown_team_is_404(api):
    assert api("ops").get("/api/v1/teams/nope/quotas").status_code == 404


def test_team_list_shows_the_tree_and_my_role(api):
    teams = {t["name"]: t for t in api("rita").get("/api/v1/teams").json()}
    assert teams["research"]["children"] == ["research-foundation-models", "research-vision"]
    assert teams["research-foundation-models"]["my_role"] == "lead"
    assert teams["research-vision"]["parent"] == "research"
    assert teams["research-vision"]["my_role"] is None


def test_an_unknown_field_is_refused_not_ignored(api):
    """`dry_run: true` was ignored and the change applied."""
    body = {"reason": "try", "dry_run": True, "quotas": {"gpu:H100": {"guaranteed": 35}}}
    response = api("rita").patch(URL, body, format="json")
    assert (response.status_code, response.json()["fields"]) == (400, {"dry_run": ["unknown field."]})
    assert quota("research-foundation-models", "gpu:H100").guaranteed == 32


def test_the_tree_check_names_no_figure_the_lead_may_not_read(api, settings):
    """With quotas private, the refusal told rita research's 51 (and, by difference, her sibling's 16)."""
    settings.MLQ_QUOTAS_PUBLIC = False
    body = {"reason": "too much", "quotas": {"gpu:H100": {"guaranteed": 10000}}}
    response = api("rita").patch(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["quotas.gpu:H100.guaranteed"] == [
        "research-foundation-models and its sibling teams would be guaranteed more gpu:H100 than research has: "
        "ask a lead of research."
    ]
    assert "51" in api("ops").patch(URL, body, format="json").json()["fields"]["quotas.gpu:H100.guaranteed"][0]


def test_a_change_to_the_current_values_writes_nothing(api):
    body = {"reason": "same again", "quotas": {"gpu:H100": {"guaranteed": 32, "borrowing_limit": 40}}}
    assert api("rita").patch(URL, body, format="json").status_code == 200
    assert [e.message for e in AuditEvent.objects.filter(kind="QUOTA_CHANGED")] == [
        "research-foundation-models gpu:H100: borrowing_limit 64 -> 40 (same again)"
    ]
    assert api("rita").patch(URL, body, format="json").status_code == 200
    assert AuditEvent.objects.filter(kind="QUOTA_CHANGED").count() == 1


def test_a_quota_change_reason_with_a_control_character_is_refused(api):
    body = {"reason": "bell\u0007", "quotas": {"gpu:H100": {"guaranteed": 30}}}
    response = api("rita").patch(URL, body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["reason"]
    assert quota("research-foundation-models", "gpu:H100").guaranteed == 32
