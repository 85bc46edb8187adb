"""Inputs QA found taken silently or answered with a 500 or a 404 (as alice member, rita lead, ops
admin of the demo): an id filter past a bigint or not whole, `?format=csv` of a list without CSV,
parameters of endpoints that take none, `?zone=` of the nodes list, a YAML `!!set` (its items
in any order), a token body's string days and number password, and a class spelled as the docs
spell it. Each is a 400 naming the parameter or field, or taken as documented."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.http import QueryDict
from django.utils import timezone

from agents.node_filters import misused
from mlqueue.negotiation import BAD_FORMAT
from mlqueue.query_parameters import EMPTY_VALUE, NOT_AN_ID, UNKNOWN_PARAMETER_UNPAGED
from mlqueue.yaml_body import NOT_JSON_KINDS, NOT_JSON_VALUE
from notifications.api import NOT_A_JOB_ID
from scheduling.models import Job, Price, QuotaPreview
from teams.models import Quota, Team
from tests.conftest import make_spec

pytestmark = pytest.mark.django_db

RFM = "research-foundation-models"
HUGE = ["99999999999999999999", "9223372036854775808", "-99999999999999999999", "1e30", "1.5", "²", "0x10"]
TAKES_NOTHING = UNKNOWN_PARAMETER_UNPAGED.format(filters="nothing")


def refused(response, name: str) -> list[str]:
    """The 400's reasons for `name`, the only field it names."""
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [name], response.json()
    return response.json()["fields"][name]


