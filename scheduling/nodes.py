"""Writes about a node's state: its health (from heartbeats and the leader's failure
detection) and the admin's cordon, drain, uncordon and spot reclaim notices, each audited.
Registration and node tokens are the agents app's (agents/services.py)."""

from datetime import timedelta

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Coalesce, Concat
from django.utils import timezone

from scheduling import notify
from scheduling.models import AdminState, MaintenanceState, MaintenanceWindow, Node, NodeState, StopReason, Task
from scheduling.states import ON_NODE
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent, EventKind

# The columns the state writers below touch, re-read into the caller's object after each.
NODE_STATE = [
    "health",
    "admin_state",
    "admin_reason",
    "reclaim_deadline",
    "state",
    "state_reason",
    "state_changed_at",
    "first_heartbeat_at",
]


def record_node_event(
    node: Node, *, actor=None, actor_name: str, reason: str, message: str, data=None, now=None
) -> None:
    AuditEvent.objects.create(
        node=node,
        kind=EventKind.NODE_STATE,
        actor=actor,
        actor_name=actor_name,
        reason=reason,
        message=message,
        data=data or {},
        created_at=now or timezone.now(),
    )


def _health_columns(health: str, *, reason, now) -> dict:
    """The health writers' UPDATE: their own column, and `state` from the row's admin_state as
    it is when the UPDATE runs (Node.effective_state's rule, in SQL). Back to READY, a cordoned
    or draining node shows its admin's reason again, not the comeback's."""
    if health != NodeState.READY:
        return {"health": health, "state": Value(health), "state_reason": reason, "state_changed_at": now}
    reason = Value(reason) if isinstance(reason, str) else reason
    state = Case(When(admin_state=AdminState.NONE, then=Value(NodeState.READY)), default=F("admin_state"))
    state_reason = Case(
        When(admin_state=AdminState.NONE, then=reason), When(admin_reason="", then=reason), default=F("admin_reason")
    )
    return {"health": health, "state": state, "state_reason": state_reason, "state_changed_at": now}


def _set_admin_state(
    node: Node,
    admin_state: str,
    *,
    reason: str,
    now,
    only_from: str | None = None,
    only_reason: str | None = None,
    unless: str | None = None,
    unless_so: bool = False,
    **admin,
) -> int:
    """The admin writers' UPDATE: their own columns (`admin` adds admin_reason and
    reclaim_deadline), and `state` from the row's health as it is when the UPDATE runs (an
    admin state shows only on a READY node). Health is the failure detector's: never written here.
    `only_from`: write only while the row's admin state is that one; `only_reason`: only while
    its admin reason is that one; `unless`: only while its admin state is not that one;
    `unless_so`: only while the row is not already so (its admin state and `admin` columns all as
    asked: a cordon again with the same reason writes and records nothing). Returns the rows
    written."""
    state = (
        F("health")
        if admin_state == AdminState.NONE
        else Case(When(health=NodeState.READY, then=Value(admin_state)), default=F("health"))
    )
    rows = Node.objects.filter(pk=node.pk)
    if only_from is not None:
        rows = rows.filter(admin_state=only_from)
    if only_reason is not None:
        rows = rows.filter(admin_reason=only_reason)
    if unless is not None:
        rows = rows.exclude(admin_state=unless)
    if unless_so:
        rows = rows.exclude(admin_state=admin_state, **admin)
    written = rows.update(admin_state=admin_state, **admin, state=state, state_reason=reason, state_changed_at=now)
    node.refresh_from_db(fields=NODE_STATE)  # the caller shows what the row says now
    notify.wake_scheduler("node")
    return written


def note_alive(node: Node, *, now=None) -> None:
    """A heartbeat arrived: a NEW, SUSPECT or LOST node is READY again (one write, then none)."""
    note_alive_many([node], now=now)


