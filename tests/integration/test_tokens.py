"""Self-service API tokens (issue 15): created for a password (rate-limited like the login) or
for an authenticated request, shown once, listed and revoked by their owner (or a site admin),
refused once expired, and every creation and revocation in the audit log without the raw value."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from mlqueue.text import INVISIBLE
from teams.api import (
    CREDENTIAL_MISSING,
    NO_CREDENTIALS,
    NO_SUCH_TOKEN,
    ONLY_ADMINS_LIST_OTHERS,
    WRONG_CREDENTIALS,
)
from teams.authentication import GENERATION_KEY, INVALID_TOKEN, TOKEN_EXPIRED
from teams.login_limits import LOCKED_USER
from teams.models import ApiToken, AuditEvent, EventKind, hash_token
from teams.serializers import NOT_A_STRING

START = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)
TOKENS = "/api/v1/tokens"


@pytest.fixture(autouse=True)
def limits(settings, demo):
    """The login's small test allowances, counters empty, the clock frozen at START."""
    settings.MLQ_LOGIN_MAX_FAILURES, settings.MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS = 3, 5
    settings.MLQ_LOGIN_WINDOW_S = 600
    cache.clear()
    with time_machine.travel(START, tick=False) as clock:
        yield clock
    cache.clear()


def exchange(password: str = "demo", username: str = "alice", **body):
    return APIClient().post(TOKENS, {"username": username, "password": password, "name": "laptop", **body}, "json")


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def security_events(reason: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind=EventKind.SECURITY, reason=reason))


# --- create -------------------------------------------------------------------------------


def test_a_password_buys_a_named_token_shown_once(user):
    response = exchange(expires_in_days=90)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) == {"id", "name", "token", "hint", "created_at", "expires_at"}
    raw = body["token"]
    assert raw.startswith("mlq_") and body["hint"] == raw[:12] and body["name"] == "laptop"
    assert body["created_at"] == "2026-04-20T09:00:00Z" and body["expires_at"] == "2026-07-19T09:00:00Z"
    token = ApiToken.objects.get(pk=body["id"])
    assert token.user == user("alice") and token.digest == hash_token(raw)
    assert bearer(raw).get("/api/v1/teams").status_code == 200


def test_no_expiry_by_default(user):
    body = exchange().json()
    assert body["expires_at"] is None and ApiToken.objects.get(pk=body["id"]).expires_at is None


def test_an_authenticated_request_needs_no_password(api, logged_in, user):
    by_token = api("bob").post(TOKENS, {"name": "ci"}, "json")
    assert by_token.status_code == 201 and ApiToken.objects.get(pk=by_token.json()["id"]).user == user("bob")
    by_session = logged_in("rita").post(TOKENS, {"name": "notebook"}, "application/json")
    assert by_session.status_code == 201 and ApiToken.objects.get(pk=by_session.json()["id"]).user == user("rita")


def test_no_authentication_and_no_credentials_is_401():
    response = APIClient().post(TOKENS, {"name": "laptop"}, "json")
    assert response.status_code == 401 and response.json()["detail"] == NO_CREDENTIALS


