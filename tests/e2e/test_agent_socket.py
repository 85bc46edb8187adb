"""A real agent heartbeats over its WebSocket, falls back to HTTP when the socket drops, and
goes back to the socket when it reopens; a job runs to its end through it all."""

import sys
import urllib.request

import pytest

from scheduling.models import Node
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.proxy import Proxy
from tests.e2e.test_cluster import NODE_A, job_state, submit

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
ON_SOCKET = "heartbeating over the server's WebSocket"
ON_HTTP = "heartbeating over HTTP until it reopens"


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def answered(cluster: Cluster) -> dict[str, float]:
    """The web process's heartbeats answered so far, by transport (its /metrics, from loopback)."""
    with urllib.request.urlopen(f"{cluster.url}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    found = {"http": 0.0, "socket": 0.0}
    for line in lines:
        for transport in found:
            if line.startswith(f'mlqueue_heartbeats_total{{transport="{transport}"}}'):
                found[transport] = float(line.split()[-1])
    return found


def test_the_agent_heartbeats_on_its_socket_and_over_http_while_the_socket_is_down(cluster, api, tmp_path):
    cluster.start(agents=[])
    proxy = Proxy(cluster.port)
    agent = cluster.add_agent(NODE_A, server=f"http://127.0.0.1:{proxy.port}")
    try:
        wait_for(lambda: ON_SOCKET in agent.output(), timeout=30, what="the agent's socket to carry heartbeats")
        wait_for(lambda: Node.objects.filter(name=NODE_A["name"], state="READY").exists(), timeout=20, what="node A")
        # The agent's first heartbeats go over HTTP while its socket opens. Its beats are one at a
        # time, each counted before it is answered: once one went over the socket, every HTTP
        # one before it is counted, and any HTTP one after would be a fallback.
        wait_for(lambda: answered(cluster)["socket"] >= 1, timeout=15, what="a heartbeat on the socket")
        before = answered(cluster)
        wait_for(lambda: answered(cluster)["socket"] >= before["socket"] + 2, timeout=15, what="socket heartbeats")
        assert answered(cluster)["http"] == before["http"]  # none over HTTP while the socket is open

        # Every connection drops, the socket too, and the socket cannot open again for now (the
        # agent tries within 3 s, often before its next beat): its heartbeats go over HTTP.
        proxy.refuse(b"GET /ws/")
        proxy.cut()
        proxy.restore()
        wait_for(lambda: ON_HTTP in agent.output(), timeout=15, what="the agent to notice the socket closed")
        wait_for(lambda: answered(cluster)["http"] > before["http"], timeout=15, what="a heartbeat over HTTP")
        proxy.refuse(None)
        wait_for(lambda: agent.output().count(ON_SOCKET) >= 2, timeout=60, what="the socket to reopen")

        job_id = submit(
            api,
            command=[sys.executable, "-c", "print('done')"],
            resources={"gpu_count": 8, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        )
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=40, what="the job to run")
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n\n{cluster.logs()}") from None
    finally:
        proxy.cut()
