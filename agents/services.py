"""Writes about nodes: registration, health changes (from heartbeats and the leader's failure
detection), and the admin's cordon, drain, uncordon and spot reclaim notices, each audited."""
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied

from agents import tokens

from agents.models import AdminState, Node, NodeState
from mlqueue.errors import Conflict
from scheduling import notify
from scheduling.models import EventKind, JobEvent, StopReason, Task, TaskState
from teams.models import hash_token

ACTIVE = (TaskState.ASSIGNED, TaskState.RUNNING)
# The columns the state writers below touch, re-read into the caller's object after each.
NODE_STATE = ["health", "admin_state", "admin_reason", "reclaim_deadline", "state", "state_reason",
              "state_changed_at", "first_heartbeat_at"]
INVENTORY = ("zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "scratch_disk_gb", "labels", "address",
             "task_isolation")
TOKEN_OF_OTHER_NODE = "this token belongs to node {owner}; it cannot register {name}."
ALREADY_REGISTERED = (
    "node {name} is already registered to an agent. Restart that agent on its workdir (it keeps the node's token), "
    "or have an admin reset the node's token first: POST /api/v1/nodes/{name}/reset-token.")
STILL_HAS_TASKS = (
    "node {name} still has tasks placed by its previous agent; they are requeued once that agent's lease has "
    "certainly expired (lease + margin after its last heartbeat). Register again then.")


def _record(node: Node, *, actor=None, actor_name: str, reason: str, message: str, data=None, now=None) -> None:
    JobEvent.objects.create(node=node, kind=EventKind.NODE_STATE, actor=actor, actor_name=actor_name, reason=reason,
                            message=message, data=data or {}, created_at=now or timezone.now())


def _health_columns(health: str, *, reason: str, now) -> dict:
    """The health writers' UPDATE: their own column, and `state` from the row's admin_state as
    it is when the UPDATE runs (Node.effective_state's rule, in SQL)."""
    state = Value(health) if health != NodeState.READY else Case(
        When(admin_state=AdminState.NONE, then=Value(NodeState.READY)), default=F("admin_state"))
    return {"health": health, "state": state, "state_reason": reason, "state_changed_at": now}


def _set_admin_state(node: Node, admin_state: str, *, reason: str, now, **admin) -> None:
    """The admin writers' UPDATE: their own columns (`admin` adds admin_reason and
    reclaim_deadline), and `state` from the row's health as it is when the UPDATE runs (an
    admin state shows only on a READY node). Health is the failure detector's: never written here."""
    state = F("health") if admin_state == AdminState.NONE else Case(
        When(health=NodeState.READY, then=Value(admin_state)), default=F("health"))
    Node.objects.filter(pk=node.pk).update(admin_state=admin_state, **admin, state=state, state_reason=reason,
                                           state_changed_at=now)
    node.refresh_from_db(fields=NODE_STATE)  # the caller shows what the row says now
    notify.wake_scheduler("node")


def do_register_node(*, name: str, inventory: dict, via: str = "", now=None) -> tuple[Node, str]:
    """Create or update the node's inventory and issue it a fresh token (any old one stops
    working). No checks: `do_agent_register` decides who may."""
    now = now or timezone.now()
    raw = tokens.new_node_token()
    with transaction.atomic():
        node, _ = Node.objects.select_for_update().get_or_create(
            name=name, defaults={**{k: inventory[k] for k in INVENTORY if k in inventory}, "registered_at": now})
        held = bool(node.token_digest)  # by an earlier agent, whose token stops working now
        _set_inventory(node, inventory)
        node.token_digest = hash_token(raw)
        node.save()
        _record(node, actor_name=f"agent:{name}", reason="REGISTERED", now=now, data={"via": via},
                message=f"{'re-registered' if held else 'registered'}{f' with {via}' if via else ''}: "
                        f"{_describe(node)}")
    return node, raw


def _set_inventory(node: Node, inventory: dict) -> None:
    for key in INVENTORY:
        if key in inventory:
            setattr(node, key, inventory[key])