def test_half_the_credentials_is_400_naming_the_missing_one():
    response = APIClient().post(TOKENS, {"username": "alice", "name": "laptop"}, "json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"password": [CREDENTIAL_MISSING]}


def test_wrong_password_and_unknown_user_get_the_same_401():
    wrong_password, unknown_user = exchange("not-it"), exchange(username="nobody")
    assert wrong_password.status_code == unknown_user.status_code == 401
    assert wrong_password.json() == unknown_user.json() == {"detail": WRONG_CREDENTIALS}
    assert not ApiToken.objects.exists()


def test_inactive_users_get_no_token(user):
    alice = user("alice")
    alice.is_active = False
    alice.save()
    assert exchange().status_code == 401


def test_guessing_locks_the_exchange_like_the_login(limits):
    for _ in range(3):
        assert exchange("guess").status_code == 401
    locked = exchange()  # the right password, too late
    assert locked.status_code == 429 and locked["Retry-After"] == "600"
    assert locked.json()["detail"] == LOCKED_USER.format(username="alice", wait="10 min")
    assert not ApiToken.objects.exists()
    limits.shift(601)
    assert exchange().status_code == 201


def test_the_web_login_and_the_exchange_share_one_count():
    from django.test import Client

    for _ in range(3):
        Client().post("/accounts/login/", {"username": "alice", "password": "guess"})
    assert exchange().status_code == 429


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "lap\u202etop"}, "name"),
        ({"name": "lap\ntop"}, "name"),
        ({"name": 12}, "name"),
        ({"name": ["laptop"]}, "name"),
        ({"name": "laptop", "expires_in_days": 0}, "expires_in_days"),
        ({"name": "laptop", "expires_in_days": -1}, "expires_in_days"),
        ({"name": "laptop", "expires_in_days": "x"}, "expires_in_days"),
        ({"name": "laptop", "expires_in_days": 99999}, "expires_in_days"),
        ({"name": "laptop", "expires_in_days": 1.5}, "expires_in_days"),
    ],
)
def test_bad_input_is_400_naming_the_field(api, body, field):
    response = api("alice").post(TOKENS, body, "json")
    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == [field]
    assert response.json()["detail"].startswith(f"{field}: ")
    assert ApiToken.objects.count() == 1  # only the client's own


def test_the_messages_for_bad_names(api):
    invisible = api("alice").post(TOKENS, {"name": "lap\u202etop"}, "json").json()["fields"]["name"]
    assert invisible == [INVISIBLE.format(char="U+202E RIGHT-TO-LEFT OVERRIDE")]
    number = api("alice").post(TOKENS, {"name": 12}, "json").json()["fields"]["name"]
    assert number == [NOT_A_STRING.format(kind="int")]


def test_a_body_that_is_not_an_object_is_400(api):
    for body in ([1, 2], 7, "name"):
        assert api("alice").post(TOKENS, body, "json").status_code == 400


def test_the_longest_name_and_expiry_are_accepted(api):
    response = api("alice").post(TOKENS, {"name": "x" * 100, "expires_in_days": 3650}, "json")
    assert response.status_code == 201 and response.json()["expires_at"] == "2036-04-17T09:00:00Z"


# --- list ---------------------------------------------------------------------------------


def test_the_list_is_the_callers_tokens_newest_first_without_secrets(api, limits, user):
    client = api("alice")  # its own token is the oldest
    limits.shift(60)
    first = exchange().json()
    limits.shift(60)
    second = exchange(expires_in_days=1).json()
    exchange(username="bob", password="demo")
    response = client.get(TOKENS)
    assert response.status_code == 200
    rows = response.json()
    assert [row["id"] for row in rows][:2] == [second["id"], first["id"]] and len(rows) == 3
    assert all(
        set(row) == {"id", "name", "hint", "created_at", "last_used_at", "expires_at", "revoked_at"} for row in rows
    )
    assert rows[0]["expires_at"] == "2026-04-21T09:02:00Z" and rows[0]["last_used_at"] is None
    assert rows[2]["last_used_at"] == "2026-04-20T09:02:00Z"  # the one this very request came with
    assert second["token"] not in response.content.decode()


def test_only_admins_list_someone_elses_tokens(api):
    exchange(username="bob", password="demo")
    assert api("ops").get(TOKENS, {"user": "bob"}).json()[0]["name"] == "laptop"
    refused = api("alice").get(TOKENS, {"user": "bob"})
    assert refused.status_code == 403 and refused.json()["detail"] == ONLY_ADMINS_LIST_OTHERS
    assert api("alice").get(TOKENS, {"user": "alice"}).status_code == 200
    assert api("ops").get(TOKENS, {"user": "nobody"}).status_code == 404