@pytest.fixture
def job(api) -> int:
    response = api("alice").post("/api/v1/jobs", make_spec(client_job_id=None), format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


# 4. id filters: a 400 naming the parameter, as deliveries' `job` --------------------------------


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize(
    "path, name, what",
    [("/api/v1/jobs", "parent", "job"), ("/api/v1/jobs", "schedule", "schedule")],
)
def test_an_id_filter_that_is_no_id_is_a_400_naming_it(api, path, name, what, value):
    response = api("alice").get(path, {name: value})
    assert refused(response, name) == [NOT_AN_ID.format(what=what)]


@pytest.mark.parametrize("value", HUGE)
def test_deliveries_job_filter_says_the_same(api, value):
    assert refused(api("alice").get("/api/v1/notifications/deliveries", {"job": value}), "job") == [NOT_A_JOB_ID]


def test_the_largest_id_is_still_an_id(api, job):
    assert api("alice").get("/api/v1/jobs", {"parent": str(2**63 - 1)}).json()["results"] == []
    assert api("alice").get("/api/v1/jobs", {"schedule": "0"}).json()["results"] == []


# 5. ?format= and parameters of endpoints that take none -------------------------------------------


def test_a_format_a_list_does_not_write_is_a_400_naming_format(api):
    response = api("alice").get("/api/v1/jobs", {"format": "csv"})
    assert refused(response, "format") == [BAD_FORMAT.format(formats="json or api", value="csv")]
    assert refused(api("alice").get("/api/v1/usage", {"format": "xml"}), "format") == [
        "format is json or csv; got 'xml'."
    ]
    assert api("alice").get("/api/v1/jobs", {"format": "json"}).status_code == 200


@pytest.mark.parametrize(
    "path",
    ["/api/v1/fair-share", "/api/v1/scheduler", "/api/v1/teams", f"/api/v1/teams/{RFM}/quotas"],
)
def test_an_endpoint_that_takes_no_parameter_refuses_one(api, path):
    assert refused(api("alice").get(path, {"zz": "1"}), "zz") == [TAKES_NOTHING]
    assert api("alice").get(path).status_code == 200


def test_fair_share_refuses_a_resource_class(api):
    assert refused(api("alice").get("/api/v1/fair-share", {"resource_class": "zz"}), "resource_class") == [
        TAKES_NOTHING
    ]


def test_a_job_its_why_and_a_preview_refuse_parameters(clock, api, user, job):
    for path in (f"/api/v1/jobs/{job}", f"/api/v1/jobs/{job}/why"):
        assert refused(api("alice").get(path, {"zz": "1"}), "zz") == [TAKES_NOTHING]
    figures = {"guaranteed": 32, "borrowing_limit": 64, "weight": 1.0}
    preview = QuotaPreview.objects.create(
        requested_by=user("rita"),
        team=Team.objects.get(name=RFM),
        resource_class="gpu:H100",
        current=figures,
        proposed={**figures, "borrowing_limit": 0},
        window_start=timezone.now() - timedelta(days=7),
        window_end=timezone.now(),
    )
    path = f"/api/v1/what-if/{preview.pk}"
    assert refused(api("rita").get(path, {"zz": "1"}), "zz") == [TAKES_NOTHING]
    assert api("rita").get(path).status_code == 200


def test_the_nodes_filters_refuse_an_empty_value_for_the_api_not_the_console():
    """The console's form sends zone= for "any"; the API (agents/api.py) asks with empty_refused."""
    assert misused(QueryDict("zone=&rack=r1"), empty_refused=True) == {"zone": EMPTY_VALUE.format(name="zone")}
    assert misused(QueryDict("zone=&rack=r1")) == {}


# 6. YAML values JSON has no form for ----------------------------------------------------------------


def test_a_yaml_set_is_a_400_naming_the_field(api):
    text = "name: s\nteam: research-foundation-models\ncommand: !!set {echo, hello, world, foo}\n"
    response = api("alice").generic("POST", "/api/v1/jobs", text.encode(), content_type="application/yaml")
    kind, instead = NOT_JSON_KINDS[set]
    assert refused(response, "command") == [NOT_JSON_VALUE.format(kind=kind, instead=instead)]
    assert "must be a list" in response.json()["detail"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "value, path",
    [
        ("!!binary aGVsbG8=", "env.X"),
        ("!!timestamp 2026-12-01", "env.X"),
        ("!!omap [a: 1]", "env.X.0"),
    ],
)
def test_other_values_json_has_no_form_for_are_400s(api, value, path):
    text = f"name: s\nteam: research-foundation-models\ncommand: [echo]\nenv: {{X: {value}}}\n"
    response = api("alice").generic("POST", "/api/v1/jobs", text.encode(), content_type="application/yaml")
    assert "has no JSON form" in refused(response, path)[0]


# 7. token bodies ------------------------------------------------------------------------------------


def test_a_token_body_refuses_string_days(api):
    response = api("alice").post("/api/v1/tokens", {"name": "x", "expires_in_days": "5"}, format="json")
    assert refused(response, "expires_in_days") == ["must be an integer, not the string '5'."]


def test_a_number_password_is_a_400_not_a_failed_login(api):
    with mock.patch("teams.login_limits.note_login_failure") as noted:
        body = {"name": "x", "username": "alice", "password": 123}
        response = api(None).post("/api/v1/tokens", body, format="json")
    assert refused(response, "password") == ["must be a string, not int."]
    noted.assert_not_called()


def test_the_tokens_page_still_takes_its_form_days(logged_in):
    response = logged_in("alice").post("/account/tokens/", {"name": "notebook", "expires_in_days": "30"})
    assert response.status_code == 200
    response = logged_in("alice").post("/account/tokens/", {"name": "nb2", "expires_in_days": "0"})
    assert response.status_code == 400


# 8. class names as docs/quotas.md spells them ---------------------------------------------------------


@pytest.mark.parametrize("name", ["h100", "H100", "gpu:h100", "GPU:H100"])
def test_a_quota_class_is_taken_as_the_docs_spell_it(api, name):
    response = api("rita").patch(
        f"/api/v1/teams/{RFM}/quotas", {"reason": "x", "quotas": {name: {"guaranteed": 33}}}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert Quota.objects.get(team__name=RFM, resource_class="gpu:H100").guaranteed == 33


@pytest.mark.parametrize("name", ["gpu:h100", "h100"])
def test_a_price_class_is_taken_in_any_case_and_stored_by_its_name(api, name):
    response = api("ops").post("/api/v1/prices", {"resource_class": name, "gpu_hour": "2.5"}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["resource_class"] == "gpu:H100"
    assert Price.objects.get(pk=response.json()["id"]).gpu_hour == Decimal("2.5")
    listed = api("ops").get("/api/v1/prices", {"resource_class": name}).json()
    assert [row["id"] for row in listed] == [response.json()["id"]]
    assert api("alice").get("/api/v1/usage", {"resource_class": name}).status_code == 200
