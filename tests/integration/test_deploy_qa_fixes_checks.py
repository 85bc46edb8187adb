"""mlqueue's own `check --deploy` warnings (mlqueue/checks.py) and the README's promise: with the
settings it lists, `check --deploy` is clean."""

import os
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.core import checks

from mlqueue.checks import (
    BASE_URL_HINT,
    BASE_URL_LOOPBACK,
    JOIN_TOKEN_HINT,
    MIN_JOIN_TOKEN_LENGTH,
    SHORT_JOIN_TOKEN,
    check_base_url,
    check_join_token_length,
)
from tests.e2e.processes import ROOT

# What README's "Configuration" says to set for a clean `check --deploy`.
README_SET = {
    "SECRET_KEY": "x7Gq2-production-like-secret-key-with-plenty-of-entropy-0xDEADBEEF",
    "ALLOWED_HOSTS": "mlqueue.example.com",
    "MLQ_SECRET_ENV_KEYS": Fernet.generate_key().decode(),
    "MLQ_BASE_URL": "https://mlqueue.example.com",
}


def check_deploy(**env) -> subprocess.CompletedProcess:
    kept = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "DJANGO_SETTINGS_MODULE", "MLQ_BASE_URL")}
    kept = {k: v for k, v in kept.items() if k not in ("MLQ_AGENT_JOIN_TOKEN", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**kept, "DJANGO_SETTINGS_MODULE": "mlqueue.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_settings_the_readme_lists_make_check_deploy_clean():
    result = check_deploy(**README_SET)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_default_base_url_and_a_short_join_token_are_flagged():
    settings_left = {k: v for k, v in README_SET.items() if k != "MLQ_BASE_URL"}
    result = check_deploy(**settings_left, MLQ_AGENT_JOIN_TOKEN="s3cret")
    assert result.returncode != 0
    assert "(mlqueue.W002)" in result.stderr and "(mlqueue.W003)" in result.stderr, result.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"])
def test_a_loopback_base_url_warns_with_debug_off(settings, url):
    settings.DEBUG, settings.MLQ_BASE_URL = False, url
    (warning,) = check_base_url()
    assert (warning.id, warning.msg, warning.hint) == ("mlqueue.W002", BASE_URL_LOOPBACK.format(url=url), BASE_URL_HINT)
    settings.DEBUG = True
    assert check_base_url() == []


def test_a_real_base_url_does_not_warn(settings):
    settings.DEBUG, settings.MLQ_BASE_URL = False, "https://mlqueue.example.com"
    assert check_base_url() == []


def test_a_short_bootstrap_join_token_warns_with_debug_off(settings):
    settings.DEBUG, settings.MLQ_AGENT_JOIN_TOKEN = False, "x" * (MIN_JOIN_TOKEN_LENGTH - 1)
    (warning,) = check_join_token_length()
    assert (warning.id, warning.hint) == ("mlqueue.W003", JOIN_TOKEN_HINT)
    assert warning.msg == SHORT_JOIN_TOKEN.format(length=31)
    settings.MLQ_AGENT_JOIN_TOKEN = "x" * MIN_JOIN_TOKEN_LENGTH
    assert check_join_token_length() == []
    settings.MLQ_AGENT_JOIN_TOKEN = ""
    assert check_join_token_length() == []
    settings.DEBUG, settings.MLQ_AGENT_JOIN_TOKEN = True, "demo"
    assert check_join_token_length() == []


def test_the_checks_are_registered_for_deploy_only(settings):
    settings.DEBUG, settings.MLQ_BASE_URL, settings.MLQ_AGENT_JOIN_TOKEN = False, "http://127.0.0.1:8000", "short"
    deploy = {message.id for message in checks.run_checks(include_deployment_checks=True)}
    assert {"mlqueue.W002", "mlqueue.W003"} <= deploy
    assert not {"mlqueue.W002", "mlqueue.W003"} & {message.id for message in checks.run_checks()}