def test_listing_needs_authentication():
    assert APIClient().get(TOKENS).status_code == 401


# --- revoke -------------------------------------------------------------------------------


def test_revoking_your_own_token_is_204_and_idempotent(api):
    created = exchange().json()
    client = api("alice")
    assert client.delete(f"{TOKENS}/{created['id']}").status_code == 204
    token = ApiToken.objects.get(pk=created["id"])
    assert token.revoked_at == START
    refused = bearer(created["token"]).get("/api/v1/teams")
    assert refused.status_code == 401 and refused.json()["detail"] == INVALID_TOKEN
    assert client.delete(f"{TOKENS}/{created['id']}").status_code == 204
    assert len(security_events("API_TOKEN_REVOKED")) == 1  # the second changed nothing


def test_a_token_can_revoke_itself():
    created = exchange().json()
    assert bearer(created["token"]).delete(f"{TOKENS}/{created['id']}").status_code == 204
    assert bearer(created["token"]).get(TOKENS).status_code == 401


def test_someone_elses_token_is_404_unless_admin(api):
    bobs = exchange(username="bob", password="demo").json()
    refused = api("alice").delete(f"{TOKENS}/{bobs['id']}")
    assert refused.status_code == 404 and refused.json()["detail"] == NO_SUCH_TOKEN.format(token_id=bobs["id"])
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at is None
    assert api("alice").delete(f"{TOKENS}/999999999999999999999").status_code == 404
    assert api("ops").delete(f"{TOKENS}/{bobs['id']}").status_code == 204
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at == START
    (event,) = security_events("API_TOKEN_REVOKED")
    assert event.actor_name == "ops" and event.data["user"] == "bob"


def test_revoking_needs_authentication():
    created = exchange().json()
    assert APIClient().delete(f"{TOKENS}/{created['id']}").status_code == 401


# --- expiry -------------------------------------------------------------------------------


def test_an_expired_token_is_refused_saying_when(limits):
    raw = exchange(expires_in_days=1).json()["token"]
    limits.shift(timedelta(days=1) - timedelta(seconds=1))
    assert bearer(raw).get("/api/v1/teams").status_code == 200
    limits.shift(1)
    refused = bearer(raw).get("/api/v1/teams")
    assert refused.status_code == 401
    assert refused.json()["detail"] == TOKEN_EXPIRED.format(expired_at="2026-04-21T09:00:00+00:00")
    assert refused.json()["detail"].startswith("This token expired at 2026-04-21T09:00:00+00:00; create a new one")


# --- audit --------------------------------------------------------------------------------


def test_creation_and_revocation_are_audited_without_the_raw_token(api):
    created = exchange(expires_in_days=90).json()
    api("alice").delete(f"{TOKENS}/{created['id']}")
    (made,) = security_events("API_TOKEN_CREATED")
    (revoked,) = security_events("API_TOKEN_REVOKED")
    assert made.actor.username == "alice" and made.actor_name == "alice"
    assert made.data == {
        "api_token": created["id"],
        "user": "alice",
        "name": "laptop",
        "expires_at": "2026-07-19T09:00:00+00:00",
    }
    assert made.message == f"API token {created['hint']}… (laptop) of alice created, expires 2026-07-19T09:00:00+00:00"
    assert revoked.message == f"API token {created['hint']}… (laptop) of alice revoked"
    token = ApiToken.objects.get(pk=created["id"])
    for event in (made, revoked):
        text = event.message + str(event.data)
        assert created["token"] not in text and token.digest not in text


# --- the page -----------------------------------------------------------------------------

PAGE = "/account/tokens/"


def test_the_page_needs_a_login():
    from django.test import Client

    response = Client().get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_user_menu_links_the_page(logged_in):
    assert f'href="{PAGE}"' in logged_in("alice").get("/queue/").content.decode()


