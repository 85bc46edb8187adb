"""Nodes brought to a state the way production brings them there.

A node's health, state and liveness are derived: the heartbeat path and the leader's failure
detection compute them. A test that writes them itself makes states production never has (a
READY state over a NEW health, CORDONED with no admin's cordon, LOST with a fresh heartbeat),
and the failure detector and the pages then read those. So tests use these instead:

- heartbeat(): what a heartbeat does (agents/heartbeats.py): liveness recorded, the node READY;
- cordon(), uncordon(), drain(): the admin's actions (scheduling/nodes.py), by the demo's site admin;
- fall_silent(): the nodes stop heartbeating and the leader's failure detection
  (scheduling/leader/failures.py) finds them SUSPECT, or LOST with their tasks failed.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from agents.management.commands.seed_demo import ADMIN
from scheduling import liveness
from scheduling import nodes as node_services
from scheduling.leader import failures
from scheduling.models import Node, NodeState

Nodes = QuerySet | list | tuple | str | Node | None


def _rows(nodes: Nodes) -> list[Node]:
    """Fresh rows for a queryset, names or rows (one or several); every node for None."""
    if nodes is None:
        return list(Node.objects.all())
    if isinstance(nodes, QuerySet):
        return list(nodes)
    names = [nodes] if isinstance(nodes, (str, Node)) else list(nodes)
    names = [node.name if isinstance(node, Node) else node for node in names]
    rows = list(Node.objects.filter(name__in=names))
    assert len(rows) == len(set(names)), f"no such node among {names}"
    return rows


def heartbeat(nodes: Nodes = None, *, now: datetime | None = None) -> None:
    """Each node (every node for None) heard from at `now`, as a heartbeat is noted: in
    liveness, and READY if it was not (where an admin's cordon then shows)."""
    now = now or timezone.now()
    rows = list(_rows(nodes))
    liveness.record_many({node.name: now.timestamp() for node in rows})
    node_services.note_alive_many(rows, now=now)


def _admin():
    return get_user_model().objects.get(username=ADMIN)


def cordon(nodes: Nodes, *, reason: str = "kept out of this test") -> None:
    """No new work on `nodes`: the admin's cordon, which shows once a node is READY."""
    admin = _admin()
    for node in _rows(nodes):
        node_services.do_cordon(node=node, user=admin, reason=reason)


def uncordon(nodes: Nodes, *, reason: str = "back for this test") -> None:
    admin = _admin()
    for node in _rows(nodes):
        node_services.do_uncordon(node=node, user=admin, reason=reason)


def drain(nodes: Nodes, *, reason: str = "maintenance", wait: bool = False) -> None:
    """The admin's drain: no new work, and (unless `wait`) the running tasks asked to stop."""
    admin = _admin()
    for node in _rows(nodes):
        node_services.do_drain(node=node, user=admin, reason=reason, wait=wait)


def fall_silent(nodes: Nodes, *, health: str, epoch: int) -> datetime:
    """`nodes` heartbeat now, then fall silent; every other READY node heartbeats on. The
    leader of `epoch`, watching all along, looks once when the silence has lasted long enough
    for `health`: SUSPECT after three missed heartbeats, LOST past the outage bound and its
    margin (their tasks failed). Returns when it looked (later than now: the rows say so)."""
    names = [node.name for node in _rows(nodes)]
    heartbeat(names)
    silent_s = (
        settings.MLQ_SUSPECT_AFTER_S
        if health == NodeState.SUSPECT
        else (settings.MLQ_OUTAGE_BOUND_S + failures.lost_margin())
    )
    at = timezone.now() + timedelta(seconds=silent_s + 1)
    others = list(Node.objects.filter(health=NodeState.READY).exclude(name__in=names))
    for _ in range(LOOKS):
        heartbeat(others, now=at)
        _look(epoch=epoch, at=at)
        if set(Node.objects.filter(name__in=names).values_list("health", flat=True)) == {health}:
            return at
    raise AssertionError(f"{names} are not {health} after {LOOKS} looks at {at}")


# A loaded machine can hold a Redis reply past its 0.5 s timeout: the detector then rightly
# trusts none of its clocks for that look (nothing is called SUSPECT or LOST). The leader would
# look again at its next pass; so does the test, a few times, with a Redis it trusts again.
LOOKS = 3


def _look(*, epoch: int, at: datetime) -> None:
    """One look of a leader of `epoch` that was watching all along, at `at`."""
    kept = failures.CLOCKS
    failures.CLOCKS = failures.Clocks(epoch=epoch)
    liveness._redis.worked()  # a timeout in an earlier look holds Redis as down for 5 s
    try:
        watched = list(Node.objects.filter(health__in=(NodeState.READY, NodeState.SUSPECT)))
        liveness.last_seen(watched, now=at.timestamp())  # its look before this one: it knows this Redis
        failures.detect(epoch=epoch, now=at)
    finally:
        failures.CLOCKS = kept
