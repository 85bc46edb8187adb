"""Node writes that race: each actor writes only its own column, and `state` is computed in
the UPDATE from the row as it is then, so neither the failure detector nor an admin can undo
the other from an object read before the other wrote."""

import pytest
from django.utils import timezone

from scheduling.models import Node
from scheduling.nodes import do_cordon, do_mark_health, do_uncordon, note_alive
from teams.models import AuditEvent
from tests.nodes import heartbeat

NAME = "z1-r1-h100-01"


@pytest.fixture
def ready(demo) -> Node:
    heartbeat(NAME)
    return Node.objects.get(name=NAME)


def columns() -> tuple[str, str, str]:
    node = Node.objects.get(name=NAME)
    return node.health, node.admin_state, node.state


def test_a_cordon_racing_the_failure_detector_is_not_undone(ready, user):
    detector_read = Node.objects.get(name=NAME)  # the failure detector's object, read before the cordon
    do_cordon(node=Node.objects.get(name=NAME), user=user("ops"), reason="bad DIMM")

    changed = do_mark_health(detector_read, "SUSPECT", message="no heartbeat for 16 s", now=timezone.now())
    assert columns() == ("SUSPECT", "CORDONED", "SUSPECT")
    assert changed is True
    note_alive(Node.objects.get(name=NAME), now=timezone.now())
    assert columns() == ("READY", "CORDONED", "CORDONED")


def test_a_failure_verdict_racing_a_cordon_is_not_undone(ready, user):
    admin_read = Node.objects.get(name=NAME)  # the admin's object, read before the detector wrote
    do_mark_health(Node.objects.get(name=NAME), "SUSPECT", message="no heartbeat for 16 s", now=timezone.now())

    do_cordon(node=admin_read, user=user("ops"), reason="bad DIMM")
    assert columns() == ("SUSPECT", "CORDONED", "SUSPECT")
    do_uncordon(node=admin_read, user=user("ops"), reason="fixed")
    assert columns() == ("SUSPECT", "", "SUSPECT")


def test_a_health_verdict_from_a_stale_read_changes_nothing(ready):
    do_mark_health(Node.objects.get(name=NAME), "SUSPECT", message="no heartbeat for 16 s", now=timezone.now())
    detector_read = Node.objects.get(name=NAME)  # SUSPECT, and silent long enough to be LOST
    note_alive(Node.objects.get(name=NAME), now=timezone.now())  # but it heartbeat again: READY

    changed = do_mark_health(detector_read, "LOST", message="no heartbeat for 31 s", now=timezone.now())
    assert columns() == ("READY", "", "READY")
    assert changed is False
    assert not AuditEvent.objects.filter(node__name=NAME, reason="LOST").exists()
