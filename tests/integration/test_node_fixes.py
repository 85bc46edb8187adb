"""Node fixes: exclusions of GPUs a node no longer has, an admin's reason kept through a
SUSPECT blip, a CPU node's health check shown and exported, join token limits, the message
for a reset node token, a cordoned node's idle GPUs."""

import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from agents import services
from agents.console import _cell
from agents.management.commands.create_join_token import MAX_USES
from agents.models import JoinToken
from mlqueue.breaker import RedisBreaker
from scheduling import node_health
from scheduling.models import Node
from scheduling.nodes import do_cordon, do_drain, do_health_cordon, do_mark_health, note_alive
from teams.models import AuditEvent
from tests.integration.test_agent_api import INVENTORY, agent, agent_settings, beat  # noqa: F401 (a fixture)

NAME = "qa-b1"


@pytest.fixture
def ready(db) -> Node:
    beat(agent(NAME), NAME)
    return Node.objects.get(name=NAME)


def reregister(client: APIClient, **inventory) -> None:
    body = {"name": NAME, **INVENTORY, **inventory}
    response = client.post("/api/v1/agents/register", body, format="json")
    assert response.status_code == 201, response.json()


def test_exclusions_of_gpus_the_node_no_longer_has_go(db):
    client = agent(NAME)
    Node.objects.filter(name=NAME).update(excluded_gpus={"1": "xid 79", "5": "xid 48"})
    reregister(client, gpu_count=4)
    assert Node.objects.get(name=NAME).excluded_gpus == {"1": "xid 79"}
    event = AuditEvent.objects.filter(node__name=NAME, reason="GPU_INCLUDED").get()
    assert event.message == "GPU 5 no longer excluded: the node now reports 4 GPUs"
    assert event.data == {"gpus": [5]}
    reregister(client, gpu_count=4)  # nothing more to drop: no second event
    assert AuditEvent.objects.filter(node__name=NAME, reason="GPU_INCLUDED").count() == 1


def _blip(node: Node) -> Node:
    do_mark_health(Node.objects.get(pk=node.pk), "SUSPECT", message="no heartbeat for 24 s", now=timezone.now())
    assert Node.objects.get(pk=node.pk).state_reason == "no heartbeat for 24 s"
    note_alive(Node.objects.get(pk=node.pk), now=timezone.now())
    return Node.objects.get(pk=node.pk)


@pytest.mark.parametrize(
    "act, state",
    [
        (lambda node, ops: do_cordon(node=node, user=ops, reason="bad DIMM slot 3"), "CORDONED"),
        (lambda node, ops: do_drain(node=node, user=ops, reason="bad DIMM slot 3", wait=True), "DRAINING"),
        (
            lambda node, ops: do_health_cordon(node=node, reason="bad DIMM slot 3", data={}, now=timezone.now()),
            "CORDONED",
        ),
    ],
)
def test_an_admin_state_keeps_its_reason_through_a_suspect_blip(ready, user, act, state):
    act(ready, user("ops"))
    back = _blip(ready)
    assert (back.health, back.state, back.state_reason) == ("READY", state, "bad DIMM slot 3")


def test_a_schedulable_node_says_it_is_heartbeating_again(ready):
    back = _blip(ready)
    assert (back.state, back.state_reason) == ("READY", "heartbeating again (was SUSPECT)")


@pytest.fixture
def cpu_node(db, monkeypatch):
    monkeypatch.setattr(node_health, "_redis", RedisBreaker("node health samples"))
    client = agent("cpu-01", {**INVENTORY, "gpu_type": "", "gpu_count": 0})
    check = {"status": "failed", "exit_code": 3, "output": "disk /scratch read-only", "at": timezone.now().timestamp()}
    health = {"at": timezone.now().timestamp(), "provider": "none", "error": "", "gpus": [], "check": check}
    response = client.post("/api/v1/agents/cpu-01/heartbeat", {"tasks": [], "health": health}, format="json")
    assert response.status_code == 200, response.json()


def test_a_cpu_nodes_health_check_is_exported(cpu_node, client):
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'mlqueue_node_health_check_ok{node="cpu-01"} 0.0' in body


def test_a_cpu_nodes_page_shows_its_health_check(cpu_node, logged_in):
    page = logged_in("ops").get("/nodes/cpu-01/").content.decode()
    assert 'data-status="failed"' in page and "disk /scratch read-only" in page
    assert 'id="gpu-table"' not in page


@pytest.mark.parametrize(
    "options, message",
    [
        (["--expires", "99999999d"], "--expires '99999999d': at most 3650d (ten years)"),
        (["--expires", "3651d"], "--expires '3651d': at most 3650d (ten years)"),
        (["--max-uses", "99999999999"], f"--max-uses 99999999999: at most {MAX_USES}"),
    ],
)
def test_join_token_limits_are_a_clear_error(db, options, message):
    with pytest.raises(CommandError) as refused:
        call_command("create_join_token", *options, stdout=io.StringIO(), stderr=io.StringIO())
    assert str(refused.value).startswith(message)
    assert not JoinToken.objects.exists()


def test_the_largest_join_token_limits_are_accepted(db):
    call_command(
        "create_join_token",
        "--expires",
        "3650d",
        "--max-uses",
        str(MAX_USES),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    assert JoinToken.objects.get().max_uses == MAX_USES


def test_a_reset_node_token_is_named_as_such(ready, user):
    client = agent("qa-b3")
    services.do_reset_node_token(node=Node.objects.get(name="qa-b3"), user=user("ops"), reason="reinstalled")
    response = client.post("/api/v1/agents/register", {"name": "qa-b3", **INVENTORY}, format="json")
    assert (response.status_code, response.json()["detail"]) == (401, services.WRONG_NODE_TOKEN)


def test_a_cordoned_nodes_idle_gpus_are_not_shown_free():
    cell = _cell(2, {"state": "CORDONED", "admin_state": "CORDONED"}, None, None)
    assert (cell.status, cell.title) == ("down", "GPU 2: idle, node cordoned (not available for placement)")
    assert _cell(2, {"state": "READY", "admin_state": ""}, None, None).status == "free"


def test_only_drain_takes_wait(api, demo):
    """QA: POST .../cordon {"wait": true} was accepted and the wait silently ignored."""
    node = Node.objects.order_by("name").first()
    for action in ("cordon", "uncordon"):
        refused = api("ops").post(f"/api/v1/nodes/{node.name}/{action}", {"reason": "r", "wait": True}, format="json")
        assert refused.status_code == 400
        assert refused.json()["fields"]["wait"] == [
            f"only drain takes wait (let running tasks finish); {action} does not."
        ]
    node.refresh_from_db()
    assert node.admin_state == ""  # nothing was done
    drained = api("ops").post(f"/api/v1/nodes/{node.name}/drain", {"reason": "r", "wait": True}, format="json")
    assert drained.status_code == 200, drained.json()
