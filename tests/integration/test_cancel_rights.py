"""Who may cancel a job: its owner, leads of its team or of a team above it, and site admins.
Seeing a job (any member of its team or of its division) is not enough."""

import pytest
from django.test import Client

from scheduling.models import Job
from scheduling.services import NOT_YOURS_TO_CANCEL
from teams.models import AuditEvent, Membership, Role, Team
from tests.conftest import make_spec


@pytest.fixture
def ritas_job(api):
    """A job of research-foundation-models submitted by its lead, rita; alice is a member."""
    return api("rita").post("/api/v1/jobs", make_spec(), format="json").json()["id"]


def refusal(job_id: int) -> str:
    return NOT_YOURS_TO_CANCEL.format(owner="rita", team="research-foundation-models", job_id=job_id, verb="cancel")


def assert_not_cancelled(job_id: int) -> None:
    assert Job.objects.get(pk=job_id).state == "PENDING"
    assert not AuditEvent.objects.filter(job_id=job_id, kind="CANCEL_REQUESTED").exists()


def join(user, team_name: str, role: str) -> None:
    Membership.objects.create(user=user, team=Team.objects.get(name=team_name), role=role)


def logged_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


def test_a_teammate_may_see_but_not_cancel_anothers_job(api, ritas_job):
    alice = api("alice")
    assert alice.get(f"/api/v1/jobs/{ritas_job}").status_code == 200
    response = alice.post(f"/api/v1/jobs/{ritas_job}/cancel", {"reason": "need the GPUs"}, format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": refusal(ritas_job)}
    assert refusal(ritas_job) == (
        "only the job's owner (rita), leads of research-foundation-models (or of a team "
        f"above it) and site admins may cancel job {ritas_job}."
    )
    assert_not_cancelled(ritas_job)


def test_the_refusal_comes_before_any_complaint_about_the_body(api, ritas_job):
    response = api("alice").post(f"/api/v1/jobs/{ritas_job}/cancel", {"reason": "x" * 501}, format="json")
    assert response.status_code == 403
    assert_not_cancelled(ritas_job)


def test_a_division_member_sees_the_job_but_may_not_cancel_it(api, user, ritas_job):
    join(user("victor"), "research", Role.MEMBER)
    victor = api("victor")
    assert victor.get(f"/api/v1/jobs/{ritas_job}").status_code == 200
    response = victor.post(f"/api/v1/jobs/{ritas_job}/cancel", {}, format="json")
    assert (response.status_code, response.json()) == (403, {"detail": refusal(ritas_job)})
    assert_not_cancelled(ritas_job)


def test_a_lead_of_the_division_above_may_cancel(api, user, ritas_job):
    join(user("victor"), "research", Role.LEAD)
    response = api("victor").post(f"/api/v1/jobs/{ritas_job}/cancel", {"reason": "over budget"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"
    assert AuditEvent.objects.get(job_id=ritas_job, kind="CANCEL_REQUESTED").actor_name == "victor"


@pytest.mark.parametrize("actor", ["alice", "rita", "ops"])  # owner, lead of the team, site admin
def test_the_owner_the_lead_and_an_admin_may_cancel(api, actor):
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    response = api(actor).post(f"/api/v1/jobs/{job_id}/cancel", {}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "CANCELLED"


def test_a_lead_of_another_team_cannot_even_see_it(api, ritas_job):
    assert api("paul").post(f"/api/v1/jobs/{ritas_job}/cancel", {}, format="json").status_code == 404
    assert_not_cancelled(ritas_job)


def test_the_job_page_offers_cancel_only_to_who_may(ritas_job):
    assert f'action="/jobs/{ritas_job}/cancel/"' in logged_in("rita").get(f"/jobs/{ritas_job}/").content.decode()
    html = logged_in("alice").get(f"/jobs/{ritas_job}/").content.decode()
    assert f"Job {ritas_job}" in html and "/cancel/" not in html


def test_a_forged_cancel_from_the_page_is_refused(ritas_job):
    response = logged_in("alice").post(f"/jobs/{ritas_job}/cancel/", {"reason": "mine now"})
    assert response.status_code == 403
    assert refusal(ritas_job).replace("'", "&#x27;") in response.content.decode()
    assert_not_cancelled(ritas_job)


def test_the_page_refuses_a_reason_with_a_control_character_as_the_api_does(ritas_job):
    response = logged_in("rita").post(f"/jobs/{ritas_job}/cancel/", {"reason": "a\x07b"})
    assert response.status_code == 400
    assert "reason: must not contain U+0007 CONTROL CHARACTER" in response.content.decode()
    assert_not_cancelled(ritas_job)  # nothing in the job's events either


def test_an_oversized_form_is_a_413_that_says_so(ritas_job, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = logged_in("rita").post(f"/jobs/{ritas_job}/cancel/", {"reason": "x" * 2000})
    assert response.status_code == 413
    assert response.content.decode().startswith("Request too large: a form body is at most 1000 bytes")
    assert_not_cancelled(ritas_job)
