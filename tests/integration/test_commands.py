"""Management commands: seed_demo, create_token; and the production deploy check."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from scheduling.models import Node
from teams.models import ApiToken, AuditEvent, Membership, Quota, Team, hash_token
from teams.services import do_revoke_token

ROOT = Path(__file__).resolve().parents[2]


def snapshot():
    return (
        list(Node.objects.values_list("name", "zone", "rack", "gpu_type", "gpu_count", "state")),
        list(Team.objects.values_list("name", "parent__name")),
        list(Quota.objects.values_list("team__name", "resource_class", "guaranteed", "borrowing_limit")),
        list(Membership.objects.values_list("user__username", "team__name", "role")),
        list(get_user_model().objects.values_list("username", "password", "is_superuser")),
    )


def test_seed_demo_builds_the_design_fleet(demo):
    assert Node.objects.count() == 36
    counts = {t: Node.objects.filter(gpu_type=t).count() for t in ("H100", "A100", "L40S", "")}
    assert counts == {"H100": 16, "A100": 8, "L40S": 4, "": 8}
    assert list(Node.objects.order_by("rack").values_list("rack", flat=True).distinct()) == [
        f"z{z}-r{r}" for z in (1, 2) for r in (1, 2, 3, 4)
    ]
    assert set(Node.objects.values_list("state", flat=True)) == {"NEW"}
    assert Team.objects.get(name="research-vision").parent.name == "research"
    assert Membership.objects.get(user__username="rita").role == "lead"
    assert get_user_model().objects.get(username="ops").is_superuser
    assert get_user_model().objects.get(username="alice").check_password("demo")
    research = Quota.objects.get(team__name="research", resource_class="gpu:H100").guaranteed
    production = Quota.objects.get(team__name="production", resource_class="gpu:H100").guaranteed
    assert (research, production) == (51, 77)  # 40% / 60% of 128


def test_seed_demo_twice_changes_nothing(demo):
    before = snapshot()
    out = io.StringIO()
    call_command("seed_demo", "--force", stdout=out)
    assert out.getvalue().strip() == "seed_demo: already seeded"
    assert snapshot() == before


def test_seed_demo_refuses_demo_passwords_without_debug(db, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="refusing to create demo users"):
        call_command("seed_demo")
    assert not get_user_model().objects.exists()


def test_create_token_prints_a_token_stored_only_hashed(demo):
    out = io.StringIO()
    call_command("create_token", "alice", "--name", "laptop", stdout=out)
    raw = out.getvalue().strip()
    token = ApiToken.objects.get(user__username="alice", name="laptop")
    assert raw.startswith("mlq_") and token.digest == hash_token(raw)
    assert raw not in (token.digest, token.hint) and not ApiToken.objects.filter(digest=raw).exists()


def test_create_token_for_an_unknown_user_is_a_clear_error(db):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("create_token", "nobody")


def test_revoked_token_is_refused(api, demo):
    out = io.StringIO()
    call_command("create_token", "alice", stdout=out)
    client = api(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    assert client.get("/api/v1/jobs").status_code == 200
    # Through the service, as the API, the pages and the admin revoke: the web processes that
    # remember the token forget it (teams/authentication.py).
    do_revoke_token(token=ApiToken.objects.get(), actor=get_user_model().objects.get(username="ops"))
    assert client.get("/api/v1/jobs").status_code == 401


def test_event_log_is_append_only(api):
    from tests.conftest import make_spec

    api("alice").post("/api/v1/jobs", make_spec(), format="json")
    event = AuditEvent.objects.get()
    event.message = "rewritten"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        AuditEvent.objects.update(message="rewritten")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()


def test_check_deploy_is_clean_with_production_settings():
    env = {
        k: v for k, v in os.environ.items() if k not in ("DEBUG", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE")
    }
    # DATABASE_URL and REDIS_URL stay the suite's (tests/settings.py): production-like, and
    # nothing another suite on this machine uses.
    env.update(
        SECRET_KEY="x7Gq2-production-like-secret-key-with-plenty-of-entropy-0xDEADBEEF",
        ALLOWED_HOSTS="mlqueue.example.com",
        DJANGO_SETTINGS_MODULE="mlqueue.settings",
        MLQ_SECRET_ENV_KEYS=Fernet.generate_key().decode(),
        MLQ_BASE_URL="https://mlqueue.example.com",  # notification links (mlqueue.W002)
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_flags_the_development_key():
    """With DEBUG on, the development key is allowed, and `check --deploy` flags it (with DEBUG
    off and no SECRET_KEY the server does not start at all: test_secret_key.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env.update(DJANGO_SETTINGS_MODULE="mlqueue.settings", ALLOWED_HOSTS="mlqueue.example.com", DEBUG="1")
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "security.W009" in result.stderr + result.stdout
