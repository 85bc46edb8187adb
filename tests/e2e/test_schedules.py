"""Schedules end to end: a real `celery -A mlqueue beat` and a Celery worker (Redis broker) fire
a `* * * * *` schedule within ~70 s, and "run now" makes a run that a real agent executes. The
leader's own sweep is set an hour apart, so the cron fire is beat's; each fire time has one run."""

import sys
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from scheduling.models import Job, Node, Schedule
from teams.models import ApiToken
from tests.e2e.cluster import Cluster
from tests.e2e.processes import Process, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROBE = "import os; print('scheduled run', os.environ['MLQ_JOB_ID'])"


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path, MLQ_SCHEDULE_SWEEP_S=3600, MLQ_SCHEDULE_BEAT_S=5)
    yield running
    running.stop()


def celery(cluster: Cluster, *args: str) -> Process:
    name = args[0]
    process = Process(
        ["-m", "celery", "-A", "mlqueue", *args, "--loglevel", "INFO"], cluster.tmp / f"{name}.log", **cluster.env
    )
    cluster.procs.append(process)
    return process


def finished_runs(schedule_id: int) -> list[Job]:
    return list(Job.objects.filter(schedule_id=schedule_id, state="SUCCEEDED").order_by("id"))


def one_node_with_celery(cluster: Cluster, tmp_path) -> APIClient:
    """The cluster with one READY H100 node, a Celery worker and beat; an API client as alice."""
    cluster.start(agents=[])
    cluster.add_fleet([{"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}])
    wait_for(lambda: Node.objects.filter(state="READY").exists(), timeout=30, what="a READY node")
    celery(cluster, "worker", "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle")
    celery(cluster, "beat", "--schedule", str(tmp_path / "beat-schedule"))
    api = APIClient()
    _, token = ApiToken.issue(user=get_user_model().objects.get(username="alice"))
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def test_beat_fires_a_every_minute_schedule_and_run_now_runs_on_an_agent(cluster, tmp_path):
    api = one_node_with_celery(cluster, tmp_path)
    spec = {
        "name": "every-minute",
        "team": "research-foundation-models",
        "command": [sys.executable, "-c", PROBE],
        "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
    }
    body = {"cron": "* * * * *", "timezone": "Europe/Berlin", "concurrency": "allow", "spec": spec}
    created = api.post("/api/v1/schedules", body, format="json")
    assert created.status_code == 201, created.json()
    schedule_id = created.json()["id"]
    try:
        first = wait_for(lambda: finished_runs(schedule_id), timeout=75, interval=1, what="a beat-fired run")[0]
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    assert first.scheduled_for.second == 0 and first.scheduled_for.microsecond == 0  # a cron fire time
    assert "fire_due_schedules" in (tmp_path / "worker.log").read_text()

    ran = api.post(f"/api/v1/schedules/{schedule_id}/run")
    assert ran.status_code == 201, ran.json()
    manual = ran.json()["job"]
    wait_for(lambda: Job.objects.filter(pk=manual, state="SUCCEEDED").exists(), timeout=40, what="the run-now run")
    logs = api.get(f"/api/v1/jobs/{manual}/logs").json()
    assert logs["text"] == f"scheduled run {manual}\n"

    times = list(Job.objects.filter(schedule_id=schedule_id).values_list("scheduled_for", flat=True))
    assert len(times) == len(set(times))  # one run per fire time
    schedule = Schedule.objects.get(pk=schedule_id)
    assert schedule.next_run_at > first.scheduled_for
    assert schedule.next_run_at - first.scheduled_for <= timedelta(minutes=2)