def note_alive_many(nodes: list[Node], *, now=None) -> None:
    """Heartbeats arrived from `nodes`: each NEW, SUSPECT or LOST one is READY again, in one
    transaction whatever their number (the tests' fleet comes up so): the rows locked in id
    order and read, one UPDATE, one INSERT of their events, one wake-up. A row READY
    by then (a racing heartbeat) is left alone, so each comeback is one event. The objects
    passed that were not READY get their rows' state as it is now."""
    waking = {node.pk: node for node in nodes if node.health != NodeState.READY}
    if not waking:
        return
    now = now or timezone.now()
    with transaction.atomic():
        rows = (
            Node.objects.select_for_update(no_key=True)
            .filter(pk__in=waking)
            .exclude(health=NodeState.READY)
            .order_by("pk")
        )
        was = dict(rows.values_list("pk", "health"))
        if was:
            _make_ready(was, {pk: waking[pk].name for pk in was}, now=now)
        for pk, *columns in Node.objects.filter(pk__in=waking).values_list("pk", *NODE_STATE):
            for name, value in zip(NODE_STATE, columns, strict=True):
                setattr(waking[pk], name, value)


def _make_ready(was: dict[int, str], names: dict[int, str], *, now) -> None:
    """note_alive_many's writes, on rows it has locked: node id -> its health before (`was`)."""
    Node.objects.filter(pk__in=was).update(
        first_heartbeat_at=Coalesce(F("first_heartbeat_at"), Value(now)),
        **_health_columns(
            NodeState.READY,
            # A new node's first heartbeat is not "again" (every node read "heartbeating again
            # (was NEW)" after it joined).
            reason=Case(
                When(health=NodeState.NEW, then=Value("heartbeating since it joined")),
                default=Concat(Value("heartbeating again (was "), F("health"), Value(")")),
            ),
            now=now,
        ),
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(
            node_id=pk,
            kind=EventKind.NODE_STATE,
            actor_name=f"agent:{names[pk]}",
            reason="READY",
            message=f"{before} -> READY: heartbeat received",
            data={},
            created_at=now,
        )
        for pk, before in was.items()
    )
    notify.wake_scheduler("node")


def do_mark_health(node: Node, health: str, *, message: str, now) -> bool:
    """The leader's verdict from missed heartbeats (SUSPECT, LOST), written only while the
    row's health is still the `node.health` the verdict was made on: a heartbeat that made it
    READY since wins. Returns whether it changed anything (the event is recorded only then)."""
    was = node.health
    changed = Node.objects.filter(pk=node.pk, health=was).update(**_health_columns(health, reason=message, now=now))
    if changed:
        node.refresh_from_db(fields=NODE_STATE)
        record_node_event(node, actor_name="scheduler", reason=health, message=f"{was} -> {health}: {message}", now=now)
        notify.wake_scheduler("node")
    return bool(changed)


def do_cordon(*, node: Node, user, reason: str, now=None) -> Node:
    """A cordon of a node cordoned for the same reason changes nothing and records nothing; for
    another reason, the reason is the new one (recorded)."""
    now = now or timezone.now()
    with transaction.atomic():
        if not _set_admin_state(node, AdminState.CORDONED, reason=reason, now=now, admin_reason=reason, unless_so=True):
            return node
        record_node_event(
            node, actor=user, actor_name=user.get_username(), reason="CORDONED", message=f"cordoned: {reason}", now=now
        )
    return node


def do_uncordon(*, node: Node, user, reason: str, now=None, actor_name: str = "") -> Node:
    """`actor_name`: who acts when it is not `user` (a maintenance window's end). A node that is
    neither cordoned nor draining is left as it is, with no event: uncordoning is idempotent."""
    now = now or timezone.now()
    with transaction.atomic():
        written = _set_admin_state(
            node,
            AdminState.NONE,
            reason=reason,
            now=now,
            unless=AdminState.NONE,
            admin_reason="",
            reclaim_deadline=None,
        )
        if not written:
            return node
        record_node_event(
            node,
            actor=user,
            actor_name=actor_name or user.get_username(),
            reason="UNCORDONED",
            message=f"uncordoned: {reason}",
            now=now,
        )
    return node