def _describe(node: Node) -> str:
    return (f"{node.gpu_count} x {node.gpu_type or 'CPU'}, {node.cpu_count} CPUs, {node.memory_gb} GB, "
            f"zone {node.zone}, rack {node.rack}, task isolation {node.task_isolation or 'unknown'}")


def check_registration_credential(raw: str, *, now=None) -> Node | tokens.JoinCredential:
    """The node whose own token this is, or an accepted join token; 401 otherwise."""
    node = tokens.node_by_token(raw)
    if node is not None:
        return node
    join = tokens.check_join_token(raw, now=now or timezone.now())
    if join is None:
        raise AuthenticationFailed(tokens.WRONG_JOIN_TOKEN)
    return join


def do_agent_register(*, name: str, inventory: dict, credential: Node | tokens.JoinCredential, raw: str,
                      now=None) -> tuple[Node, str]:
    """An agent (re-)registers its node. With the node's own token: the inventory is updated
    and the token kept (an agent restarting on its workdir). With a join token: only a name that
    no agent holds (new, or reset by an admin), and the join token spends a use."""
    now = now or timezone.now()
    if isinstance(credential, Node):
        if credential.name != name:
            raise PermissionDenied(TOKEN_OF_OTHER_NODE.format(owner=credential.name, name=name))
        return _re_register(credential, inventory, now=now), raw
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is not None and node.token_digest or node is None and not _inserted(name, inventory, now=now):
            raise Conflict(ALREADY_REGISTERED.format(name=name))
        if Task.objects.filter(node__name=name, state__in=ACTIVE).exists():
            raise Conflict(STILL_HAS_TASKS.format(name=name))
        if not tokens.do_use_join_token(credential, now=now):
            raise AuthenticationFailed(tokens.WRONG_JOIN_TOKEN)
        return do_register_node(name=name, inventory=inventory, via=credential.description, now=now)


def _inserted(name: str, inventory: dict, *, now) -> bool:
    """Insert a new node's row, which this transaction then holds; False when a concurrent
    registration inserted it first (select_for_update locks no row that does not exist yet)."""
    try:
        with transaction.atomic():
            Node.objects.create(name=name, registered_at=now, **{k: inventory[k] for k in INVENTORY if k in inventory})
    except IntegrityError:
        return False
    return True


def _re_register(node: Node, inventory: dict, *, now) -> Node:
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        _set_inventory(node, inventory)
        node.save()
        _record(node, actor_name=f"agent:{node.name}", reason="REGISTERED", now=now, data={"via": "node token"},
                message=f"re-registered with its own node token: {_describe(node)}")
    return node


def note_alive(node: Node, *, now=None) -> None:
    """A heartbeat arrived: a NEW, SUSPECT or LOST node is READY again (one write, then none).
    Conditional on the row not being READY already, so racing heartbeats record one event."""
    if node.health == NodeState.READY:
        return
    now = now or timezone.now()
    was = node.health
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk).exclude(health=NodeState.READY).update(
            first_heartbeat_at=Coalesce(F("first_heartbeat_at"), Value(now)),
            **_health_columns(NodeState.READY, reason=f"heartbeating again (was {was})", now=now))
        if changed:
            node.refresh_from_db(fields=NODE_STATE)
            _record(node, actor_name=f"agent:{node.name}", reason="READY",
                    message=f"{was} -> READY: heartbeat received", now=now)
            notify.wake_scheduler("node")


def do_mark_health(node: Node, health: str, *, message: str, now) -> bool:
    """The leader's verdict from missed heartbeats (SUSPECT, LOST), written only while the
    row's health is still the `node.health` the verdict was made on: a heartbeat that made it
    READY since wins. Returns whether it changed anything (the event is recorded only then)."""
    was = node.health
    changed = Node.objects.filter(pk=node.pk, health=was).update(**_health_columns(health, reason=message, now=now))
    if changed:
        node.refresh_from_db(fields=NODE_STATE)
        _record(node, actor_name="scheduler", reason=health, message=f"{was} -> {health}: {message}", now=now)
        notify.wake_scheduler("node")
    return bool(changed)


