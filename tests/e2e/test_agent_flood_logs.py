"""The QA repro with real processes: on one node, a bystander's job and a job writing 30 MB of
output. The node's heartbeats go on (1 s here; SUSPECT after 3 s without one), so it is never
SUSPECT or LOST, the bystander runs on undisturbed, the noisy job runs once and succeeds, its
stored log stops at MLQ_MAX_LOG_CHARS, and a cancel of the bystander takes effect at once."""

import sys
import time

import httpx
import pytest

from scheduling.models import Job, Node, Task, TaskLog
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
CAP = 2_000_000
TEAM = "research-foundation-models"


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path, MLQ_MAX_LOG_CHARS=CAP)
    yield running
    running.stop()


def submit(web, name: str, command: list[str]) -> int:
    spec = {"team": TEAM, "name": name, "command": command, "resources": {"gpu_count": 4, "gpu_type": "H100"}}
    response = web.post("/api/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def state(job_id: int) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job_id)


def test_a_job_writing_30_mb_leaves_its_nodes_heartbeats_and_its_neighbour_alone(cluster, api):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(state="READY").count() == 1, timeout=20, what="a READY node")
    token = api("alice")._credentials["HTTP_AUTHORIZATION"]
    web = httpx.Client(base_url=cluster.url, headers={"Authorization": token}, timeout=10)
    bystander = submit(web, "bystander", [sys.executable, "-c", "import time; time.sleep(600)"])
    wait_for(lambda: state(bystander) == "RUNNING", timeout=30, what="the bystander running")
    noisy = submit(web, "noisy", ["sh", "-c", f"yes {'a' * 100} | head -c 30000000"])
    try:
        wait_for(lambda: state(noisy) == "SUCCEEDED", timeout=60, what="the noisy job to succeed")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    time.sleep(4)  # past SUSPECT's 3 s: a heartbeat held up by the shipping would show now

    assert not AuditEvent.objects.filter(node__name=NODE["name"], reason__in=("SUSPECT", "LOST")).exists()
    assert Task.objects.get(job_id=noisy).attempt == 1  # ran once: its exit 0 was not lost
    assert (state(bystander), Task.objects.get(job_id=bystander).attempt) == ("RUNNING", 1)
    stored = sum(len(t) for t in TaskLog.objects.filter(job_id=noisy, stream="stdout").values_list("text", flat=True))
    assert stored == CAP
    assert AuditEvent.objects.filter(job_id=noisy, reason="LOG_CAPPED").count() == 1

    cancelled_at = time.monotonic()
    assert web.post(f"/api/v1/jobs/{bystander}/cancel", json={}).status_code == 200
    wait_for(lambda: state(bystander) == "CANCELLED", timeout=15, what="the cancel")
    assert time.monotonic() - cancelled_at < 10
    web.close()
