"""A fault found while a node is already out of service (QA): during a maintenance window the
fault was marked handled without a cordon ("cordoned automatically ... (it was already
DRAINING)"), and the window's end put the faulty node back in service. Now the fault's cordon
takes the node over from the window, whose end leaves it for an admin; an admin's own cordon or
drain stays as it is, and the event says no cordon was added."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from mlqueue.breaker import RedisBreaker
from scheduling import maintenance, node_health
from scheduling.leader.worker import run_pass
from scheduling.models import Job, MaintenanceWindow, Node, Task
from scheduling.nodes import do_health_cordon
from teams.models import AuditEvent
from tests.conftest import FROZEN_AT, make_spec
from tests.integration.test_agent_api import agent, agent_settings  # noqa: F401 (a fixture)
from tests.integration.test_node_health import beat_health, sample
from tests.nodes import cordon, drain, heartbeat

NAME = "z1-r1-h100-01"  # the node test_node_health's beat_health() heartbeats for
XID_79 = "XID 79 (GPU has fallen off the bus) on GPU 1"
CHECK_FAILED = "health check failed (exit 2): dcgmi diag: PCIe replay"


@pytest.fixture(autouse=True)
def fresh_breaker(monkeypatch):
    monkeypatch.setattr(node_health, "_redis", RedisBreaker("node health samples"))


def xid_79() -> dict:
    return sample(gpu1={"xids": [{"code": 79, "at": timezone.now().timestamp()}]})


def failing_check() -> dict:
    at = timezone.now().timestamp()
    check = {"status": "failed", "exit_code": 2, "output": "dcgmi diag: PCIe replay", "at": at, "failed_since": at}
    return {**sample(), "check": check}


def start_window(api) -> MaintenanceWindow:
    """A 4 h window on NAME, from 10:00; started (the node DRAINING)."""
    body = {"names": [NAME], "starts_at": "2026-04-20T10:00:00Z", "duration_hours": 4, "reason": "PDU swap"}
    response = api("ops").post("/api/v1/maintenance", body, format="json")
    assert response.status_code == 201, response.json()
    window = MaintenanceWindow.objects.get(pk=response.json()["id"])
    assert maintenance.run_due(now=FROZEN_AT + timedelta(hours=1)) == ([window.pk], [])
    assert Node.objects.get(name=NAME).admin_state == "DRAINING"
    return window


@pytest.mark.parametrize(("fault", "reason"), [(xid_79, XID_79), (failing_check, CHECK_FAILED)])
def test_a_fault_during_a_window_keeps_the_node_cordoned_past_its_end(clock, api, leader, fault, reason):
    client = agent(NAME)
    window = start_window(api)
    clock.move_to(FROZEN_AT + timedelta(hours=2))
    beat_health(client, fault())

    node = Node.objects.get(name=NAME)
    assert (node.state, node.admin_state, node.admin_reason) == ("CORDONED", "CORDONED", reason)
    events = AuditEvent.objects.filter(node=node, actor_name="health")
    taken = f" (it was DRAINING for maintenance #{window.pk}; the window's end leaves it cordoned)"
    assert [(e.reason, e.message) for e in events] == [("CORDONED", f"cordoned automatically: {reason}{taken}")]

    clock.move_to(FROZEN_AT + timedelta(hours=5))
    assert maintenance.run_due() == ([], [window.pk])
    node.refresh_from_db()
    assert (node.state, node.admin_reason) == ("CORDONED", reason)
    ended = AuditEvent.objects.get(kind="MAINTENANCE", reason="ENDED").message
    assert ended == f"maintenance #{window.pk} ended: uncordoned 0 node(s); left as they are: {NAME}"

    heartbeat()  # the fleet alive at 14:00: only the cordon keeps the job off the node
    cordon(Node.objects.exclude(name=NAME))
    job = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 1}), format="json").json()["id"]
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job).state == "PENDING" and not Task.objects.filter(job_id=job, node__isnull=False)
    back = api("ops").post(f"/api/v1/nodes/{NAME}/uncordon", {"reason": "GPU reseated"}, format="json")
    assert back.json()["state"] == "READY"  # the admin's to lift, and only the admin's


def window_drain(api, node: Node) -> None:
    start_window(api)


def admin_cordon(api, node: Node) -> None:
    cordon(node, reason="bad fan")


def admin_drain(api, node: Node) -> None:
    drain(node, reason="bad fan", wait=True)


def earlier_fault(api, node: Node) -> None:
    with transaction.atomic():
        do_health_cordon(node=node, reason="XID 74 (NVLink error) on GPU 0", data={}, now=timezone.now())


def window_then_admin(api, node: Node) -> None:
    start_window(api)
    cordon(node, reason="bad fan")


NOT_CORDONED = (
    "not cordoned automatically: bad DIMM; it is {state} already ({why}), and an uncordon puts it back in"
    " service with this fault"
)


@pytest.mark.parametrize(
    ("before", "state", "admin_reason", "event", "message"),
    [
        (None, "CORDONED", "bad DIMM", "CORDONED", "cordoned automatically: bad DIMM"),
        (
            window_drain,
            "CORDONED",
            "bad DIMM",
            "CORDONED",
            "cordoned automatically: bad DIMM (it was DRAINING for maintenance #{window}; the window's end leaves it"
            " cordoned)",
        ),
        (admin_cordon, "CORDONED", "bad fan", "HEALTH", NOT_CORDONED.format(state="CORDONED", why="bad fan")),
        (admin_drain, "DRAINING", "bad fan", "HEALTH", NOT_CORDONED.format(state="DRAINING", why="bad fan")),
        (
            earlier_fault,
            "CORDONED",
            "XID 74 (NVLink error) on GPU 0",
            "HEALTH",
            NOT_CORDONED.format(state="CORDONED", why="XID 74 (NVLink error) on GPU 0"),
        ),
        # An admin's cordon during the window is the admin's: neither the fault nor the window's end lifts it.
        (window_then_admin, "CORDONED", "bad fan", "HEALTH", NOT_CORDONED.format(state="CORDONED", why="bad fan")),
    ],
)
def test_a_fault_cordons_unless_an_admin_or_an_earlier_fault_holds_the_node(
    clock, api, leader, before, state, admin_reason, event, message
):
    node = Node.objects.get(name=NAME)
    if before is not None:
        before(api, node)
    window = MaintenanceWindow.objects.first()
    with transaction.atomic():
        cordoned = do_health_cordon(node=node, reason="bad DIMM", data={}, now=timezone.now())
    node = Node.objects.get(name=NAME)
    assert (cordoned, node.admin_state, node.admin_reason) == (event == "CORDONED", state, admin_reason)
    last = AuditEvent.objects.filter(node=node, actor_name="health").latest("id")
    assert (last.reason, last.message) == (event, message.format(window=window and window.pk))
    if window is not None:  # its end puts back only what it still holds
        maintenance.run_due(now=FROZEN_AT + timedelta(hours=5))
        assert Node.objects.get(name=NAME).admin_state == state
