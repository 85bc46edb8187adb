"""Resource classes follow the cluster: a GPU type configured in MLQ_GPU_TYPES or reported by a
registered node can be given quotas (API, teams page, admin); any other class is refused by name."""

import re

import pytest
from django.utils.html import escape
from rest_framework.test import APIClient

from scheduling.usage import cluster_usage
from teams.models import AuditEvent, Quota, Team
from teams.resources import known_classes

FM = "research-foundation-models"
JOIN = "join-secret"
H200_NODE = {
    "zone": "z1",
    "rack": "z1-r9",
    "gpu_type": "H200",
    "gpu_count": 8,
    "cpu_count": 192,
    "memory_gb": 2048,
    "labels": {},
    "address": "10.0.0.9",
}


@pytest.fixture
def h200_configured(settings):
    settings.MLQ_GPU_TYPES = ["H100", "A100", "L40S", "H200"]


@pytest.fixture
def h200_node(demo, settings):
    """An H200 machine joins through the agent API; MLQ_GPU_TYPES does not name H200."""
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN
    response = APIClient().post(
        "/api/v1/agents/register", {"name": "h200-01", **H200_NODE}, format="json", HTTP_AUTHORIZATION=f"Bearer {JOIN}"
    )
    assert response.status_code == 201, response.json()


def patch_h200(api, username: str, team: str, **fields):
    body = {"reason": "H200s arrive", "quotas": {"gpu:H200": fields}}
    return api(username).patch(f"/api/v1/teams/{team}/quotas", body, format="json")


def test_the_known_classes_follow_the_settings_and_the_nodes(demo, settings):
    assert known_classes() == ["gpu:H100", "gpu:A100", "gpu:L40S", "cpu"]
    settings.MLQ_GPU_TYPES = ["H200", "H100"]
    # The demo fleet has A100 and L40S machines: they stay known, after the configured types.
    assert known_classes() == ["gpu:H200", "gpu:H100", "gpu:A100", "gpu:L40S", "cpu"]


def test_a_configured_gpu_type_gets_quotas_through_the_api(api, h200_configured):
    assert patch_h200(api, "ops", "research", guaranteed=16).status_code == 200
    response = patch_h200(api, "rita", FM, guaranteed=8, borrowing_limit=8)

    assert response.status_code == 200, response.json()
    quota = Quota.objects.get(team__name=FM, resource_class="gpu:H200")
    assert (quota.guaranteed, quota.borrowing_limit) == (8, 8)
    assert AuditEvent.objects.filter(kind="QUOTA_CHANGED", data__resource_class="gpu:H200").count() == 2


def test_a_gpu_type_a_node_reports_counts_and_gets_quotas(api, h200_node):
    assert patch_h200(api, "ops", "research", guaranteed=8).status_code == 200

    usage = cluster_usage()
    assert usage.capacity["gpu:H200"] == 8
    assert usage.known_classes == ("gpu:H100", "gpu:A100", "gpu:L40S", "gpu:H200", "cpu")
    assert usage.team("research").get("gpu:H200").guaranteed == 8


def test_an_unknown_class_is_refused_naming_the_known_ones(api, h200_configured):
    response = api("rita").patch(
        f"/api/v1/teams/{FM}/quotas", {"reason": "x", "quotas": {"gpu:X": {"guaranteed": 1}}}, format="json"
    )

    assert response.status_code == 400
    message = "unknown resource class 'gpu:X'; known: cpu, gpu:A100, gpu:H100, gpu:H200, gpu:L40S."
    assert response.json() == {"detail": f"quotas.gpu:X: {message}", "fields": {"quotas.gpu:X": [message]}}
    assert not Quota.objects.filter(resource_class="gpu:X").exists()


def test_the_teams_page_offers_the_classes_a_team_has_no_row_for(logged_in, h200_configured):
    html = logged_in("rita").get("/teams/").content.decode()

    add = re.search(rf'<tbody id="team-{FM}">.*?</tbody>', html, re.DOTALL).group(0)
    assert re.findall(r'<option value="([^"]+)">', add) == ["gpu:L40S", "gpu:H200"]
    assert html.count('class="small add-quota"') == 1  # rita leads one team


