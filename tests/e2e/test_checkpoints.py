"""Confirmed checkpoints on real agents: a job confirms one through mlqueue.checkpoint (the copy
the agent puts on its PYTHONPATH), a P0 job preempts it, and the preempted attempt's record
measures the lost work from that checkpoint."""

import json
import sys
from datetime import datetime

import pytest

from scheduling.models import Job, Node, Task
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
# Confirms step 7 once, then trains on; on SIGTERM it exits at once, confirming nothing more.
# `-S`: no site-packages, so `mlqueue` can only come from the agent's helper directory.
TRAINER = (
    "import signal, sys, time\n"
    "from mlqueue import checkpoint\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(1)\n"
    "checkpoint.done(step=7)\n"
    "print('confirmed', checkpoint.__file__, flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path, MLQ_PREEMPT_MIN_RUNTIME_S=0)
    yield running
    running.stop()


def submit(api, user: str, **spec) -> int:
    body = {
        "team": "research-foundation-models",
        "name": "e2e-checkpoint",
        "grace_period_seconds": 5,
        "resources": {"gpu_count": 8, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        **spec,
    }
    response = api(user).post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_a_preempted_attempt_loses_only_the_work_since_its_confirmed_checkpoint(cluster, api, tmp_path):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(name=NODE["name"], state="READY").exists(), timeout=20, what="the node")
    folder = tmp_path / "ckpt"
    victim = submit(
        api,
        "alice",
        priority="P2",
        command=[sys.executable, "-S", "-c", TRAINER],
        checkpoint={"path": str(folder), "interval_minutes": 1},
    )
    try:
        # The task's row is written first, the job's timeline event just after it.
        wait_for(
            lambda: (
                Task.objects.filter(job_id=victim, last_checkpoint_at__isnull=False).exists()
                and AuditEvent.objects.filter(job_id=victim, kind="CHECKPOINT").exists()
            ),
            timeout=30,
            what="the checkpoint to be confirmed",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    confirmed = json.loads((folder / ".mlq-checkpoint").read_text())
    task = Task.objects.get(job_id=victim)
    assert task.checkpoint_step == 7 == confirmed["step"]
    assert abs(task.last_checkpoint_at.timestamp() - confirmed["time"]) < 0.01
    assert AuditEvent.objects.filter(job_id=victim, kind="CHECKPOINT").count() == 1

    wait_for(lambda: Job.objects.get(pk=victim).state == "RUNNING", timeout=10, what="the victim running")
    submit(api, "rita", priority="P0", command=[sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_for(
            lambda: AuditEvent.objects.filter(job_id=victim, to_state="PENDING", reason="PREEMPTED").exists(),
            timeout=40,
            what="the preempted attempt to be settled",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    ended = AuditEvent.objects.get(job_id=victim, to_state="PENDING", reason="PREEMPTED")
    stopped = AuditEvent.objects.get(job_id=victim, from_state="RUNNING", to_state="PREEMPTED").created_at
    lost_since = datetime.fromisoformat(ended.data["lost_since"])
    assert ended.data["since_checkpoint"] is True
    assert abs(lost_since.timestamp() - confirmed["time"]) < 1.0
    assert lost_since < stopped
    expected = 8 * (stopped - lost_since).total_seconds() / 3600
    assert ended.data["lost_gpu_hours"] == pytest.approx(expected, abs=1e-3)
    assert ended.data["lost_gpu_hours"] < 8 * (stopped - task.started_at).total_seconds() / 3600
    assert Task.objects.get(job_id=victim).last_checkpoint_at is None  # the next attempt starts with none
    log = api("alice").get(f"/api/v1/jobs/{victim}/logs?rank=0").json()["text"]
    assert "confirmed" in log and "/python/mlqueue/checkpoint.py" in log
