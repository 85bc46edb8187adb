"""QA's quota defects: a lead gave her own team a weight of 1000 and jumped her sibling teams;
guarantees and borrowing limits far beyond the cluster were accepted; `gpu:h100` was an
unknown class. Who sets what, and the cluster's size, are in docs/quotas.md."""

import pytest
from django.contrib.auth import get_user_model

from scheduling.models import Node
from teams.models import AuditEvent, Membership, Quota, Role, Team
from teams.quota_rules import (
    DIVISIONS_OVER_CAPACITY,
    GUARANTEE_OVER_CAPACITY,
    LIMIT_OVER_CAPACITY,
    SET_BY_ADMINS,
    SET_FROM_ABOVE,
)
from teams.resources import unknown_class_message
from teams.serializers import SAME_CLASS_TWICE

RFM = "research-foundation-models"
H100 = "gpu:H100"


def url(team: str) -> str:
    return f"/api/v1/teams/{team}/quotas"


def patch(client, team: str, quotas: dict):
    return client.patch(url(team), {"reason": "x", "quotas": quotas}, format="json")


def quota(team: str, rclass: str = H100) -> Quota:
    return Quota.objects.get(team__name=team, resource_class=rclass)


def make_lead(username: str, team: str) -> None:
    user = get_user_model().objects.get(username=username)
    Membership.objects.update_or_create(user=user, team=Team.objects.get(name=team), defaults={"role": Role.LEAD})


# 1. A weight ranks a team against its siblings: set from the team above.


def test_a_lead_may_not_set_her_own_teams_weight(api):
    response = patch(api("rita"), RFM, {H100: {"weight": 1000}})

    assert response.status_code == 403, response.json()
    message = SET_FROM_ABOVE.format(team=RFM, field="weight", parent="research")
    assert response.json() == {
        "detail": f"quotas.gpu:H100.weight: {message}",
        "fields": {"quotas.gpu:H100.weight": [message]},
    }
    assert quota(RFM).weight == 1.0
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()
    standing = next(team for team in api("rita").get("/api/v1/fair-share").json()["teams"] if team["name"] == RFM)
    assert next(row for row in standing["classes"] if row["resource_class"] == H100)["weight"] == 1.0


def test_a_refused_weight_leaves_the_rest_of_the_patch_unwritten(api):
    body = {H100: {"guaranteed": 33, "weight": 2}, "gpu:A100": {"guaranteed": 9}}  # A100 is written first
    assert patch(api("rita"), RFM, body).status_code == 403
    assert (quota(RFM).guaranteed, quota(RFM, "gpu:A100").guaranteed) == (32, 10)


def test_her_guarantee_limit_and_an_unchanged_weight_she_still_sets(api):
    response = patch(api("rita"), RFM, {H100: {"guaranteed": 35, "borrowing_limit": 70, "weight": 1.0}})
    assert response.status_code == 200, response.json()
    assert (quota(RFM).guaranteed, quota(RFM).borrowing_limit) == (35, 70)
    added = patch(api("rita"), RFM, {"gpu:L40S": {"borrowing_limit": 8, "weight": 1}})  # the default weight
    assert added.status_code == 200, added.json()


def test_a_lead_sets_the_weights_of_the_teams_below_hers(api):
    Team.objects.create(name="rfm-llm", parent=Team.objects.get(name=RFM))
    assert patch(api("rita"), "rfm-llm", {H100: {"guaranteed": 8, "weight": 3}}).status_code == 200
    assert quota("rfm-llm").weight == 3


def test_a_division_lead_sets_her_teams_weights_not_her_divisions(api):
    make_lead("victor", "research")
    assert patch(api("victor"), RFM, {H100: {"weight": 2}}).status_code == 200
    assert quota(RFM).weight == 2
    response = patch(api("victor"), "research", {H100: {"weight": 2}})
    assert response.status_code == 403
    assert response.json()["fields"] == {
        "quotas.gpu:H100.weight": [SET_BY_ADMINS.format(team="research", field="weight")]
    }


def test_admins_set_any_weight(api):
    assert patch(api("ops"), RFM, {H100: {"weight": 2}}).status_code == 200
    assert patch(api("ops"), "research", {H100: {"weight": 2}}).status_code == 200
    assert (quota(RFM).weight, quota("research").weight) == (2, 2)


def test_the_teams_page_shows_the_refusal_beside_the_weight(logged_in):
    form = {"team": RFM, "resource_class": H100, "guaranteed": "32", "borrowing_limit": "64", "weight": "1000"}
    response = logged_in("rita").post("/teams/", {**form, "reason": "x"})
    assert response.status_code == 200
    assert SET_FROM_ABOVE.format(team=RFM, field="weight", parent="research").replace("'", "&#x27;") in (
        response.content.decode()
    )
    assert quota(RFM).weight == 1.0


# 2. Nothing beyond the cluster: 128 H100 (16 nodes of 8), 768 CPU cores.