def do_drain(
    *, node: Node, user, reason: str, wait: bool = False, deadline=None, now=None, actor_name: str = ""
) -> int:
    """No new work; unless `wait`, running tasks are stopped gracefully (each job's grace
    period, or until `deadline` for a spot reclaim) and requeued elsewhere. Returns how many
    jobs were signalled. `actor_name`: who acts when it is not `user` (a maintenance window)."""
    now = now or timezone.now()
    actor_name = actor_name or user.get_username()
    data = {"wait": wait, "deadline": deadline.isoformat() if deadline else None}

    def recorded(message: str) -> None:
        record_node_event(
            node, actor=user, actor_name=actor_name, reason="DRAINING", message=message, data=data, now=now
        )

    with transaction.atomic():
        # Draining already for the same reason (and deadline): nothing written or recorded; a
        # drain without `wait` still stops what a drain with it left running.
        written = _set_admin_state(
            node,
            AdminState.DRAINING,
            reason=reason,
            now=now,
            unless_so=True,
            admin_reason=reason,
            reclaim_deadline=deadline,
        )
        if written:
            recorded(f"draining{' (running tasks may finish)' if wait else ''}: {reason}")
        if wait:
            return 0
        signalled = _stop_for_drain(node, reason=reason, deadline=deadline, now=now, actor_name=actor_name)
        if signalled and not written:  # a drain again: its stops are in the node's history too
            recorded(f"draining: {reason}: stopping the {signalled} job(s) a drain with wait left running")
    return signalled


def _stop_for_drain(node: Node, *, reason: str, deadline, now, actor_name: str) -> int:
    """Ask every job on the draining node to stop (its grace, or until a spot `deadline`);
    returns how many were asked (not already stopping)."""
    jobs = Task.objects.filter(node=node, state__in=ON_NODE).values_list("job_id", "job__grace_period_seconds")
    signalled = 0
    for job_id, grace in sorted(set(jobs)):
        grace_s = grace if deadline is None else max(0, min(grace, int((deadline - now).total_seconds()) - 5))
        signalled += bool(
            do_request_stop(
                job_id=job_id,
                reason=StopReason.DRAIN,
                grace_s=grace_s,
                now=now,
                message=f"node {node.name} is draining: {reason}",
                actor_name=actor_name,
            )
        )
    return signalled


def do_reclaim_notice(*, node: Node, user, deadline, reason: str = "", now=None) -> int:
    """A spot node will be taken back at `deadline`: checkpoint now, drain, and requeue what
    is still there at the deadline (the leader's sweep does that)."""
    now = now or timezone.now()
    why = reason or f"spot reclaim at {deadline.isoformat()}"
    return do_drain(node=node, user=user, reason=why, deadline=max(deadline, now + timedelta(seconds=1)), now=now)


HEALTH_ACTOR = "health"
CORDONED_BY_FAULT = "cordoned automatically: {reason}"
TAKEN_FROM_WINDOW = " (it was {state} for maintenance #{window}; the window's end leaves it cordoned)"
NOT_CORDONED = (
    "not cordoned automatically: {reason}; it is {state} already{why}, and an uncordon puts it back in service"
    " with this fault"
)


def do_health_cordon(*, node: Node, reason: str, data: dict, now) -> bool:
    """A fault cordons the node and its running jobs are stopped gracefully and requeued, as a
    drain does: the node is not to be trusted with them. Called inside the transaction that
    claimed the fault (`do_claim_health_marks`), so a fault reported twice acts once. What the
    node's admin state is, read under the row's lock, decides:
    1. none: the node is cordoned with the fault as its reason;
    2. a maintenance window's drain, which the window's end would lift: cordoned with the fault
       as its reason, which takes the node over from the window (its end leaves it for an admin);
    3. an admin's cordon or drain, or an earlier fault's cordon: left as it is (an admin who
       lifts it is not overruled); the event says the fault was found and no cordon added.
    Each write is conditional on the admin state and reason read. Returns whether it cordoned."""
    node.refresh_from_db(from_queryset=Node.objects.select_for_update(no_key=True), fields=NODE_STATE)
    held, held_for, window = node.admin_state, node.admin_reason, _window_holding(node)
    cordoned = _cordon_for_fault(node, reason=reason, window=window, now=now)
    if cordoned:
        taken = TAKEN_FROM_WINDOW.format(state=held, window=window.pk) if window else ""
        message = CORDONED_BY_FAULT.format(reason=reason) + taken
    else:
        message = NOT_CORDONED.format(reason=reason, state=held, why=f" ({held_for})" if held_for else "")
    record_node_event(
        node,
        actor_name=HEALTH_ACTOR,
        reason="CORDONED" if cordoned else "HEALTH",
        message=message,
        data={**data, "window": window.pk} if window else data,
        now=now,
    )
    _stop_jobs(
        node, Task.objects.filter(node=node, state__in=ON_NODE), why=f"node {node.name} failed: {reason}", now=now
    )
    return cordoned