def test_the_page_lists_your_tokens_only(logged_in):
    mine, bobs = exchange().json(), exchange(username="bob", password="demo").json()
    html = logged_in("alice").get(PAGE).content.decode()
    assert f'id="token-{mine["id"]}"' in html and f"{mine['hint']}…" in html
    assert f'id="token-{bobs["id"]}"' not in html
    assert mine["token"] not in html


def test_creating_on_the_page_shows_the_token_once(logged_in):
    client = logged_in("alice")
    response = client.post(PAGE, {"name": "notebook", "expires_in_days": "30"})
    assert response.status_code == 200 and response["Cache-Control"].startswith("max-age=0")
    (token,) = ApiToken.objects.filter(name="notebook")
    raw = response.context["raw"]
    assert token.digest == hash_token(raw) and token.expires_at == START + timedelta(days=30)
    assert raw in response.content.decode() and "it will not be shown again" in response.content.decode()
    assert raw not in client.get(PAGE).content.decode()
    assert bearer(raw).get("/api/v1/teams").status_code == 200
    assert len(security_events("API_TOKEN_CREATED")) == 1


def test_a_blank_expiry_on_the_page_is_never(logged_in):
    logged_in("alice").post(PAGE, {"name": "notebook", "expires_in_days": ""})
    assert ApiToken.objects.get(name="notebook").expires_at is None


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "note\u200bbook"}, "name"),
        ({"name": "notebook", "expires_in_days": "0"}, "expires_in_days"),
        ({"name": "notebook", "expires_in_days": "x"}, "expires_in_days"),
        ({"name": "notebook", "expires_in_days": "99999"}, "expires_in_days"),
    ],
)
def test_bad_input_on_the_page_is_400_naming_the_field(logged_in, form, field):
    response = logged_in("alice").post(PAGE, form)
    assert response.status_code == 400
    assert f'data-field="{field}"' in response.content.decode()
    assert not ApiToken.objects.exists()


def test_revoking_on_the_page(logged_in):
    created = exchange().json()
    response = logged_in("alice").post(PAGE, {"revoke": created["id"]}, follow=True)
    assert response.redirect_chain == [(PAGE, 302)]
    assert ApiToken.objects.get(pk=created["id"]).revoked_at == START
    assert f"Token {created['hint']}… (laptop) revoked" in response.content.decode()
    assert bearer(created["token"]).get("/api/v1/teams").status_code == 401
    (event,) = security_events("API_TOKEN_REVOKED")
    assert event.actor_name == "alice"


def test_another_users_token_cannot_be_revoked_on_the_page(logged_in):
    bobs = exchange(username="bob", password="demo").json()
    for value in (bobs["id"], "999999999999999999999", "x", "", "٣"):
        response = logged_in("alice").post(PAGE, {"revoke": value})
        assert response.status_code == 404, value
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at is None
    assert not security_events("API_TOKEN_REVOKED")


def test_an_admin_revokes_anyones_token_on_the_page(logged_in):
    bobs = exchange(username="bob", password="demo").json()
    assert logged_in("ops").post(PAGE, {"revoke": bobs["id"]}).status_code == 302
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at == START


def test_the_page_needs_csrf(demo):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.login(username="alice", password="demo")
    assert client.post(PAGE, {"name": "notebook"}).status_code == 403
    assert not ApiToken.objects.exists()


def test_the_django_admins_revoke_action_is_audited(logged_in):
    bobs = exchange(username="bob", password="demo").json()
    response = logged_in("ops").post("/admin/teams/apitoken/", {"action": "revoke", "_selected_action": [bobs["id"]]})
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=bobs["id"]).revoked_at == START
    (event,) = security_events("API_TOKEN_REVOKED")
    assert event.actor_name == "ops" and event.data["user"] == "bob"


# --- the web process's memory of accepted tokens (teams/authentication.py) -------------------