def test_a_guarantee_beyond_the_cluster_is_refused_with_its_size(api):
    response = patch(api("ops"), "production", {H100: {"guaranteed": 500}})
    assert response.status_code == 400
    message = GUARANTEE_OVER_CAPACITY.format(capacity=128, unit="H100 GPUs", value=500)
    assert response.json()["fields"] == {"quotas.gpu:H100.guaranteed": [message]}
    assert quota("production").guaranteed == 77


def test_a_borrowing_limit_beyond_the_cluster_is_refused(api):
    response = patch(api("rita"), RFM, {H100: {"borrowing_limit": 1_000_000}})
    assert response.status_code == 400
    message = LIMIT_OVER_CAPACITY.format(capacity=128, unit="H100 GPUs", value=1_000_000)
    assert response.json()["fields"] == {"quotas.gpu:H100.borrowing_limit": [message]}
    cpu = patch(api("rita"), RFM, {"cpu": {"borrowing_limit": 769}})
    assert cpu.json()["fields"]["quotas.cpu.borrowing_limit"] == [
        LIMIT_OVER_CAPACITY.format(capacity=768, unit="CPU cores", value=769)
    ]
    assert patch(api("rita"), RFM, {H100: {"borrowing_limit": 128}}).status_code == 200


def test_cordoned_nodes_count(api):
    Node.objects.filter(gpu_type="H100").update(admin_state="CORDONED")
    assert patch(api("rita"), RFM, {H100: {"borrowing_limit": 128}}).status_code == 200


def test_the_divisions_together_fit_in_the_cluster(api):
    response = patch(api("ops"), "production", {H100: {"guaranteed": 78}})  # research holds 51
    assert response.status_code == 400
    message = DIVISIONS_OVER_CAPACITY.format(total=129, unit="H100 GPUs", capacity=128)
    assert response.json()["fields"] == {"quotas.gpu:H100.guaranteed": [message]}
    assert patch(api("ops"), "research", {H100: {"guaranteed": 50}}).status_code == 200
    assert patch(api("ops"), "production", {H100: {"guaranteed": 78}}).status_code == 200


def test_a_figure_above_a_shrunken_cluster_may_still_be_lowered(api):
    Quota.objects.filter(team__name="production", resource_class=H100).update(guaranteed=300, borrowing_limit=900)
    response = patch(api("ops"), "production", {H100: {"guaranteed": 200, "borrowing_limit": 500}})
    assert response.status_code == 200, response.json()


@pytest.mark.parametrize("gpu_types", [["H100", "A100", "L40S", "B200"]])
def test_a_class_without_nodes_yet_takes_quotas_and_is_checked_once_they_join(api, settings, gpu_types):
    settings.MLQ_GPU_TYPES = gpu_types
    assert patch(api("ops"), "production", {"gpu:B200": {"guaranteed": 16, "borrowing_limit": 32}}).status_code == 200
    node = Node.objects.filter(gpu_type="H100").first()
    node.pk, node.name, node.gpu_type = None, "z1-r9-b200-01", "B200"
    node.save()
    response = patch(api("ops"), "production", {"gpu:B200": {"guaranteed": 17}})
    assert response.json()["fields"] == {
        "quotas.gpu:B200.guaranteed": [GUARANTEE_OVER_CAPACITY.format(capacity=8, unit="B200 GPUs", value=17)]
    }


# 4. Class names in any case.


def test_a_class_is_taken_in_any_case_and_stored_by_its_name(api):
    response = patch(api("rita"), RFM, {"gpu:h100": {"guaranteed": 33}, "CPU": {"guaranteed": 151}})
    assert response.status_code == 200, response.json()
    assert (quota(RFM).guaranteed, quota(RFM, "cpu").guaranteed) == (33, 151)
    assert not Quota.objects.filter(resource_class__in=["gpu:h100", "CPU"]).exists()
    event = AuditEvent.objects.filter(kind="QUOTA_CHANGED", data__resource_class=H100).get()
    assert event.message.startswith(f"{RFM} gpu:H100: guaranteed 32 -> 33")


def test_one_class_named_twice_is_refused(api):
    response = patch(api("rita"), RFM, {"gpu:H100": {"guaranteed": 33}, "gpu:h100": {"guaranteed": 34}})
    assert response.status_code == 400
    assert response.json()["fields"] == {"quotas.gpu:h100": [SAME_CLASS_TWICE.format(other="gpu:H100")]}
    assert quota(RFM).guaranteed == 32


def test_the_teams_page_says_the_right_spelling(logged_in):
    form = {"team": RFM, "resource_class": "gpu:h100", "guaranteed": "33", "reason": "x"}
    response = logged_in("rita").post("/teams/", form)
    assert response.status_code == 200
    assert "did you mean &#x27;gpu:H100&#x27;?" in response.content.decode()
    assert unknown_class_message("gpu:h100", ["gpu:H100", "cpu"]) == (
        "unknown resource class 'gpu:h100': did you mean 'gpu:H100'?"
    )
    assert quota(RFM).guaranteed == 32