def _cordon_for_fault(node: Node, *, reason: str, window: MaintenanceWindow | None, now) -> bool:
    """do_health_cordon's write: from no admin state, or from `window`'s drain, conditional on
    the state (and the window's reason) read."""
    if node.admin_state != AdminState.NONE and window is None:
        return False
    only_reason = window.drain_reason if window else None
    return bool(
        _set_admin_state(
            node,
            AdminState.CORDONED,
            reason=reason,
            now=now,
            only_from=node.admin_state,
            only_reason=only_reason,
            admin_reason=reason,
        )
    )


def _window_holding(node: Node) -> MaintenanceWindow | None:
    """The active maintenance window whose drain holds the node (its end would uncordon it)."""
    if node.admin_state == AdminState.NONE:
        return None
    active = MaintenanceWindow.objects.filter(state=MaintenanceState.ACTIVE).order_by("id")
    return next((window for window in active if window.holds(node)), None)


def do_claim_health_marks(*, node: Node, before: dict, after: dict, excluded: dict[int, str] | None = None) -> bool:
    """Record the faults acted on (and the GPUs they exclude), only while the node's marks are
    still `before`: of two heartbeats reporting the same fault, one claims it. The caller acts
    on the fault in the same transaction, and only when this returns True."""
    fields, rows = {"health_marks": after}, Node.objects.filter(pk=node.pk, health_marks=before)
    if excluded:  # and only while the exclusions are those read (an admin may be putting some back)
        fields["excluded_gpus"] = {**node.excluded_gpus, **{str(index): why for index, why in excluded.items()}}
        rows = rows.filter(excluded_gpus=node.excluded_gpus)
    claimed = rows.update(**fields)
    if claimed:
        node.health_marks = after
        node.excluded_gpus = fields.get("excluded_gpus", node.excluded_gpus)
    return bool(claimed)


def do_exclude_gpus(*, node: Node, excluded: dict[int, str], now) -> int:
    """GPUs claimed as faulty (`do_claim_health_marks` wrote them): audited, and the jobs on
    them stopped gracefully and requeued. The node's other GPUs stay schedulable. Returns how
    many jobs were stopped."""
    listed = "; ".join(f"GPU {index}: {why}" for index, why in sorted(excluded.items()))
    record_node_event(
        node,
        actor_name=HEALTH_ACTOR,
        reason="GPU_EXCLUDED",
        message=f"excluded from placement: {listed}",
        data={"gpus": sorted(excluded)},
        now=now,
    )
    notify.wake_scheduler("node")
    on_gpus = [
        task.pk
        for task in Task.objects.filter(node=node, state__in=ON_NODE).only("gpu_indices")
        if set(task.gpu_indices) & set(excluded)
    ]
    return _stop_jobs(node, Task.objects.filter(pk__in=on_gpus), why=f"a GPU of {node.name} failed: {listed}", now=now)


def _stop_jobs(node: Node, tasks, *, why: str, now) -> int:
    """Each job with a task in `tasks` stops as a drain stops it (its grace period, requeued
    without spending a retry)."""
    jobs = sorted(set(tasks.values_list("job_id", "job__grace_period_seconds")))
    return sum(
        bool(
            do_request_stop(
                job_id=job_id, reason=StopReason.DRAIN, grace_s=grace, now=now, message=why, actor_name=HEALTH_ACTOR
            )
        )
        for job_id, grace in jobs
    )


def do_include_gpus(*, node: Node, user, gpus: list[int], reason: str, now=None) -> list[int]:
    """An admin puts excluded GPUs back into placement (all of them when `gpus` is empty).
    Conditional on the exclusions read, so a concurrent exclusion is not lost. Returns the GPUs
    put back."""
    now = now or timezone.now()
    with transaction.atomic():
        before = Node.objects.select_for_update(no_key=True).values_list("excluded_gpus", flat=True).get(pk=node.pk)
        back = sorted(int(i) for i in before if not gpus or int(i) in gpus)
        if not back:
            return []
        left = {index: why for index, why in before.items() if int(index) not in back}
        Node.objects.filter(pk=node.pk).update(excluded_gpus=left)
        node.excluded_gpus = left
        record_node_event(
            node,
            actor=user,
            actor_name=user.get_username(),
            reason="GPU_INCLUDED",
            message=f"GPU {', '.join(map(str, back))} back in placement: {reason}",
            data={"gpus": back},
            now=now,
        )
    notify.wake_scheduler("node")
    return back
