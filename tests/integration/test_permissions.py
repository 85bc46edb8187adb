"""Who may do what: member, another team's member, lead, admin x list / detail / cancel / quotas."""

import pytest

from teams.api import NOT_A_LEAD, NOT_A_MEMBER
from teams.models import AuditEvent
from tests.conftest import make_spec

ACTORS = ["alice", "bob", "rita", "ops"]  # member, other team's member, lead, admin (all of rfm's job)

MATRIX = {
    # actor: (sees it in the list, detail status, cancel status, quota read status, quota edit status)
    "alice": (True, 200, 200, 200, 403),  # the job's owner; a teammate may not cancel (test_cancel_rights.py)
    "bob": (False, 404, 404, 200, 403),  # quotas are public by default (MLQ_QUOTAS_PUBLIC)
    "rita": (True, 200, 200, 200, 200),
    "ops": (True, 200, 200, 200, 200),
}


@pytest.fixture
def job_id(api):
    return api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]


@pytest.mark.parametrize("actor", ACTORS)
def test_list(api, job_id, actor):
    ids = [j["id"] for j in api(actor).get("/api/v1/jobs").json()["results"]]
    assert (job_id in ids) is MATRIX[actor][0]


@pytest.mark.parametrize("actor", ACTORS)
def test_detail(api, job_id, actor):
    assert api(actor).get(f"/api/v1/jobs/{job_id}").status_code == MATRIX[actor][1]
    assert api(actor).get(f"/api/v1/jobs/{job_id}/events").status_code == MATRIX[actor][1]


@pytest.mark.parametrize("actor", ACTORS)
def test_cancel(api, job_id, actor):
    response = api(actor).post(f"/api/v1/jobs/{job_id}/cancel", {"reason": "test"}, format="json")
    assert response.status_code == MATRIX[actor][2]
    if response.status_code == 200:
        assert response.json()["state"] == "CANCELLED"
        assert AuditEvent.objects.get(job_id=job_id, kind="CANCEL_REQUESTED").actor_name == actor
    else:
        assert not AuditEvent.objects.filter(job_id=job_id, kind="CANCEL_REQUESTED").exists()


@pytest.mark.parametrize("actor", ACTORS)
def test_quota_read(api, actor):
    response = api(actor).get("/api/v1/teams/research-foundation-models/quotas")
    assert response.status_code == MATRIX[actor][3]


@pytest.mark.parametrize(("actor", "status"), [("alice", 200), ("bob", 403), ("rita", 200), ("ops", 200)])
def test_quota_read_when_quotas_are_private(api, settings, actor, status):
    settings.MLQ_QUOTAS_PUBLIC = False
    response = api(actor).get("/api/v1/teams/research-foundation-models/quotas")
    assert response.status_code == status
    if status == 403:
        assert response.json()["detail"] == NOT_A_MEMBER.format(team="research-foundation-models")


@pytest.mark.parametrize("actor", ACTORS)
def test_quota_edit(api, actor):
    body = {"reason": "new project", "quotas": {"gpu:H100": {"guaranteed": 30}}}
    response = api(actor).patch("/api/v1/teams/research-foundation-models/quotas", body, format="json")
    assert response.status_code == MATRIX[actor][4]
    if response.status_code == 403:
        assert response.json()["detail"] == NOT_A_LEAD.format(team="research-foundation-models")
        assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_a_lead_cannot_edit_another_teams_quota(api):
    body = {"reason": "grab", "quotas": {"gpu:H100": {"guaranteed": 1}}}
    assert api("rita").patch("/api/v1/teams/production-ranking/quotas", body, format="json").status_code == 403
    assert api("paul").patch("/api/v1/teams/research-vision/quotas", body, format="json").status_code == 403


def test_anonymous_gets_401_everywhere(api, job_id):
    client = api(None)
    for url in [
        "/api/v1/jobs",
        f"/api/v1/jobs/{job_id}",
        "/api/v1/teams",
        "/api/v1/nodes",
        "/api/v1/teams/research-vision/quotas",
    ]:
        assert client.get(url).status_code == 401, url
    assert client.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 401


def test_nodes_are_readable_by_any_user(api):
    nodes = api("victor").get("/api/v1/nodes?gpu_type=H100").json()["results"]
    assert len(nodes) == 16
    assert {n["state"] for n in nodes} == {"NEW"}


def test_the_console_refuses_a_cancel_reason_too_long_as_the_api_does(logged_in, job_id):
    """It was cut to 500 characters without a word."""
    from scheduling.models import Job

    response = logged_in("alice").post(f"/jobs/{job_id}/cancel/", {"reason": "x" * 600})
    assert response.status_code == 400
    assert "reason: at most 500 characters (600 given): nothing was cancelled." in response.content.decode()
    assert Job.objects.get(pk=job_id).state == "PENDING"


def test_logging_out_leads_back_to_the_login_page(logged_in):
    response = logged_in("alice").post("/accounts/logout/")
    assert (response.status_code, response["Location"]) == (302, "/accounts/login/")
