"""Node writes that race: each actor writes only its own column, and `state` is computed in
the UPDATE from the row as it is then, so neither the failure detector nor an admin can undo
the other from an object read before the other wrote."""

import pytest
from django.utils import timezone

from scheduling.models import Node
from scheduling.nodes import do_cordon, do_mark_health, do_uncordon, note_alive, note_alive_many
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


def test_a_fleet_coming_back_is_ready_in_one_transaction_with_one_event_each(demo, django_assert_num_queries):
    """NEW, SUSPECT and LOST nodes heard from together (a fleet back from an outage): each is
    READY with its own event saying what it was; one READY already (a racing heartbeat wrote
    it since it was read) gets no second event. A fixed number of statements, whatever the count."""
    heartbeat(["z1-r1-h100-01", "z1-r1-h100-02", "z1-r1-h100-03"])
    now = timezone.now()
    do_mark_health(Node.objects.get(name="z1-r1-h100-01"), "SUSPECT", message="quiet", now=now)
    do_mark_health(Node.objects.get(name="z1-r1-h100-02"), "LOST", message="quiet", now=now)
    raced = Node.objects.get(name="z1-r1-h100-03")
    raced.health = "LOST"  # read while it was LOST; READY again by now
    fleet = [*Node.objects.exclude(name__in=["z1-r1-h100-01", "z1-r1-h100-02", "z1-r1-h100-03"]), raced]
    fleet += list(Node.objects.filter(name__in=["z1-r1-h100-01", "z1-r1-h100-02"]))
    before = AuditEvent.objects.filter(reason="READY").count()

    # SAVEPOINT, lock and read, UPDATE, read back, INSERT the events, RELEASE
    with django_assert_num_queries(6):
        note_alive_many(fleet, now=now)
    assert set(Node.objects.values_list("health", "state")) == {("READY", "READY")}
    assert {node.health for node in fleet} == {"READY"}  # the objects passed show it too
    events = AuditEvent.objects.filter(reason="READY").order_by("id")[before:]
    assert len(events) == 35  # 33 NEW, one SUSPECT, one LOST; none for the raced one
    messages = {event.node.name: event.message for event in events}
    assert messages["z1-r1-h100-01"] == "SUSPECT -> READY: heartbeat received"
    assert messages["z1-r1-h100-02"] == "LOST -> READY: heartbeat received"
    assert messages["z1-r1-h100-04"] == "NEW -> READY: heartbeat received"
    assert Node.objects.get(name="z1-r1-h100-02").state_reason == "heartbeating again (was LOST)"
    assert Node.objects.get(name="z1-r1-h100-04").first_heartbeat_at == now
