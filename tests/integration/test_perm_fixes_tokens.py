"""A token made with a token expires no later than it: a one-day CI token could mint a token
that never expired (found by QA). Made with a password or a session, nothing changes."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.cache import cache
from rest_framework.test import APIClient

from teams.models import ApiToken, AuditEvent, EventKind
from teams.services import TOKEN_OUTLIVES_CALLER

START = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)
TOKENS = "/api/v1/tokens"


@pytest.fixture(autouse=True)
def frozen(demo):
    cache.clear()
    with time_machine.travel(START, tick=False) as clock:
        yield clock
    cache.clear()


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def short_lived(days: int = 1) -> APIClient:
    """alice's token for `days`, bought with her password, as a client sending it."""
    body = {"username": "alice", "password": "demo", "name": "ci", "expires_in_days": days}
    response = APIClient().post(TOKENS, body, "json")
    assert response.status_code == 201, response.json()
    return bearer(response.json()["token"])


def test_a_token_made_with_a_short_lived_token_expires_with_it():
    response = short_lived(1).post(TOKENS, {"name": "forever"}, "json")
    assert response.status_code == 201, response.json()
    assert response.json()["expires_at"] == "2026-04-21T09:00:00Z"
    assert ApiToken.objects.get(pk=response.json()["id"]).expires_at == datetime(2026, 4, 21, 9, tzinfo=UTC)
    made = AuditEvent.objects.filter(kind=EventKind.SECURITY, reason="API_TOKEN_CREATED").latest("id")
    caller = ApiToken.objects.get(name="ci")
    assert made.message.endswith(
        f"created, expires 2026-04-21T09:00:00+00:00 (the expiry of token {caller.hint}…, which created it)"
    )


def test_a_later_expiry_asked_with_a_short_lived_token_is_a_400_naming_expires_in_days():
    response = short_lived(1).post(TOKENS, {"name": "longer", "expires_in_days": 2}, "json")
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "expires_in_days": [TOKEN_OUTLIVES_CALLER.format(expires_at="2026-04-21T09:00:00+00:00")]
    }
    assert not ApiToken.objects.filter(name="longer").exists()


def test_an_expiry_within_the_callers_is_kept():
    response = short_lived(30).post(TOKENS, {"name": "week", "expires_in_days": 7}, "json")
    assert (response.status_code, response.json()["expires_at"]) == (201, "2026-04-27T09:00:00Z")


def test_a_token_that_never_expires_still_makes_one_that_never_expires(api):
    response = api("bob").post(TOKENS, {"name": "ci"}, "json")
    assert (response.status_code, response.json()["expires_at"]) == (201, None)


def test_a_password_or_a_session_is_not_capped_by_a_token_sent_beside_it(logged_in):
    """The password decides, even on a request that also carries a short-lived token."""
    body = {"username": "alice", "password": "demo", "name": "laptop", "expires_in_days": 90}
    by_password = short_lived(1).post(TOKENS, body, "json")
    assert (by_password.status_code, by_password.json()["expires_at"]) == (201, "2026-07-19T09:00:00Z")
    by_session = logged_in("rita").post(TOKENS, {"name": "notebook"}, "application/json")
    assert (by_session.status_code, by_session.json()["expires_at"]) == (201, None)
