"""`entrypoint.sh wait-for-migrations` tells a database it cannot reach from one with migrations
left to apply (mlqueue/migrations_ready.py). It said "migrations still unapplied after 3 s" for a
database that does not exist, and the real reason was in a connection pool's warning that the
last lines it showed had cut off."""

import os
import subprocess
import sys
from urllib.parse import urlsplit

import psycopg
import pytest

from mlqueue import migrations_ready
from tests.e2e.processes import ROOT, database_url, scratch_database_url

ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"


def env_for(url: str, **extra) -> dict:
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "DATABASE_URL": url,
        "SECRET_KEY": "qa-fixes-secret-key-4c1d9e7f2a6b8d0c3e5f7a9b1d3f5a7c",
        **extra,
    }


def missing_database_url() -> str:
    return scratch_database_url("qa_no_such_database")


def ready(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlqueue.migrations_ready"],
        cwd=ROOT,
        env=env_for(url),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def empty_database():
    url = scratch_database_url("qa_unmigrated")
    name = urlsplit(url).path.lstrip("/")
    admin = urlsplit(url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_wait_for_migrations_says_it_cannot_connect_and_why():
    url = missing_database_url()
    name = urlsplit(url).path.lstrip("/")
    result = subprocess.run(
        [str(ENTRYPOINT), "wait-for-migrations"],
        env=env_for(url, MLQ_MIGRATIONS_TIMEOUT_S="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "entrypoint.sh: cannot connect to the database after 1 s" in result.stderr, result.stderr
    assert f'database "{name}" does not exist' in result.stderr
    assert "unapplied" not in result.stderr


def test_a_database_that_cannot_be_reached_is_status_2_with_its_reason():
    result = ready(missing_database_url())
    assert result.returncode == migrations_ready.UNREACHABLE
    assert result.stderr.startswith("cannot connect to the database: ") and "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unapplied_migrations_are_status_1_and_named(empty_database):
    result = ready(empty_database)
    assert result.returncode == migrations_ready.UNAPPLIED, result.stderr
    assert "migration(s) not applied yet: contenttypes.0001_initial" in result.stderr


def test_the_migrated_database_is_ready(db):
    result = ready(database_url())
    assert (result.returncode, result.stdout.strip()) == (migrations_ready.READY, migrations_ready.NOTHING_TO_APPLY)


def test_bad_settings_are_status_3_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "mlqueue.migrations_ready"],
        cwd=ROOT,
        env=env_for(missing_database_url(), DEBUG="maybe"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == migrations_ready.BROKEN
    assert (
        result.stderr.strip()
        == "cannot check the migrations: ImproperlyConfigured: DEBUG='maybe' is not a boolean (use 1/0, true/false)"
    )
