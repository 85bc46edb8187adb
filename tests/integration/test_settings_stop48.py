"""Bad settings stop every entry point at its start, naming the variable (the settings loaded
in a subprocess, as web, scheduler and manage.py load them); embedded mode with DEBUG off
starts, and `check --deploy` says it is no deployment (mlqueue.E002, mlqueue.E003). The
helpers themselves: tests/unit/test_settings_stop48.py."""

import os
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.core import checks

from mlqueue.checks import DATABASE_HINT, EMBEDDED_DATABASE, EMBEDDED_REDIS, REDIS_HINT, check_embedded_stores
from tests.e2e.processes import ROOT

START = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.MLQ_OUTAGE_BOUND_S, settings.MLQ_HEARTBEAT_INTERVAL_S, settings.MLQ_FULL_DISRUPTION_SHARE)"
)


def start(**env) -> subprocess.CompletedProcess:
    """Load the settings with the suite's environment (Postgres, Redis, a key) and `env`."""
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DJANGO_SETTINGS_MODULE")}
    base.update(DJANGO_SETTINGS_MODULE="mlqueue.settings", DEBUG="0", **env)
    base = {k: v for k, v in base.items() if v is not None}
    return subprocess.run([sys.executable, "-c", START], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60)


def refused(result: subprocess.CompletedProcess) -> str:
    """The ImproperlyConfigured line the start ended with."""
    assert result.returncode != 0, result.stdout
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "name, raw, what",
    [
        ("MLQ_OUTAGE_BOUND_S", "5m", "a number of seconds > 0"),
        ("MLQ_OUTAGE_BOUND_S", "0", "a number of seconds > 0"),
        ("MLQ_HEARTBEAT_INTERVAL_S", "0", "a number of seconds > 0"),
        ("MLQ_HEARTBEAT_INTERVAL_S", "fast", "a number of seconds > 0"),
        ("MLQ_MAX_RUNTIME_HOURS", "30d", "a number of hours > 0"),
        ("MLQ_LIVENESS_FLUSH_S", "10s", "a number of seconds > 0"),
        ("MLQ_FULL_DISRUPTION_SHARE", "2", "a number from 0 to 1"),
        ("MLQ_FULL_DISRUPTION_SHARE", "55%", "a number from 0 to 1"),
    ],
)
def test_a_bad_number_stops_the_start_naming_the_variable(name, raw, what):
    assert (
        refused(start(**{name: raw}))
        == f"django.core.exceptions.ImproperlyConfigured: {name}={raw!r}: {raw!r} is not {what}"
    )


@pytest.mark.parametrize(
    "name",
    [
        "MLQ_RETRY_BACKOFF_BASE_S",
        "MLQ_RETRY_BACKOFF_MAX_S",
        "MLQ_FAULT_APPLY_DELAY_S",
        "MLQ_LOST_MARGIN_S",
        "MLQ_HEARTBEAT_BATCH_WAIT_S",
        "MLQ_FORECAST_INTERVAL_S",
        "MLQ_WS_RECHECK_S",
    ],
)
def test_every_seconds_setting_names_itself(name):
    line = refused(start(**{name: "5m"}))
    assert line.endswith(f"{name}='5m': '5m' is not a number of seconds >= 0"), line


def test_an_outage_bound_within_three_heartbeats_stops_the_start_with_the_rule():
    line = refused(start(MLQ_OUTAGE_BOUND_S="10", MLQ_HEARTBEAT_INTERVAL_S="5"))
    assert "MLQ_OUTAGE_BOUND_S=10 must be above 3 x MLQ_HEARTBEAT_INTERVAL_S (5 s), i.e. above 15 s" in line


def test_the_end_to_end_timings_still_start():
    result = start(MLQ_OUTAGE_BOUND_S="6", MLQ_HEARTBEAT_INTERVAL_S="1", MLQ_FULL_DISRUPTION_SHARE="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["6.0", "1.0", "1.0"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8069/0", "redis//host"])
def test_a_malformed_redis_url_stops_the_start_naming_it(url):
    line = refused(start(REDIS_URL=url))
    assert "ImproperlyConfigured: REDIS_URL is not a Redis URL" in line
    assert "redis:// or rediss://" in line


@pytest.mark.parametrize("url", ["http://db.internal/mlqueue", "mysql://u:pw@db.internal/mlqueue"])
def test_a_database_url_that_is_not_postgres_stops_the_start_naming_it(url):
    line = refused(start(DATABASE_URL=url))
    assert "ImproperlyConfigured: DATABASE_URL is not a PostgreSQL URL" in line and "pw" not in line


# --- embedded mode and `check --deploy` ------------------------------------------------------
def check_deploy(**env) -> subprocess.CompletedProcess:
    kept = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DJANGO_SETTINGS_MODULE", "MLQ_BASE_URL")}
    kept = {k: v for k, v in kept.items() if k not in ("MLQ_AGENT_JOIN_TOKEN", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    production = {
        "SECRET_KEY": "x7Gq2-production-like-secret-key-with-plenty-of-entropy-0xDEADBEEF",
        "ALLOWED_HOSTS": "mlqueue.example.com",
        "MLQ_SECRET_ENV_KEYS": Fernet.generate_key().decode(),
        "MLQ_BASE_URL": "https://mlqueue.example.com",
    }
    env = {**kept, "DJANGO_SETTINGS_MODULE": "mlqueue.settings", **production, **env}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={k: v for k, v in env.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_embedded_mode_with_debug_off_starts_but_check_deploy_fails(tmp_path):
    embedded = {"DATABASE_URL": None, "REDIS_URL": None, "MLQ_VAR_DIR": str(tmp_path)}
    assert start(**embedded).returncode == 0  # the demo's and the tests' mode still starts
    result = check_deploy(**embedded)
    assert result.returncode != 0
    assert "(mlqueue.E002) DATABASE_URL is not set" in result.stderr, result.stderr
    assert "(mlqueue.E003) REDIS_URL is not set" in result.stderr


def test_only_the_store_left_unset_is_flagged(tmp_path):
    result = check_deploy(REDIS_URL=None, MLQ_VAR_DIR=str(tmp_path))
    assert "mlqueue.E003" in result.stderr and "mlqueue.E002" not in result.stderr


@pytest.mark.parametrize("debug", [False, True])
def test_the_check_names_each_variable_with_debug_off_only(settings, debug):
    settings.DEBUG, settings.DATABASE_URL, settings.REDIS_URL = debug, "", ""
    expected = [
        checks.Error(EMBEDDED_DATABASE, hint=DATABASE_HINT, id="mlqueue.E002"),
        checks.Error(EMBEDDED_REDIS, hint=REDIS_HINT, id="mlqueue.E003"),
    ]
    assert check_embedded_stores() == ([] if debug else expected)
    settings.DEBUG, settings.DATABASE_URL, settings.REDIS_URL = False, "postgres://h/db", "redis://h/0"
    assert check_embedded_stores() == []
