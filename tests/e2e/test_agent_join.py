"""A real agent joins with a join token from its environment (not its command line), keeps its
node token in a 0600 file in its workdir, and comes back after a restart with no join token at
all; meanwhile the join token cannot take its node over (the admin's reset is in
tests/integration/test_agent_security.py)."""

import signal
import stat
from pathlib import Path

import pytest

from agents.node.client import AgentClient, ApiError
from scheduling.models import Node
from teams.models import AuditEvent, hash_token
from tests.e2e.cluster import JOIN_TOKEN, Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path).start(agents=[])
    yield running
    running.stop()


def ready() -> bool:
    return Node.objects.filter(name=NODE["name"], state="READY").exists()


def test_an_agent_restarts_on_its_workdir_without_a_join_token(cluster, tmp_path):
    first = cluster.add_agent(NODE)
    wait_for(ready, timeout=20, what="the node")
    token_file = Path(tmp_path / "agents" / NODE["name"] / "node-token")
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert Node.objects.get(name=NODE["name"]).token_digest == hash_token(token_file.read_text())
    assert JOIN_TOKEN not in Path(f"/proc/{first.pid}/cmdline").read_bytes().decode()

    with pytest.raises(ApiError) as hijack:
        AgentClient(cluster.url).post(
            "agents/register",
            {"name": NODE["name"], "zone": "z1", "rack": "z1-r1", "cpu_count": 1024, "memory_gb": 1},
            token=JOIN_TOKEN,
        )
    assert hijack.value.status == 409

    first.signal(signal.SIGKILL)
    wait_for(
        lambda: Node.objects.filter(name=NODE["name"], health__in=("SUSPECT", "LOST")).exists(),
        timeout=20,
        what="the leader to find the node silent",
    )
    cluster.add_agent(NODE, env={"MLQ_AGENT_JOIN_TOKEN": ""})
    try:
        wait_for(ready, timeout=20, what="the node back with its own token")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    registered = AuditEvent.objects.filter(node__name=NODE["name"], reason="REGISTERED").order_by("id")
    assert [e.data["via"] for e in registered] == ["the MLQ_AGENT_JOIN_TOKEN setting", "node token"]
