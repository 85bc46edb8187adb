"""Outages with real processes: the web tier down for longer than the old 20 s lease but
shorter than the outage bound kills no task; an agent stopped with SIGSTOP cannot keep its
tasks alive past the bound (their supervisors kill them), and only then are they run elsewhere."""

import signal
import time

import pytest

from scheduling.models import Node
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.test_cluster import NODE_A, NODE_B, assert_never_overlapping, job_state, ledger_job, on_node, read_ledger

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
BOUND, MARGIN = 12, 5


@pytest.fixture
def cluster(tmp_path, demo, request):
    """A cluster whose outage bound is the test's `bound` marker, or BOUND."""
    marker = request.node.get_closest_marker("bound")
    running = Cluster(tmp_path, MLQ_OUTAGE_BOUND_S=marker.args[0] if marker else BOUND, MLQ_LOST_MARGIN_S=MARGIN)
    yield running
    running.stop()


def ready(node: dict) -> bool:
    return Node.objects.filter(name=node["name"], state="READY").exists()


@pytest.mark.bound(20)
def test_a_web_tier_outage_shorter_than_the_bound_kills_no_task(cluster, api, tmp_path):
    cluster.start(agents=[NODE_A])
    wait_for(lambda: ready(NODE_A), timeout=20, what="node A")
    job_id, ledger = ledger_job(api, tmp_path, first_run_s=25)
    wait_for(lambda: job_state(job_id) == "RUNNING" and ledger.exists(), timeout=15, what="the job on A")

    cluster.web.stop()  # no heartbeat answered for ~10 s (past 3 missed beats and the old lease of 6 s)
    time.sleep(8)
    cluster.restart_web()  # (its start takes a second or two more)
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=40, what="the job to finish")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    events = read_ledger(ledger)
    assert set(events) == {"1"} and events["1"][-1][0] == "end"  # one attempt, run to its end
    assert not AuditEvent.objects.filter(job_id=job_id, reason__in=("NODE_LOST", "LEASE_EXPIRED", "RETRY")).exists()
    assert "lease expired" not in cluster.agents[NODE_A["name"]].output()


def test_a_stopped_agents_tasks_die_by_the_bound_and_only_then_run_elsewhere(cluster, api, tmp_path):
    cluster.start(agents=[NODE_A])
    wait_for(lambda: ready(NODE_A), timeout=20, what="node A")
    job_id, ledger = ledger_job(api, tmp_path, first_run_s=120)
    wait_for(lambda: job_state(job_id) == "RUNNING" and ledger.exists(), timeout=15, what="the job on A")
    cluster.add_agent(NODE_B)
    wait_for(lambda: ready(NODE_B), timeout=20, what="node B")

    stopped_at = time.time()
    cluster.agents[NODE_A["name"]].signal(signal.SIGSTOP)  # it can neither renew nor kill anything
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=BOUND + MARGIN + 30, what="the job on B")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    finally:
        cluster.agents[NODE_A["name"]].signal(signal.SIGCONT)
    events = read_ledger(ledger)
    assert on_node(job_id) == NODE_B["name"]
    # Its supervisor sent SIGTERM at the deadline (the job checkpoints and exits at once):
    assert max(t for _, t in events["1"]) < stopped_at + BOUND + 1
    requeued = AuditEvent.objects.get(job_id=job_id, kind="RETRY").created_at.timestamp()
    assert requeued > stopped_at + BOUND + MARGIN - 1  # and the leader waited for the bound and the margin
    assert_never_overlapping(events)
    wait_for(lambda: ready(NODE_A), timeout=20, what="node A back after SIGCONT")
