"""SECRET_KEY: with DEBUG off the server refuses to start without one, rather than signing
sessions with a key anyone can read in the source."""

import os
import subprocess
import sys

import pytest

from mlqueue.settings import NO_SECRET_KEY
from tests.e2e.processes import ROOT

START = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"


def start(**env) -> subprocess.CompletedProcess:
    """What every entry point (web, scheduler, manage.py) does first: load the settings."""
    base = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")}
    base.update(DJANGO_SETTINGS_MODULE="mlqueue.settings", **env)
    return subprocess.run([sys.executable, "-c", START], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("debug", ["0", ""])  # off, and unset (off by default)
def test_production_without_a_key_refuses_to_start(debug):
    result = start(DEBUG=debug)
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {NO_SECRET_KEY}" in result.stderr
    assert "secrets.token_urlsafe" in NO_SECRET_KEY and NO_SECRET_KEY.startswith("SECRET_KEY is not set")


def test_an_empty_key_is_no_key():
    result = start(DEBUG="0", SECRET_KEY="")
    assert result.returncode != 0 and NO_SECRET_KEY in result.stderr


def test_production_uses_the_key_it_is_given():
    result = start(DEBUG="0", SECRET_KEY="k" * 60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "k" * 60


def test_development_keeps_its_fallback_key():
    result = start(DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("django-insecure-")


def test_the_processes_the_end_to_end_tests_start_get_the_test_key(settings):
    from tests.e2e.processes import process_env

    env = process_env()
    assert env["DEBUG"] == "0" and env["SECRET_KEY"] == settings.SECRET_KEY
    assert not settings.SECRET_KEY.startswith("django-insecure-")
