"""Shared fixtures: the demo cluster, API clients per user, a frozen clock, fresh failure-detection
clocks for each test, and a job spec builder (node states: tests/nodes.py)."""

import copy
import time
from datetime import UTC, datetime

import hypothesis
import pytest
import time_machine
from channels.layers import channel_layers
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.management import call_command
from rest_framework.test import APIClient

from agents import heartbeats
from mlqueue.redis_client import redis_client
from scheduling import liveness
from scheduling.leader import failures
from teams.models import ApiToken

# Property tests judge answers, not speed: on the shared 2-core machine (three xdist workers and
# end-to-end tests' processes beside them) drawing an example can take seconds, which
# Hypothesis's deadline and "too slow" health check would fail (test_early_stop did, twice).
# Loaded before the test modules, so their own settings(...) inherit it.
hypothesis.settings.register_profile("mlqueue", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("mlqueue")

SEED_SPEC = {
    "client_job_id": "llama-70b-run-47",
    "name": "llama-70b-pretrain-run-47",
    "team": "research-foundation-models",
    "image": "registry.example.com/training/llama-70b:2026-04-19",
    "command": ["python", "-m", "train", "--config", "llama-70b.yaml"],
    "resources": {
        "gpu_count": 64,
        "gpu_type": "H100",
        "cpu_per_rank": 16,
        "memory_per_rank_gb": 256,
        "scratch_disk_gb": 2000,
    },
    "topology_hint": "prefer_same_rack",
    "node_selector": {},
    "priority": "P1",
    "max_runtime_hours": 168,
    "grace_period_seconds": 120,
    "checkpoint": {"path": "s3://ckpt/llama-70b/run-47", "interval_minutes": 30, "retain_last_n": 3},
    "restart_policy": {
        "on_preemption": "resume_from_checkpoint",
        "on_node_failure": "resume_from_checkpoint",
        "max_restarts": 20,
        "max_retries": 2,
    },
    "depends_on": [],
    "env": {"WANDB_PROJECT": "llama-70b"},
}


FROZEN_AT = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)


def make_spec(**overrides) -> dict:
    """The seed spec (the README's 64-GPU job, every field set) with top-level fields replaced;
    `resources` merges."""
    spec = copy.deepcopy(SEED_SPEC)
    resources = overrides.pop("resources", None)
    spec.update(overrides)
    if resources is not None:
        spec["resources"] = {**spec["resources"], **resources}
    return spec


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The end-to-end tests that use no test database first: the chaos campaign and the
    benchmarks, the longest tests of the suite, which start whole stacks of their own. Under
    pytest-xdist they then run beside the rest instead of trailing it. pytest-django has put
    them last (its order: tests in a transaction, then transactional ones, then those without a
    database); moving them leaves its order of the others as it was."""
    items.sort(key=lambda item: not (item.get_closest_marker("e2e") and not uses_database(item)))


def uses_database(item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return item.get_closest_marker("django_db") is not None or bool(fixtures & {"db", "transactional_db"})


@pytest.fixture
def clock():
    """The clock frozen at FROZEN_AT, for tests in which time passes for code that reads the
    clock itself: clock.shift(timedelta(hours=1)) is an hour later. Ask for it before the
    fixtures whose rows should be written at that time."""
    with time_machine.travel(FROZEN_AT, tick=False) as traveller:
        yield traveller


@pytest.fixture
def demo(db):
    call_command("seed_demo", "--force", stdout=open("/dev/null", "w"))


@pytest.fixture
def logged_in(client, demo):
    """logged_in("rita") -> the test client, logged in as rita (the demo's password)."""

    def log_in(username: str):
        assert client.login(username=username, password="demo")
        return client

    return log_in


@pytest.fixture(autouse=True)
def fresh_liveness(monkeypatch):
    """Every node as never heard from, by a Redis the leader has already read: liveness's own
    Redis keys (the heartbeat set emptied, its sentinel set), the cache (where heartbeats go
    without Redis) cleared, and this process's unflushed heartbeats dropped. For every test:
    an earlier test on this worker may have heartbeat a node at a time it made up (a
    fall_silent() for LOST heartbeats the others minutes ahead), and that node would then
    look alive to a later test's failure detector for those minutes."""
    if settings.REDIS_URL:
        client = redis_client()
        client.pipeline(transaction=False).delete(liveness.ZSET).set(liveness.SENTINEL, time.time()).execute()
        client.close()
    cache.clear()
    monkeypatch.setattr(liveness, "_pending", liveness.Pending())


@pytest.fixture(autouse=True)
def fresh_channel_layers(monkeypatch):
    """Channel layers made anew for each test. Each test's async_to_sync runs its own event
    loop, and the Redis layer keeps a lock per process-wide channel prefix: one left locked by
    an earlier test's consumer, cancelled as its loop ended, belonged to that loop, and the next
    test's consumer on this worker failed at disconnect ("bound to a different event loop").
    A server's layer lives in one loop for its life."""
    monkeypatch.setattr(channel_layers, "backends", {})


@pytest.fixture(autouse=True)
def fresh_failure_detection(monkeypatch):
    """The failure detector's clocks as in a process that has just taken the lead: none of
    another test's looks (perhaps at a time that test made up) bears on this test's nodes."""
    monkeypatch.setattr(failures, "CLOCKS", failures.Clocks())


@pytest.fixture(autouse=True)
def fresh_epoch_cache(monkeypatch):
    """The agent API's lease epoch (cached for a second, agents/heartbeats.py) as in a process
    that has not read it yet: another test's epoch, read less than a second ago, is not this
    test's (test_a_socket_heartbeat_gets_the_reply_an_http_heartbeat_gets read epoch 2 for 4)."""
    monkeypatch.setattr(heartbeats, "_epoch", (float("-inf"), 0))


@pytest.fixture
def user(demo):
    return lambda username: get_user_model().objects.get(username=username)


@pytest.fixture
def api(demo):
    """api("alice") -> an APIClient sending alice's bearer token; api(None) is anonymous."""

    def client_for(username: str | None) -> APIClient:
        client = APIClient()
        if username is not None:
            _, raw = ApiToken.issue(user=get_user_model().objects.get(username=username))
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return client_for
