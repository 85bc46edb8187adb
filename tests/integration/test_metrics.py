"""/metrics: counters from the scheduler's passes, gauges read from the store, and counters
summed across processes (prometheus_client's multiprocess mode)."""

import os
import subprocess
import sys
import time

import httpx
import pytest
from django.utils import timezone

from scheduling.leader.worker import run_pass
from scheduling.models import Node, SchedulerLease
from scheduling.stopping import escalate_overdue
from scheduling.tasks import enforce_grace_deadline
from tests.conftest import make_spec
from tests.e2e.cluster import free_port
from tests.e2e.processes import ROOT, process_env
from tests.nodes import cordon, heartbeat


def metric_lines(client) -> list[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode().splitlines()


def test_metrics_show_the_pass_and_the_cluster(api, demo, client):
    SchedulerLease.objects.filter(pk=1).update(epoch=3)
    heartbeat()
    cordon(Node.objects.filter(gpu_type="L40S"))
    api("alice").post("/api/v1/jobs", make_spec(), format="json")
    api("alice").post(
        "/api/v1/jobs", make_spec(client_job_id="l40s", resources={"gpu_type": "L40S", "gpu_count": 8}), format="json"
    )
    run_pass(epoch=3)

    lines = metric_lines(client)
    assert 'mlqueue_gpus{resource_class="gpu:H100",state="used"} 64.0' in lines
    assert 'mlqueue_gpus{resource_class="gpu:H100",state="free"} 64.0' in lines
    assert "mlqueue_leader_epoch 3.0" in lines
    assert any(line.startswith('mlqueue_pending_jobs{reason="NO_MATCHING_NODES"} 1.0') for line in lines)
    assert any(line.startswith('mlqueue_placements_total{resource_class="gpu:H100"}') for line in lines)
    assert any(line.startswith("mlqueue_scheduler_pass_seconds_count") for line in lines)
    assert any(
        line.startswith('mlqueue_queue_wait_seconds_count{priority="P1",team="research-foundation-models"}')
        for line in lines
    )
    assert 'mlqueue_fragmentation_ratio{resource_class="gpu:H100"} 0.0' in lines
    assert not any(line.startswith("mlqueue_forecast_age_seconds") for line in lines)  # none yet

    SchedulerLease.objects.filter(pk=1).update(forecast_at=timezone.now(), forecast_ms=1500.0)
    lines = metric_lines(client)
    assert "mlqueue_forecast_milliseconds 1500.0" in lines
    age = next(line for line in lines if line.startswith("mlqueue_forecast_age_seconds "))
    assert 0 <= float(age.split()[1]) < 60


@pytest.mark.django_db(transaction=True)
def test_counters_from_the_scheduler_process_reach_the_web_process(api, demo, client, tmp_path, monkeypatch):
    heartbeat()
    for i in range(3):
        api("alice").post("/api/v1/jobs", make_spec(client_job_id=f"j{i}", resources={"gpu_count": 8}), format="json")
    # Not made beforehand: a directory on a tmpfs is gone after a reboot, and the process makes it.
    metrics_dir = tmp_path / "metrics"
    env = process_env(PROMETHEUS_MULTIPROC_DIR=metrics_dir)
    result = subprocess.run(
        [sys.executable, "manage.py", "run_scheduler", "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "3 placed" in result.stdout

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    lines = metric_lines(client)
    assert 'mlqueue_placements_total{resource_class="gpu:H100"} 3.0' in lines
    assert "mlqueue_scheduler_pass_seconds_count 1.0" in lines
    assert os.listdir(metrics_dir)


@pytest.mark.django_db(transaction=True)
def test_a_scheduler_in_a_container_of_its_own_serves_its_counters_itself(api, demo):
    """No PROMETHEUS_MULTIPROC_DIR shared with a web process (compose, Kubernetes): the scheduler's
    pass times, placements and queue waits reach Prometheus only through --metrics-port."""
    heartbeat()
    api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json")
    port = free_port()
    env = process_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    command = [sys.executable, "manage.py", "run_scheduler", "--metrics-port", str(port)]
    scheduler = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        text = ""
        while "mlqueue_placements_total{" not in text and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.HTTPError:
                continue
        lines = text.splitlines()
        assert 'mlqueue_placements_total{resource_class="gpu:H100"} 1.0' in lines
        assert any(line.startswith("mlqueue_queue_wait_seconds_count{") for line in lines)
        assert any(line.startswith("mlqueue_scheduler_pass_seconds_count ") for line in lines)
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)


def test_the_metrics_port_is_checked():
    result = subprocess.run(
        [sys.executable, "manage.py", "run_scheduler", "--once", "--metrics-port", "70000"],
        cwd=ROOT,
        env=process_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "--metrics-port must be a port number, 1 to 65535" in result.stderr


def test_grace_task_is_idempotent(api, demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=1)
    from scheduling.models import Task

    Task.objects.filter(job_id=job_id).update(stop_reason="CANCELLED", stop_signal="TERM", kill_at=timezone.now())
    assert enforce_grace_deadline(job_id) == 1
    assert enforce_grace_deadline(job_id) == 0
    assert escalate_overdue() == 0
    assert Task.objects.get(job_id=job_id).stop_signal == "KILL"