def do_reset_node_token(*, node: Node, user, reason: str, now=None) -> None:
    """The node's token stops working, and a join token may register the name again (a node
    reinstalled, or a token that leaked). Nothing new is placed there (SUSPECT); its tasks stay
    until its old agent's lease has certainly expired (then it is LOST and they are requeued,
    as for any silent node), and no new agent may register the name while they remain: it would
    be handed their assignments."""
    now = now or timezone.now()
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(token_digest="")
        node.refresh_from_db()
        if node.health == NodeState.READY:
            do_mark_health(node, NodeState.SUSPECT, message=f"node token reset by {user.get_username()}", now=now)
        tokens.audit(reason="NODE_TOKEN_RESET", node=node, actor=user, actor_name=user.get_username(), now=now,
                     message=f"node token of {node.name} reset: {reason}", data={"reason": reason})


def do_cordon(*, node: Node, user, reason: str, now=None) -> Node:
    now = now or timezone.now()
    with transaction.atomic():
        _set_admin_state(node, AdminState.CORDONED, reason=reason, now=now, admin_reason=reason)
        _record(node, actor=user, actor_name=user.get_username(), reason="CORDONED", message=f"cordoned: {reason}",
                now=now)
    return node


def do_uncordon(*, node: Node, user, reason: str, now=None) -> Node:
    now = now or timezone.now()
    with transaction.atomic():
        _set_admin_state(node, AdminState.NONE, reason=reason, now=now, admin_reason="", reclaim_deadline=None)
        _record(node, actor=user, actor_name=user.get_username(), reason="UNCORDONED",
                message=f"uncordoned: {reason}", now=now)
    return node


def do_drain(*, node: Node, user, reason: str, wait: bool = False, deadline=None, now=None) -> int:
    """No new work; unless `wait`, running tasks are stopped gracefully (each job's grace
    period, or until `deadline` for a spot reclaim) and requeued elsewhere. Returns how many
    jobs were signalled."""
    from scheduling.stopping import do_request_stop

    now = now or timezone.now()
    with transaction.atomic():
        _set_admin_state(node, AdminState.DRAINING, reason=reason, now=now, admin_reason=reason,
                         reclaim_deadline=deadline)
        _record(node, actor=user, actor_name=user.get_username(), reason="DRAINING",
                message=f"draining{' (running tasks may finish)' if wait else ''}: {reason}",
                data={"wait": wait, "deadline": deadline.isoformat() if deadline else None}, now=now)
        if wait:
            return 0
        jobs = Task.objects.filter(node=node, state__in=ACTIVE).values_list("job_id", "job__grace_period_seconds")
        signalled = 0
        for job_id, grace in sorted(set(jobs)):
            grace_s = grace if deadline is None else max(0, min(grace, int((deadline - now).total_seconds()) - 5))
            signalled += bool(do_request_stop(job_id=job_id, reason=StopReason.DRAIN, grace_s=grace_s, now=now,
                                              message=f"node {node.name} is draining: {reason}",
                                              actor_name=user.get_username()))
    return signalled


def do_reclaim_notice(*, node: Node, user, deadline, reason: str = "", now=None) -> int:
    """A spot node will be taken back at `deadline`: checkpoint now, drain, and requeue what
    is still there at the deadline (the leader's sweep does that)."""
    now = now or timezone.now()
    why = reason or f"spot reclaim at {deadline.isoformat()}"
    return do_drain(node=node, user=user, reason=why, deadline=max(deadline, now + timedelta(seconds=1)), now=now)


# The admin's node actions by name, for the API and the console alike: (node, user, reason).
NODE_ACTIONS = {
    "cordon": lambda node, user, reason: do_cordon(node=node, user=user, reason=reason),
    "drain": lambda node, user, reason: do_drain(node=node, user=user, reason=reason),
    "drain_wait": lambda node, user, reason: do_drain(node=node, user=user, reason=reason, wait=True),
    "uncordon": lambda node, user, reason: do_uncordon(node=node, user=user, reason=reason),
    "reset_token": lambda node, user, reason: do_reset_node_token(node=node, user=user, reason=reason),
}
