"""Writes about nodes joining: registration (with a join token or the node's own token) and
node token resets, each audited. A node's health and the admin's cordon, drain and reclaim
notices are the scheduler's (scheduling/nodes.py); the admin's actions are named here for the
API and the console."""

from django.db import IntegrityError, transaction
from django.urls import resolve, reverse
from django.utils import timezone
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, ValidationError

from agents import tokens
from mlqueue.errors import Conflict
from scheduling.models import Node, NodeState, Task
from scheduling.nodes import do_cordon, do_drain, do_include_gpus, do_mark_health, do_uncordon, record_node_event
from scheduling.states import ON_NODE
from teams.models import hash_token
from teams.services import do_note_gpu_type

INVENTORY = (
    "zone",
    "rack",
    "gpu_type",
    "gpu_count",
    "cpu_count",
    "memory_gb",
    "scratch_disk_gb",
    "labels",
    "address",
    "task_isolation",
    "runs_images",
)
IMAGES = {True: "yes", False: "no (no container runtime)", None: "unknown"}  # Node.runs_images, in words
TOKEN_OF_OTHER_NODE = "this token belongs to node {owner}; it cannot register {name}."
ALREADY_REGISTERED = (
    "node {name} is already registered to an agent. Restart that agent on its workdir (it keeps the node's token), "
    "or have an admin reset the node's token first: POST /api/v1/nodes/{name}/reset-token."
)
WRONG_NODE_TOKEN = (
    "invalid node token (reset by an admin, or not from this server): register with a join token, "
    "or have an admin issue one."
)
NAME_IS_A_ROUTE = (
    "{name!r} cannot name a node: {path} is the address of another endpoint, so the node could not be read "
    "there. Choose another name."
)
STILL_HAS_TASKS = (
    "node {name} still has tasks placed by its previous agent; they are requeued once that agent's lease has "
    "certainly expired (lease + margin after its last heartbeat). Register again then."
)


def do_register_node(*, name: str, inventory: dict, via: str = "", now=None) -> tuple[Node, str]:
    """Create or update the node's inventory and issue it a fresh token (any old one stops
    working). No checks: `do_agent_register` decides who may."""
    now = now or timezone.now()
    raw = tokens.new_node_token()
    with transaction.atomic():
        node, _ = Node.objects.select_for_update(no_key=True).get_or_create(
            name=name, defaults={**{k: inventory[k] for k in INVENTORY if k in inventory}, "registered_at": now}
        )
        held = bool(node.token_digest)  # by an earlier agent, whose token stops working now
        _set_inventory(node, inventory, now=now)
        node.token_digest = hash_token(raw)
        node.save()
        record_node_event(
            node,
            actor_name=f"agent:{name}",
            reason="REGISTERED",
            now=now,
            data={"via": via},
            message=f"{'re-registered' if held else 'registered'}{f' with {via}' if via else ''}: {_describe(node)}",
        )
    return node, raw


def _set_inventory(node: Node, inventory: dict, *, now) -> None:
    """Copy what the agent reports onto the row (locked, and saved by the caller), and record
    its GPU type as one quotas may name (teams/resources.py). An exclusion of a GPU the node
    no longer has goes (it counted a GPU that is not there: a negative free count)."""
    for key in INVENTORY:
        if key in inventory:
            setattr(node, key, inventory[key])
    do_note_gpu_type(node.gpu_type)
    gone = sorted(int(index) for index in node.excluded_gpus if int(index) >= node.gpu_count)
    if gone:
        node.excluded_gpus = {i: why for i, why in node.excluded_gpus.items() if int(i) < node.gpu_count}
        record_node_event(
            node,
            actor_name=f"agent:{node.name}",
            reason="GPU_INCLUDED",
            now=now,
            data={"gpus": gone},
            message=f"GPU {', '.join(map(str, gone))} no longer excluded: the node now reports {node.gpu_count} GPUs",
        )


def _describe(node: Node) -> str:
    return (
        f"{node.gpu_count} x {node.gpu_type or 'CPU'}, {node.cpu_count} CPUs, {node.memory_gb} GB, "
        f"zone {node.zone}, rack {node.rack}, task isolation {node.task_isolation or 'unknown'}, "
        f"runs images {IMAGES[node.runs_images]}"
    )


def check_registration_credential(raw: str, *, now=None) -> Node | tokens.JoinCredential:
    """The node whose own token this is, or an accepted join token; 401 otherwise, naming the
    kind of token presented."""
    node = tokens.node_by_token(raw)
    if node is not None:
        return node
    if raw.startswith(tokens.NODE_TOKEN_PREFIX):
        raise AuthenticationFailed(WRONG_NODE_TOKEN)
    join = tokens.check_join_token(raw, now=now or timezone.now())
    if join is None:
        raise AuthenticationFailed(tokens.WRONG_JOIN_TOKEN)
    return join


