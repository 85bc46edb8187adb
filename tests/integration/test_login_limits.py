"""Password guessing: failed logins are counted per user name and per client address; past the
allowance the web login, the admin login and the token-exchange service answer 429 with when to
retry, without checking the password, until the window has passed."""

import logging
from datetime import UTC, datetime
from unittest import mock

import pytest
import time_machine
from django.core.cache import cache
from django.test import Client, RequestFactory

from mlqueue.api_errors import exception_handler
from teams.login_limits import (
    LOCKED_ADDRESS,
    LOCKED_USER,
    LoginLocked,
    authenticate_within_limits,
    check_login_allowed,
    client_address,
)

START = datetime(2026, 4, 20, 9, 0, 10, tzinfo=UTC)
ATTACKER = "203.0.113.7"
GUESS = "hunter2-not-the-password"


@pytest.fixture(autouse=True)
def limits(settings, demo):
    """Small allowances keep the attacks short; the counters start (and end) empty."""
    settings.MLQ_LOGIN_MAX_FAILURES, settings.MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS = 3, 5
    settings.MLQ_LOGIN_WINDOW_S = 600
    cache.clear()
    with time_machine.travel(START, tick=False) as clock:
        yield clock
    cache.clear()


def web_login(username: str, password: str, address: str = ATTACKER, path: str = "/accounts/login/"):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


def fail(times: int, username: str, address: str = ATTACKER, path: str = "/accounts/login/") -> None:
    for _ in range(times):
        response = web_login(username, GUESS, address, path)
        assert response.status_code == 200, response.status_code  # the form again: wrong password


def test_the_web_login_locks_a_user_name_and_does_not_check_the_password(limits):
    fail(3, "alice")
    with mock.patch("django.contrib.auth.forms.authenticate") as authenticate:
        response = web_login("alice", "demo")  # the right password, too late
    authenticate.assert_not_called()
    assert response.status_code == 429 and response["Retry-After"] == "600"
    message = LOCKED_USER.format(username="alice", wait="10 min")
    assert message == "too many failed logins for user name 'alice': try again in 10 min."
    assert message.replace("'", "&#x27;") in response.content.decode()
    assert "_auth_user_id" not in response.wsgi_request.session
    limits.shift(599)
    assert web_login("alice", "demo").status_code == 429
    limits.shift(1)
    assert web_login("alice", "demo").status_code == 302  # the window has passed


def test_the_lock_follows_the_user_name_to_any_address(limits):
    fail(3, "alice", address="198.51.100.1")
    assert web_login("alice", "demo", address="198.51.100.2").status_code == 429
    assert web_login("rita", "demo", address="198.51.100.2").status_code == 302  # others are not affected


def test_spraying_many_user_names_from_one_address_locks_the_address(limits):
    for username in ("alice", "rita", "victor", "paul", "bob"):  # one guess each: no user name is locked
        fail(1, username)
    response = web_login("ops", "demo")
    assert response.status_code == 429
    assert LOCKED_ADDRESS.format(address=ATTACKER, wait="10 min") in response.content.decode()
    assert web_login("ops", "demo", address="198.51.100.9").status_code == 302


def test_logging_in_to_ones_own_account_does_not_reset_the_address(limits):
    fail(2, "alice")
    fail(2, "rita")
    assert web_login("bob", "demo").status_code == 302  # the attacker's own account
    fail(1, "victor")  # the address's fifth failure
    assert web_login("paul", "demo").status_code == 429


def test_a_success_resets_its_user_name_count(limits):
    fail(2, "alice", address="198.51.100.1")
    assert web_login("alice", "demo", address="198.51.100.1").status_code == 302
    fail(2, "alice", address="198.51.100.1")
    assert web_login("alice", "demo", address="198.51.100.1").status_code == 302


def test_failures_spread_over_the_window_still_count(limits):
    """The previous window's failures weigh in by how much of them is still within the last 600 s."""
    fail(2, "alice")
    limits.shift(590)  # the next fixed window starts at 09:10:00; the two failures are 590 s old
    fail(1, "alice")
    assert web_login("alice", "demo").status_code == 429


def test_the_admin_login_is_limited_too(limits):
    fail(3, "ops", path="/admin/login/")
    with mock.patch("django.contrib.auth.forms.authenticate") as authenticate:
        response = web_login("ops", "demo", path="/admin/login/")
    authenticate.assert_not_called()
    assert response.status_code == 429 and response["Retry-After"] == "600"
    assert LOCKED_USER.format(username="ops", wait="10 min").replace("'", "&#x27;") in response.content.decode()


def test_x_forwarded_for_does_not_buy_a_fresh_allowance(limits):
    for i in range(5):
        response = Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR=f"10.0.0.{i}").post(
            "/accounts/login/", {"username": f"nobody{i}", "password": GUESS}
        )
        assert response.status_code == 200
    assert (
        Client(REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR="10.9.9.9")
        .post("/accounts/login/", {"username": "ops", "password": "demo"})
        .status_code
        == 429
    )


def test_an_ipv6_client_is_counted_by_its_64(limits):
    for i in range(5):
        fail(1, f"nobody{i}", address=f"2001:db8:1:2::{i + 1:x}")
    assert web_login("ops", "demo", address="2001:db8:1:2:ffff::1").status_code == 429
    assert web_login("ops", "demo", address="2001:db8:1:3::1").status_code == 302
    assert client_address(RequestFactory().get("/", REMOTE_ADDR="::ffff:192.0.2.1")) == "192.0.2.1"


def test_a_lockout_is_logged_with_user_name_and_address_but_never_the_password(limits, caplog):
    with caplog.at_level(logging.WARNING, logger="teams.login_limits"):
        fail(3, "alice")
    [record] = [r for r in caplog.records if r.name == "teams.login_limits"]
    assert record.getMessage() == (
        f"login locked for 600 s: user had 3 failed logins (user name 'alice', address {ATTACKER})"
    )
    assert GUESS not in caplog.text


def test_the_token_exchange_service_applies_the_same_limits(limits):
    request = RequestFactory().post("/api/v1/tokens", REMOTE_ADDR=ATTACKER)
    for _ in range(3):
        assert authenticate_within_limits(request, username="alice", password=GUESS) is None
    with mock.patch("teams.login_limits.authenticate") as authenticate, pytest.raises(LoginLocked) as locked:
        authenticate_within_limits(request, username="alice", password="demo")
    authenticate.assert_not_called()
    response = exception_handler(locked.value, {})  # how the API will answer it
    assert response.status_code == 429 and response["Retry-After"] == "600"
    assert response.data == {"detail": LOCKED_USER.format(username="alice", wait="10 min")}


def test_the_shorter_wait_is_said_in_seconds(limits):
    fail(3, "alice")
    limits.shift(555)
    with pytest.raises(LoginLocked) as locked:
        check_login_allowed(username="alice", address="198.51.100.1")
    assert (locked.value.wait, str(locked.value.detail)) == (45, LOCKED_USER.format(username="alice", wait="45 s"))
