"""An operator's walkthrough of bad settings (mlqueue/env_settings.py, agents/node/daemon.py,
mlqueue/webserver.py):

- numbers read with a bare float() crashed with "could not convert string to float: '5m'",
  naming no variable, and a share of 2 was taken: each now names the variable, its value and
  what it takes;
- an outage bound of 0 (or a heartbeat interval of 0) was taken, and agents killed every task
  on a lease of 0 s: the server refuses to start unless the bound outlasts 3 heartbeats, and an
  agent refuses a lease of 0 s or less, saying so, instead of killing tasks;
- a REDIS_URL or DATABASE_URL of the wrong kind started "healthy" and failed every request;
- `python -m mlqueue.webserver` on a port in use was an OSError traceback.

The settings module as a whole is started in a subprocess in
tests/integration/test_settings_stop48.py."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.node import daemon, supervise
from agents.node.supervise import read_lease
from mlqueue.env_settings import (
    BAD_DATABASE_URL,
    BAD_REDIS_URL,
    LEASE_TOO_SHORT,
    NO_HEARTBEATS,
    check_lease_terms,
    check_redis_url,
    database_from_url,
    env_number,
)
from mlqueue.webserver import CANNOT_LISTEN
from tests.unit.test_agent_fencing import NODE

ROOT = Path(__file__).resolve().parents[2]


def refusal(call) -> str:
    with pytest.raises(ImproperlyConfigured) as caught:
        call()
    return str(caught.value)


# --- numbers -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, bounds, what",
    [
        ("5m", {"above": 0, "unit": "seconds"}, "a number of seconds > 0"),
        ("0", {"above": 0, "unit": "seconds"}, "a number of seconds > 0"),
        ("-1", {"at_least": 0, "unit": "seconds"}, "a number of seconds >= 0"),
        ("nan", {"at_least": 0, "unit": "seconds"}, "a number of seconds >= 0"),
        ("inf", {"above": 0, "unit": "hours"}, "a number of hours > 0"),
        ("2", {"at_least": 0, "at_most": 1}, "a number from 0 to 1"),
        ("55%", {"at_least": 0, "at_most": 1}, "a number from 0 to 1"),
        ("", {}, None),  # unset: the default
    ],
)
def test_a_bad_number_names_the_variable_its_value_and_what_it_takes(monkeypatch, raw, bounds, what):
    monkeypatch.setenv("MLQ_X", raw)
    if what is None:
        assert env_number("MLQ_X", 7.5, **bounds) == 7.5
        return
    assert refusal(lambda: env_number("MLQ_X", 1.0, **bounds)) == f"MLQ_X={raw!r}: {raw!r} is not {what}"


@pytest.mark.parametrize("raw, expected", [("300", 300.0), (" 0.5 ", 0.5), ("1e3", 1000.0)])
def test_a_good_number_is_read(monkeypatch, raw, expected):
    monkeypatch.setenv("MLQ_X", raw)
    assert env_number("MLQ_X", 1.0, above=0, unit="seconds") == expected
    assert env_number("MLQ_X", 1.0, at_least=0.5, at_most=1000) == expected


# --- the lease -----------------------------------------------------------------------------
@pytest.mark.parametrize("bound, interval", [(300, 5), (6, 1), (12, 1), (150, 5), (15.5, 5)])
def test_a_bound_that_outlasts_three_heartbeats_is_taken(bound, interval):
    check_lease_terms(bound_s=bound, interval_s=interval)  # the default, the e2e and chaos timings


@pytest.mark.parametrize("bound, interval", [(0, 5), (5, 5), (15, 5), (2, 1), (0.001, 5)])
def test_a_bound_within_three_heartbeats_is_refused_with_the_rule(bound, interval):
    expected = LEASE_TOO_SHORT.format(bound=bound, times=3, interval=interval, least=3 * interval)
    assert refusal(lambda: check_lease_terms(bound_s=bound, interval_s=interval)) == expected
    assert expected.startswith(f"MLQ_OUTAGE_BOUND_S={bound:g} must be above 3 x MLQ_HEARTBEAT_INTERVAL_S")


@pytest.mark.parametrize("interval", [0, -1])
def test_no_heartbeat_interval_is_refused(interval):
    assert refusal(lambda: check_lease_terms(bound_s=300, interval_s=interval)) == NO_HEARTBEATS.format(
        interval=interval
    )


# --- URLs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, why",
    [
        ("http://127.0.0.1:8069/0", "its scheme is 'http://'"),
        ("redis//host", "it has no scheme://"),
        ("127.0.0.1:6379", "it has no scheme://"),
        ("redis://h:port/0", "Port could not be cast to integer value as 'port'"),
        ("unix:///run/redis.sock", "its scheme is 'unix://'"),  # Celery's broker has no unix transport
    ],
)
def test_a_redis_url_of_the_wrong_kind_is_refused_naming_redis_url(url, why):
    assert refusal(lambda: check_redis_url(url)) == BAD_REDIS_URL.format(why=why)


@pytest.mark.parametrize("url", ["", "redis://127.0.0.1:6379/11", "rediss://:pw@r.example:6380/0"])
def test_redis_urls_redis_takes_are_taken(url):
    assert check_redis_url(url) == url


def test_a_refused_url_never_shows_its_password():
    assert "s3cret" not in refusal(lambda: check_redis_url("http://:s3cret@h/0"))
    assert "s3cret" not in refusal(lambda: database_from_url("mysql://u:s3cret@h/db"))
    assert "s3cret" not in refusal(lambda: database_from_url("postgres://u:s3cret@h:port/db"))


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://db.internal/mlqueue", "its scheme is 'http://'"),
        ("sqlite:///tmp/x.sqlite3", "its scheme is 'sqlite://'"),
        ("postgres//db.internal/mlqueue", "it has no scheme://"),
    ],
)
def test_a_database_url_that_is_not_postgres_is_refused_naming_database_url(url, why):
    assert refusal(lambda: database_from_url(url)) == BAD_DATABASE_URL.format(why=why)


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "pgsql"])
def test_postgres_urls_are_taken(scheme):
    database = database_from_url(f"{scheme}://u:p@db.internal:5432/mlqueue")
    assert database["ENGINE"] == "django.db.backends.postgresql" and database["NAME"] == "mlqueue"


# --- the agent -----------------------------------------------------------------------------
class Server:
    """A server whose every reply carries these lease terms."""

    timeout = 1.0

    def __init__(self, lease_s, interval_s):
        self.terms = {"lease_s": lease_s, "heartbeat_interval_s": interval_s}

    def post(self, path, body, *, token=None):
        return {"token": "mlqn_t", "highest_epoch": 0, "kill": [], "signals": [], "assignments": [], **self.terms}


def an_agent(tmp_path, lease_s, interval_s) -> daemon.NodeAgent:
    agent = daemon.NodeAgent(server="https://mlqueue.example.com", join_token="x", node=dict(NODE), workdir=tmp_path)
    agent.client = Server(lease_s, interval_s)
    return agent


@pytest.mark.parametrize("lease, interval", [(0, 5), (0.0, 5.0), (-3, 5), (300, 0), (None, 5), ("300", 5)])
def test_an_agent_refuses_to_join_under_a_lease_it_cannot_hold(tmp_path, caplog, lease, interval):
    agent = an_agent(tmp_path, lease, interval)
    agent.register()  # gives up, as for a node the server refuses
    agent.release()
    assert agent.stopping.is_set() and agent.refused == supervise.BAD_LEASE_TERMS.format(lease, interval)
    assert f"cannot register this node: the server's lease is {lease} s" in caplog.text
    assert "joined" not in caplog.text


def test_an_agent_keeps_the_lease_it_had_when_a_heartbeat_brings_one_of_0_s(tmp_path, caplog):
    agent = an_agent(tmp_path, 60, 5)
    assert agent.try_register() and agent.heartbeat()
    held = read_lease(agent.lease_path)
    agent.client.terms["lease_s"] = 0
    assert not agent.heartbeat()
    agent.release()
    assert read_lease(agent.lease_path) == held  # not expired at once: the tasks run on under it
    assert "heartbeat failed (not renewing: the server's lease is 0 s" in caplog.text


def test_a_reply_with_a_lease_it_cannot_hold_still_stops_what_it_says_to(tmp_path, monkeypatch):
    """A cancel, a preemption, a task no longer assigned here: stopping is safe under any lease.
    Only the renewal and new work are refused."""
    agent = an_agent(tmp_path, 60, 5)
    assert agent.try_register() and agent.heartbeat()
    sent = []
    monkeypatch.setattr(agent, "signal", lambda key, name, **how: sent.append((key, name, how["why"])))
    monkeypatch.setattr(agent, "start", lambda assignment: sent.append(("started", assignment["job_id"])))
    agent.client.terms.update(
        lease_s=0,
        kill=[{"job_id": 7, "rank": 0, "attempt": 1}],
        signals=[{"job_id": 8, "rank": 0, "attempt": 0, "signal": "TERM", "reason": "cancelled by alice"}],
        assignments=[{"job_id": 9}],
    )
    assert not agent.heartbeat()
    agent.release()
    assert sent == [((7, 0, 1), "KILL", "no longer assigned here"), ((8, 0, 0), "TERM", "cancelled by alice")]


@pytest.mark.parametrize(
    "terms",
    [
        {"lease_s": 0, "kill": [{"job_id": 7, "rank": 0}]},
        {"lease_s": None, "kill": {"job_id": 7, "rank": 0, "attempt": 1}},
        {"lease_s": "300", "signals": [{"job_id": 8, "rank": 0, "attempt": 0, "signal": "TERM"}]},
    ],
)
def test_unreadable_stop_orders_in_a_reply_without_a_lease_are_a_warning(tmp_path, caplog, terms):
    agent = an_agent(tmp_path, 60, 5)
    assert agent.try_register() and agent.heartbeat()
    agent.client.terms.update(terms)
    assert not agent.heartbeat()  # the heartbeat loop goes on
    agent.release()
    assert "unreadable stop orders in a reply without a lease" in caplog.text


def test_good_lease_terms_are_taken(tmp_path):
    agent = an_agent(tmp_path, 6, 1)
    assert agent.try_register() and agent.heartbeat() and agent.interval_s == 1
    agent.release()


# --- the web tier's port -------------------------------------------------------------------
def test_a_port_in_use_is_one_line_naming_it_and_its_option(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "mlqueue.webserver", "--workers", "2", "-b", "127.0.0.1", "-p", str(port)],
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    said = CANNOT_LISTEN.format(host="127.0.0.1", port=port, reason="Address already in use")
    assert result.stderr == f"mlqueue.webserver: {said}\n"
    assert "--port" in said and "PORT" in said
