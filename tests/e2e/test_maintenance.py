"""A maintenance window keeps a long job off the rack and drains it on time, on real agents:
with rack z1-r1 due for maintenance in seconds, a job whose time limit would run into the
window waits (the reason names the window) and then starts on the other rack, although there
is room on z1-r1; a job short enough still runs there. At the window's start the job already
running on z1-r1 gets SIGTERM (its grace, then a requeue as a new attempt that finishes
elsewhere), the rack shows the window's reason, and at its end the rack is uncordoned."""

import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Job, MaintenanceWindow, Node, Task
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.test_preemption import VICTIM, ledger_of
from tests.nodes import cordon, uncordon

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ON_RACK = "z1-r1-h100-01"  # the rack with the window
ELSEWHERE = "z2-r1-h100-01"
NODES = [
    {"name": ON_RACK, "zone": "z1", "rack": "z1-r1"},
    {"name": ELSEWHERE, "zone": "z2", "rack": "z2-r1"},
]
AHEAD_S = 12  # the window starts this long after it is scheduled
LENGTH_S = 8
GRACE_S = 3


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def submit(api, *, gpus: int, hours: float, command: list[str], **spec) -> int:
    body = {
        "team": "research-vision",
        "name": "e2e-maintenance",
        "command": command,
        "max_runtime_hours": hours,
        "grace_period_seconds": GRACE_S,
        "resources": {"gpu_count": gpus, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        **spec,
    }
    response = api("victor").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def node_of(job_id: int) -> str | None:
    task = Task.objects.filter(job_id=job_id).select_related("node").order_by("-attempt").first()
    return task.node.name if task and task.node else None


def test_a_window_keeps_a_long_job_off_the_rack_and_drains_it_on_time(cluster, api, tmp_path):
    cluster.start(agents=NODES)
    wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")
    cordon(ELSEWHERE, reason="kept for later")
    ledger = tmp_path / "runner.txt"
    runner = submit(
        api,
        gpus=4,
        hours=1,
        command=[sys.executable, "-c", VICTIM],
        checkpoint={"path": str(tmp_path / "ckpt")},
        env={"LEDGER": str(ledger)},
    )
    try:
        wait_for(lambda: ledger_of(ledger), timeout=30, what="the runner to start on z1-r1")
        assert node_of(runner) == ON_RACK

        starts_at = timezone.now() + timedelta(seconds=AHEAD_S)
        body = {"rack": "z1-r1", "starts_at": starts_at.isoformat(), "duration_hours": LENGTH_S / 3600, "reason": "PDU"}
        response = api("ops").post("/api/v1/maintenance", body, format="json")
        assert response.status_code == 201, response.json()
        window = MaintenanceWindow.objects.get(pk=response.json()["id"])

        long = submit(api, gpus=4, hours=1, command=[sys.executable, "-c", "import time; time.sleep(1)"])
        short = submit(api, gpus=2, hours=0.001, command=[sys.executable, "-c", "print('short')"])
        wait_for(lambda: Job.objects.get(pk=short).state == "SUCCEEDED", timeout=20, what="the short job to run")
        assert node_of(short) == ON_RACK  # 3.6 s of time limit ends before the window
        # Once the short job has gone, z1-r1 has room for the long one, but not past the window.
        wait_for(lambda: Job.objects.get(pk=long).pending_reason_code == "MAINTENANCE", timeout=10, what="the reason")
        reason = Job.objects.get(pk=long).pending_reason_message
        assert reason.startswith("rack z1-r1 drains at ") and f"(maintenance #{window.pk})" in reason
        assert reason.endswith("this job's 1 h time limit would run into it")

        uncordon(ELSEWHERE)
        wait_for(lambda: node_of(long) is not None, timeout=15, what="the long job to start")
        assert node_of(long) == ELSEWHERE  # z1-r1 had 4 GPUs free, but not past the window

        wait_for(
            lambda: any(what == "term" for _, _, what, _ in ledger_of(ledger)), timeout=AHEAD_S + 15, what="SIGTERM"
        )
        term_at = next(when for _, _, what, when in ledger_of(ledger) if what == "term")
        late_s = term_at - starts_at.timestamp()
        assert 0 <= late_s < 5, late_s  # on time: within a few scheduler ticks of the start
        node = Node.objects.get(name=ON_RACK)
        assert (node.state, node.state_reason) == ("DRAINING", window.drain_reason)

        wait_for(lambda: Job.objects.get(pk=runner).state == "SUCCEEDED", timeout=30, what="the requeued runner")
        assert node_of(runner) == ELSEWHERE  # a new attempt, on the other rack
        assert [(a, what) for a, _, what, _ in ledger_of(ledger) if a != "1"] == [("2", "start"), ("2", "end")]
        assert Job.objects.get(pk=runner).restarts_used == 0  # a drain spends no restart

        wait_for(lambda: Node.objects.get(name=ON_RACK).state == "READY", timeout=LENGTH_S + 15, what="uncordon")
        window.refresh_from_db()
        assert window.state == "DONE"
        assert ON_RACK in window.drained
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{cluster.logs()}") from None