def token_reads(client: APIClient, path: str = TOKENS) -> int:
    """The queries of one request that read API tokens."""
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return sum('FROM "teams_apitoken"' in query["sql"] and "last_used_at" in query["sql"] for query in captured)


def test_an_accepted_token_is_not_read_again_within_the_ttl(settings):
    settings.MLQ_TOKEN_CACHE_S = 60
    client = bearer(exchange().json()["token"])
    assert token_reads(client, "/api/v1/teams") == 1
    assert token_reads(client, "/api/v1/teams") == 0
    settings.MLQ_TOKEN_CACHE_S = 0  # off: read at every request
    assert token_reads(client, "/api/v1/teams") == 1


def test_a_remembered_token_revoked_through_the_api_is_refused_at_once(settings, api):
    settings.MLQ_TOKEN_CACHE_S = 60
    created = exchange().json()
    client = bearer(created["token"])
    assert client.get("/api/v1/teams").status_code == 200  # now remembered
    assert api("ops").delete(f"{TOKENS}/{created['id']}").status_code == 204
    refused = client.get("/api/v1/teams")
    assert refused.status_code == 401 and refused.json()["detail"] == INVALID_TOKEN


def test_a_remembered_token_of_a_deactivated_user_is_refused_at_once(settings, user):
    settings.MLQ_TOKEN_CACHE_S = 60
    client = bearer(exchange().json()["token"])
    assert client.get("/api/v1/teams").status_code == 200
    alice = user("alice")
    alice.is_active = False
    alice.save()  # as the admin's user page does
    assert client.get("/api/v1/teams").status_code == 401


def test_a_remembered_token_still_expires_on_time(settings, limits):
    settings.MLQ_TOKEN_CACHE_S = 3600
    client = bearer(exchange(expires_in_days=1).json()["token"])
    assert client.get("/api/v1/teams").status_code == 200
    limits.shift(timedelta(days=1))
    refused = client.get("/api/v1/teams")
    assert refused.status_code == 401 and refused.json()["detail"].startswith("This token expired at")


def test_a_token_change_reaches_every_process_through_the_cache(settings):
    """Another web process revoking: all this one shares with it is the cache's generation."""
    settings.MLQ_TOKEN_CACHE_S = 60
    created = exchange().json()
    client = bearer(created["token"])
    assert client.get("/api/v1/teams").status_code == 200
    ApiToken.objects.filter(pk=created["id"]).update(revoked_at=START)  # behind this process's back
    assert client.get("/api/v1/teams").status_code == 200  # remembered: up to MLQ_TOKEN_CACHE_S
    cache.set(GENERATION_KEY, "written by another process")
    assert client.get("/api/v1/teams").status_code == 401


def test_the_admin_cannot_move_or_revive_a_token(client, user):
    """Moving alice's token to ops, or clearing a revocation, in the admin was an unaudited
    takeover: whose it is and until when are set when it is issued."""
    token, _ = ApiToken.issue(user=user("alice"))
    token.revoked_at = datetime(2026, 1, 1, tzinfo=UTC)
    token.save()
    assert client.login(username="ops", password="demo")
    url = f"/admin/teams/apitoken/{token.pk}/change/"
    assert client.get(url).status_code == 200
    client.post(url, {"user": user("ops").pk, "name": "taken", "revoked_at_0": "", "revoked_at_1": ""})
    token.refresh_from_db()
    assert (token.user.username, token.revoked_at) == ("alice", datetime(2026, 1, 1, tzinfo=UTC))


def test_an_unknown_field_is_refused_not_a_token_that_never_expires(api):
    """`expires_in` for `expires_in_days` gave a token with no expiry."""
    response = api("bob").post(TOKENS, {"name": "ci", "expires_in": 7}, "json")
    assert (response.status_code, response.json()["fields"]) == (400, {"expires_in": ["unknown field."]})
    assert not ApiToken.objects.filter(name="ci").exists()
