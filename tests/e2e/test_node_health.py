"""A GPU fault on a real agent (issue 19's Must show): fake GPUs report an XID 79 on the node
running a job; the server cordons that node with the fault as its reason (and audits it), the
job gets SIGTERM, exits, and comes back as a new attempt on the other node, where it finishes,
without spending a restart or a retry."""

import json
import sys

import pytest

from scheduling.models import Job, Node, Task
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODES = [
    {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"},
    {"name": "z1-r1-h100-02", "zone": "z1", "rack": "z1-r1"},
]
# Notes `ATTEMPT what` in $LEDGER; the first attempt runs until SIGTERM, the second ends at once.
JOB = """
import os, signal, sys, time
def note(what):
    with open(os.environ["LEDGER"], "a") as f:
        f.write(f"{os.environ['MLQ_ATTEMPT']} {what}\\n")
def stop(*_):
    note("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
note("start")
time.sleep(600 if os.environ["MLQ_ATTEMPT"] == "1" else 0)
note("end")
"""


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def test_an_xid_cordons_its_node_and_the_job_finishes_elsewhere(cluster, api, tmp_path):
    faults, ledger = tmp_path / "gpu-faults.json", tmp_path / "ledger.txt"
    cluster.start(agents=[])
    cluster.add_fleet(NODES, env={"MLQ_FAKE_GPU_FAULTS": str(faults)})
    spec = {
        "team": "research-vision",
        "name": "e2e-xid",
        "command": [sys.executable, "-c", JOB],
        "grace_period_seconds": 10,
        "env": {"LEDGER": str(ledger)},
        "resources": {"gpu_count": 8, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
    }
    try:
        wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")
        job_id = api("victor").post("/api/v1/jobs", spec, format="json").json()["id"]
        wait_for(lambda: ledger.exists() and "1 start" in ledger.read_text(), timeout=30, what="the job running")
        sick = Task.objects.get(job_id=job_id).node.name
        faults.write_text(json.dumps({sick: {"3": {"xid": [79]}}}))
        wait_for(lambda: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=45, what="the job to finish")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    node = Node.objects.get(name=sick)
    assert (node.state, node.admin_reason) == ("CORDONED", "XID 79 (GPU has fallen off the bus) on GPU 3")
    assert list(AuditEvent.objects.filter(node=node, actor_name="health").values_list("reason", "message")) == [
        ("CORDONED", "cordoned automatically: XID 79 (GPU has fallen off the bus) on GPU 3")
    ]
    # SIGTERM first (it noted it and exited by itself), then a new attempt on the healthy node.
    assert ledger.read_text().split("\n")[:2] == ["1 start", "1 term"]
    assert ledger.read_text().splitlines()[-2:] == ["2 start", "2 end"]
    healthy = next(n["name"] for n in NODES if n["name"] != sick)
    assert Task.objects.get(job_id=job_id).last_node.name == healthy
    job = Job.objects.get(pk=job_id)
    assert (job.preemptions, job.restarts_used, job.retries_used) == (1, 0, 0)
