"""QA walkthrough fixes on htmx answers: a fragment asked for after the session ended sends the
browser to the login page (HX-Redirect) instead of swapping the login page into the panel, and
the nodes console's refusals are 200s to htmx (which swaps no 4xx) so #action-error shows."""

import re

import pytest
from django.test import Client

from scheduling.models import Job, MaintenanceWindow, Node, SchedulerLease
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import heartbeat

HTMX = {"HTTP_HX_REQUEST": "true"}
SITE = "http://testserver"


def htmx_as_gone(path: str, current: str | None, method: str = "get"):
    """`path` asked by htmx from the page `current` (HX-Current-URL), with no session."""
    headers = {**HTMX, **({"HTTP_HX_CURRENT_URL": current} if current is not None else {})}
    return getattr(Client(), method)(path, **headers)


@pytest.fixture
def job_id(api) -> int:
    return api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]


def test_every_fragment_sends_the_browser_to_the_login_page_with_the_page_as_next(job_id):
    fragments = [
        ("/queue/?page=2", f"{SITE}/queue/?page=2&team=research-vision"),
        (f"/queue/groups/{job_id}/", f"{SITE}/queue/"),
        (f"/jobs/{job_id}/panel/", f"{SITE}/jobs/{job_id}/"),
        (f"/jobs/{job_id}/help/", f"{SITE}/jobs/{job_id}/"),
        (f"/jobs/{job_id}/group/", f"{SITE}/jobs/{job_id}/"),
        (f"/jobs/{job_id}/log/?rank=0", f"{SITE}/jobs/{job_id}/"),
        ("/nodes/?part=heatmap", f"{SITE}/nodes/?rack=z1-r1"),
        ("/teams/?part=fair-share", f"{SITE}/teams/"),
    ]
    for path, current in fragments:
        response = htmx_as_gone(path, current)
        assert response.status_code == 401, path
        page = current.removeprefix(SITE).replace("?", "%3F").replace("&", "%26").replace("=", "%3D")
        assert response["HX-Redirect"] == f"/accounts/login/?next={page}", path
        assert b"<form" not in response.content  # nothing to swap into the panel


def test_an_htmx_post_after_the_session_ended_goes_to_the_login_page_too(demo):
    response = htmx_as_gone("/jobs/new/", f"{SITE}/jobs/new/", method="post")
    assert (response.status_code, response["HX-Redirect"]) == (401, "/accounts/login/?next=/jobs/new/")


@pytest.mark.parametrize(
    "current",
    [None, "", "https://evil.example/queue/", "//evil.example/queue/", "javascript:alert(1)"],
)
def test_next_is_only_ever_a_page_of_this_site(demo, current):
    response = htmx_as_gone("/queue/", current)
    assert (response.status_code, response["HX-Redirect"]) == (401, "/accounts/login/")


def test_without_htmx_login_required_still_redirects(demo):
    response = Client().get("/queue/?page=2")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/queue/%3Fpage%3D2"
    assert "HX-Redirect" not in response


def test_a_logged_in_htmx_request_is_answered_as_before(logged_in, job_id):
    response = logged_in("alice").get(f"/jobs/{job_id}/panel/", HTTP_HX_CURRENT_URL=f"{SITE}/jobs/{job_id}/", **HTMX)
    assert response.status_code == 200 and "HX-Redirect" not in response
    assert response.content.decode().startswith('<div id="job-panel"')


@pytest.fixture
def ops(demo, client):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    client.login(username="ops", password="demo")
    return client


def action_error(response) -> str:
    found = re.search(r'id="action-error" role="alert">(.*?)</span>', response.content.decode(), re.S)
    return found[1] if found else ""


def test_a_refused_bulk_action_is_a_200_to_htmx_with_its_error_and_a_400_without(ops):
    body = {"action": "drain", "reason": "", "racks": ["z1-r1"]}
    swapped = ops.post("/nodes/", body, **HTMX)
    assert swapped.status_code == 200 and action_error(swapped).startswith("reason: ")
    assert swapped.content.decode().lstrip().startswith('<div id="heatmap"')
    plain = ops.post("/nodes/", body)
    assert plain.status_code == 400 and action_error(plain).startswith("reason: ")
    assert not Node.objects.exclude(state="READY").exists()
    assert not AuditEvent.objects.filter(kind="NODE_STATE", actor_name="ops").exists()


def test_a_refused_maintenance_window_is_a_200_to_htmx_with_its_error(ops):
    body = {"action": "maintenance", "racks": ["z1-r1"], "starts_at": "soon", "hours": "4", "reason": "PDU"}
    swapped = ops.post("/nodes/", body, **HTMX)
    assert swapped.status_code == 200 and action_error(swapped).startswith("starts_at: ")
    assert ops.post("/nodes/", body).status_code == 400
    assert not MaintenanceWindow.objects.exists()


def test_a_refused_node_action_is_a_200_to_htmx_naming_the_node(ops):
    swapped = ops.post("/nodes/", {"node": "z1-r1-h100-01", "action": "drain", "reason": " "}, **HTMX)
    assert swapped.status_code == 200 and action_error(swapped).startswith("z1-r1-h100-01: reason: ")
    assert Job.objects.count() == 0 and Node.objects.get(name="z1-r1-h100-01").state == "READY"