def test_a_lead_adds_a_quota_for_a_new_class_on_the_teams_page(api, logged_in, h200_configured):
    assert patch_h200(api, "ops", "research", guaranteed=16).status_code == 200
    client = logged_in("rita")

    form = client.get(f"/teams/?team={FM}&resource_class=gpu%3AH200&edit=1").content.decode()
    assert form.startswith(f'<tr id="quota-{FM}-gpu-H200" class="editing">')
    assert client.get(f"/teams/?team={FM}&resource_class=gpu%3AH200").content == b""  # Cancel: the row goes
    response = client.post(
        "/teams/",
        {
            "team": FM,
            "resource_class": "gpu:H200",
            "guaranteed": "8",
            "borrowing_limit": "0",
            "weight": "1.0",
            "reason": "H200s arrive",
        },
    )

    assert response.status_code == 200 and response["HX-Trigger"] == "quotas-changed"
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H200").guaranteed == 8


def test_the_teams_page_refuses_an_unknown_class(logged_in):
    client = logged_in("rita")
    message = "unknown resource class 'gpu:X'; known: cpu, gpu:A100, gpu:H100, gpu:L40S."

    response = client.get(f"/teams/?team={FM}&resource_class=gpu%3AX&edit=1")
    assert response.status_code == 400 and response.content.decode() == f"resource_class: {message}"
    html = client.post(
        "/teams/", {"team": FM, "resource_class": "gpu:X", "guaranteed": "1", "reason": "x"}
    ).content.decode()
    assert f'<p class="error">{escape(message)}</p>' in html
    assert not Quota.objects.filter(resource_class="gpu:X").exists()


def test_quotas_are_shown_not_edited_in_the_admin(client, demo, h200_configured):
    """An admin edit skipped the tree check (a team guaranteed more than its parent, after which
    no lead could change even a weight) and the audit log: quotas change through the teams page,
    the API and `mlq quota`."""
    assert client.login(username="ops", password="demo")
    quota = Quota.objects.filter(team__name="research-vision").first()
    assert client.get("/admin/teams/quota/add/").status_code == 403
    assert client.get(f"/admin/teams/quota/{quota.pk}/change/").status_code == 200  # shown
    form = {"team": quota.team_id, "resource_class": quota.resource_class, "guaranteed": "500", "weight": "1.0"}
    assert client.post(f"/admin/teams/quota/{quota.pk}/change/", form).status_code == 403
    assert Quota.objects.get(pk=quota.pk).guaranteed == quota.guaranteed


def test_the_admin_refuses_a_cycle_or_a_move_the_new_parent_cannot_hold(client, demo):
    assert client.login(username="ops", password="demo")
    research, child = Team.objects.get(name="research"), Team.objects.get(name="research-foundation-models")
    url = f"/admin/teams/team/{research.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    form = {
        "name": "research",
        "parent": child.pk,
        "description": research.description,
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
        **_inline_management(page),
    }
    refused = client.post(url, form)
    assert refused.status_code == 200
    assert "is research or a team under it: a team tree has no cycles." in refused.content.decode()
    assert Team.objects.get(pk=research.pk).parent_id is None
    assert research.ancestors() == []  # and a cycle written around the form does not hang the walk
    Team.objects.filter(pk=research.pk).update(parent=child)
    assert [t.name for t in Team.objects.get(pk=child.pk).ancestors()] == ["research"]


def _inline_management(page) -> dict:
    """The inline formsets' management fields as the change page rendered them."""
    import re

    html = page.content.decode()
    return dict(re.findall(r'name="([^"]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d+)"', html))


def test_a_quota_added_at_the_defaults_is_a_change_and_audited(api, h200_configured):
    """Without a quota for a class a team may borrow it without bound; a quota at 0 and 0 says
    it may not: added at the defaults it is still a change, written and audited once (QA: the
    row was written and the audit entry left out)."""
    assert patch_h200(api, "ops", "research", guaranteed=16).status_code == 200
    response = patch_h200(api, "rita", FM, guaranteed=0, borrowing_limit=0)
    assert response.status_code == 200, response.json()
    event = AuditEvent.objects.get(kind="QUOTA_CHANGED", team__name=FM, data__resource_class="gpu:H200")
    assert event.data["before"] == {} and event.data["after"] == {"guaranteed": 0, "borrowing_limit": 0, "weight": 1.0}
    assert "quota added: guaranteed 0, borrowing_limit 0, weight 1.0" in event.message
    assert patch_h200(api, "rita", FM, guaranteed=0, borrowing_limit=0).status_code == 200  # the same again
    assert AuditEvent.objects.filter(kind="QUOTA_CHANGED", team__name=FM, data__resource_class="gpu:H200").count() == 1