def do_agent_register(
    *, name: str, inventory: dict, credential: Node | tokens.JoinCredential, raw: str, now=None
) -> tuple[Node, str]:
    """An agent (re-)registers its node. With the node's own token: the inventory is updated
    and the token kept (an agent restarting on its workdir). With a join token: only a name that
    no agent holds (new, or reset by an admin), and the join token spends a use."""
    now = now or timezone.now()
    if isinstance(credential, Node):
        if credential.name != name:
            raise PermissionDenied(TOKEN_OF_OTHER_NODE.format(owner=credential.name, name=name))
        return _re_register(credential, inventory, now=now), raw
    with transaction.atomic():
        node = Node.objects.select_for_update(no_key=True).filter(name=name).first()
        if node is None:
            check_name_is_no_route(name)
        if node is not None and node.token_digest or node is None and not _inserted(name, inventory, now=now):
            raise Conflict(ALREADY_REGISTERED.format(name=name))
        if Task.objects.filter(node__name=name, state__in=ON_NODE).exists():
            raise Conflict(STILL_HAS_TASKS.format(name=name))
        if not tokens.do_use_join_token(credential, now=now):
            raise AuthenticationFailed(tokens.WRONG_JOIN_TOKEN)
        return do_register_node(name=name, inventory=inventory, via=credential.description, now=now)


# A node's own addresses (its API detail and its console page), each with the name it must resolve to.
NODE_ADDRESSES = ("node-detail", "node-page")


def check_name_is_no_route(name: str) -> None:
    """A 400 naming `name` when one of the node's own addresses would reach another endpoint:
    a node named `bulk` registered, and then GET /api/v1/nodes/bulk was the bulk action's 405
    (QA). Asked of the URLconf itself, so a route added later is covered too."""
    for address in NODE_ADDRESSES:
        path = reverse(address, kwargs={"name": name})
        if resolve(path).url_name != address:
            raise ValidationError({"name": [NAME_IS_A_ROUTE.format(name=name, path=path)]})


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
        node = Node.objects.select_for_update(no_key=True).get(pk=node.pk)
        _set_inventory(node, inventory, now=now)
        node.save()
        record_node_event(
            node,
            actor_name=f"agent:{node.name}",
            reason="REGISTERED",
            now=now,
            data={"via": "node token"},
            message=f"re-registered with its own node token: {_describe(node)}",
        )
    return node


def do_reset_node_token(*, node: Node, user, reason: str, now=None) -> bool:
    """The node's token stops working, and a join token may register the name again (a node
    reinstalled, or a token that leaked). Nothing new is placed there (SUSPECT); its tasks stay
    until its old agent's lease has certainly expired (then it is LOST and they are requeued,
    as for any silent node), and no new agent may register the name while they remain: it would
    be handed their assignments. False, with nothing written or audited, when the node had no
    token (reset already, and no agent has joined since): the API's `changed: false`."""
    now = now or timezone.now()
    with transaction.atomic():
        # Claimed by a conditional write: of two resets at once, one resets and is audited.
        if not Node.objects.filter(pk=node.pk).exclude(token_digest="").update(token_digest=""):
            node.refresh_from_db()
            return False
        node.refresh_from_db()
        if node.health == NodeState.READY:
            do_mark_health(node, NodeState.SUSPECT, message=f"node token reset by {user.get_username()}", now=now)
        tokens.audit(
            reason="NODE_TOKEN_RESET",
            node=node,
            actor=user,
            actor_name=user.get_username(),
            now=now,
            message=f"node token of {node.name} reset: {reason}",
            data={"reason": reason},
        )
    return True


# The admin's node actions by name, for the API and the console alike: (node, user, reason).
NODE_ACTIONS = {
    "cordon": lambda node, user, reason: do_cordon(node=node, user=user, reason=reason),
    "drain": lambda node, user, reason: do_drain(node=node, user=user, reason=reason),
    "drain_wait": lambda node, user, reason: do_drain(node=node, user=user, reason=reason, wait=True),
    "uncordon": lambda node, user, reason: do_uncordon(node=node, user=user, reason=reason),
    "reset_token": lambda node, user, reason: do_reset_node_token(node=node, user=user, reason=reason),
    # Every GPU excluded for a fault back into placement (the API can name some).
    "include_gpus": lambda node, user, reason: do_include_gpus(node=node, user=user, gpus=[], reason=reason),
}

# What a bulk action may do to many nodes at once (a token reset stays one node at a time).
BULK_ACTIONS = ("cordon", "drain", "drain_wait", "uncordon")


def do_bulk_node_action(*, nodes: list[Node], action: str, user, reason: str) -> tuple[list[Node], list[Node]]:
    """One admin action on many nodes, all or none (one transaction), each node audited on
    its own exactly as a single action is. Returns (the nodes it changed, those it left as they
    were: an uncordon of a node neither cordoned nor draining writes nothing and is not audited;
    a drain again for the same reason is a change only where it stopped tasks, as the single
    action's `changed` says)."""
    changed, unchanged = [], []
    with transaction.atomic():
        # Each node's admin state as it stands under its row lock: the one the action's
        # conditional write then sees (a window's end may have uncordoned it since it was read).
        locked = Node.objects.select_for_update(no_key=True).filter(pk__in=[node.pk for node in nodes]).order_by("id")
        now_state = {pk: (state, why) for pk, state, why in locked.values_list("pk", "admin_state", "admin_reason")}
        for node in nodes:
            done = NODE_ACTIONS[action](node, user, reason)
            stopped = action == "drain" and done > 0  # jobs a drain with wait had left running
            # As it was: an uncordon of a node in service, a cordon or drain again for its reason.
            as_was = now_state[node.pk] == (node.admin_state, node.admin_reason) and not stopped
            (unchanged if as_was else changed).append(node)
    return changed, unchanged
