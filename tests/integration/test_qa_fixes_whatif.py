"""What-if previews as docs/what-if.md says (QA): a user who may preview no team gets the 403
before the body is looked at (it was a 400 "team: This field is required"); a preview run in
the request (no broker) is answered DONE, with its figures (it was a 202 QUEUED)."""

import pytest
from django.db import transaction

from mlqueue.celery import app as celery_app
from scheduling.models import QuotaPreview
from scheduling.whatif import LEADS_NO_TEAM
from tests.integration.test_what_if import NO_BORROWING, history, start  # noqa: F401 (the fixture)


@pytest.mark.parametrize("body", [{}, {"team": "no-such-team"}, {"resource_class": "gpu:H100"}, []])
def test_a_user_who_leads_no_team_gets_the_403_whatever_the_body(api, history, body):  # noqa: F811
    response = api("alice").post("/api/v1/what-if", body, format="json")
    assert (response.status_code, response.json()["detail"]) == (403, LEADS_NO_TEAM)
    assert not QuotaPreview.objects.exists()


def test_a_lead_with_no_team_named_still_gets_the_400(api, history):  # noqa: F811
    response = start(api, "rita", {})
    assert response.status_code == 400 and "team" in response.json()["fields"]


@pytest.fixture
def embedded(monkeypatch):
    """No broker: the task runs as it is sent, and the request's commit sends it at once (no
    test transaction around the request holds it back)."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(transaction, "on_commit", lambda callback, using=None, robust=False: callback())


def test_a_preview_run_in_the_request_is_answered_done(clock, api, history, embedded):  # noqa: F811
    response = start(api, "rita", NO_BORROWING)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["progress"]) == ("DONE", 1.0)
    assert body["result"]["jobs"] == 9
    assert api("rita").get(f"/api/v1/what-if/{body['id']}").json()["result"] == body["result"]
