"""The leader's failure detection, from heartbeat ages (never from one missed beat).

1. The clocks: a node's age is counted from its last heartbeat (Redis or Postgres, the later;
   scheduling/liveness.py), but never from before the detector's clocks were last restarted. They
   restart whenever the leader cannot trust the silence it sees: when it takes the lead, when
   it has not looked for a while (its own passes failed), when Redis stops answering or has
   lost its data, and when a full disruption ends. A restart only ever delays a verdict.
2. Full disruption: when most nodes (MLQ_FULL_DISRUPTION_SHARE, and at least
   MLQ_FULL_DISRUPTION_MIN_NODES) are silent at once, the fault is the control plane's, not
   theirs: no node is called LOST until enough are heard again (then the clocks restart).
3. SUSPECT after three missed heartbeats: nothing new is placed there.
4. LOST once the age passes the outage bound plus a margin: by then the agent has killed its
   own tasks (its lease is the bound, counted from before the heartbeat that renewed it; its
   tasks get SIGTERM at its end and SIGKILL a kill grace later, and its supervisors enforce it
   even if the agent is stuck), so failing them as INFRA and requeueing cannot run anything
   twice. The margin is never less than the kill grace and 2 s more, whatever is configured.
5. A spot node past its reclaim deadline: its remaining tasks are requeued.

The proof sketch is in the README ("Outages"): every time the leader counts from is at or
after the agent's last renewal, so the agent's deadline always comes first.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from agents.node.supervise import kill_grace
from scheduling import lifecycle, liveness, node_health, notify
from scheduling.fencing import fenced
from scheduling.models import FailureClass, Node, NodeState, StopReason, Task, TaskState
from scheduling.nodes import do_mark_health
from scheduling.states import ON_NODE
from teams.models import AuditEvent

log = logging.getLogger(__name__)


@dataclass
class Clocks:
    """The detector's memory between passes, in this leader process."""

    epoch: int | None = None
    since: float = 0.0  # epoch seconds: no age is counted from before this
    last_look: float | None = None
    redis_answered: bool = True
    disrupted: bool = False

    def restart(self, now: float, why: str) -> None:
        self.since = now
        log.warning("failure detection: clocks restarted at %.0f: %s", now, why)


CLOCKS = Clocks()


def detect(*, epoch: int, now) -> dict[str, int]:
    """One look at every READY or SUSPECT node; returns how many became SUSPECT, LOST, and
    how many tasks of reclaimed spot nodes were requeued."""
    nodes = list(Node.objects.filter(health__in=(NodeState.READY, NodeState.SUSPECT)))
    at = now.timestamp()
    seen = liveness.last_seen(nodes, now=at)
    _restart_if_untrustworthy(CLOCKS, epoch=epoch, now=at, seen=seen)
    _note_disruption(CLOCKS, _ages(nodes, seen, now=at), now=at)
    ages = _ages(nodes, seen, now=at)  # again: the end of a disruption restarts the clocks
    counts = {"suspect": 0, "lost": 0, "reclaimed": 0, "full_disruption": int(CLOCKS.disrupted)}
    for node in nodes:
        verdict = _verdict(node, ages[node.name], disrupted=CLOCKS.disrupted)
        if verdict == NodeState.LOST:
            counts["lost"] += _lose(node, ages[node.name], epoch=epoch, now=now)
        elif verdict == NodeState.SUSPECT:
            counts["suspect"] += _suspect(node, seen.at.get(node.name), epoch=epoch, now=now)
    counts["reclaimed"] = _requeue_reclaimed(epoch=epoch, now=now)
    return counts


def _ages(nodes: list[Node], seen: liveness.Seen, *, now: float) -> dict[str, float]:
    return {node.name: now - max(seen.at.get(node.name, CLOCKS.since), CLOCKS.since) for node in nodes}


def _restart_if_untrustworthy(clocks: Clocks, *, epoch: int, now: float, seen: liveness.Seen) -> None:
    if clocks.epoch != epoch:
        clocks.epoch, clocks.disrupted = epoch, False
        clocks.restart(now, f"this scheduler took the lead with epoch {epoch}")
    elif clocks.last_look is not None and now - clocks.last_look > settings.MLQ_SUSPECT_AFTER_S:
        clocks.restart(now, f"the leader had not looked for {now - clocks.last_look:.0f} s")
    if not seen.redis_answered and clocks.redis_answered:
        clocks.restart(now, "Redis does not answer: liveness from Postgres only")
    if seen.redis_lost_data:
        clocks.restart(now, "Redis has lost its data (restarted without persistence?)")
    clocks.redis_answered, clocks.last_look = seen.redis_answered, now


def _note_disruption(clocks: Clocks, ages: dict[str, float], *, now: float) -> None:
    silent = sum(age > settings.MLQ_SUSPECT_AFTER_S for age in ages.values())
    threshold = max(settings.MLQ_FULL_DISRUPTION_MIN_NODES, settings.MLQ_FULL_DISRUPTION_SHARE * len(ages))
    disrupted = bool(ages) and silent >= threshold
    if disrupted and not clocks.disrupted:
        log.error(
            "full disruption: %d of %d nodes silent at once; the fault is ours, no node is called LOST "
            "until they are heard again",
            silent,
            len(ages),
        )
    elif clocks.disrupted and not disrupted:
        clocks.restart(now, f"full disruption over ({silent} of {len(ages)} nodes still silent)")
    clocks.disrupted = disrupted


def lost_margin() -> float:
    """The margin after the bound: the configured one, but never one the agents' kill grace
    (SIGTERM at the lease's end, SIGKILL up to 5 s later) could outlast."""
    return max(settings.MLQ_LOST_MARGIN_S, kill_grace(settings.MLQ_OUTAGE_BOUND_S) + 2)


def _verdict(node: Node, age: float, *, disrupted: bool) -> str | None:
    if age > settings.MLQ_OUTAGE_BOUND_S + lost_margin() and not disrupted:
        return NodeState.LOST
    if age > settings.MLQ_SUSPECT_AFTER_S and node.health == NodeState.READY:
        return NodeState.SUSPECT
    return None


def _suspect(node: Node, last: float | None, *, epoch: int, now) -> int:
    """The reason names when the silence began: it stays on the node while the node is SUSPECT,
    and "for 16 s", read a minute later, told an admin it had missed one heartbeat. `last`: its
    last heartbeat as liveness has it (None: unknown, Redis lost it; then when the clocks
    restarted, the last moment this scheduler can vouch for)."""
    if last is not None:
        message = f"no heartbeat since {_clock(last)}"
    else:
        message = f"no heartbeat heard since {_clock(CLOCKS.since)} (when this scheduler began watching)"
    with fenced(epoch):
        return int(do_mark_health(node, NodeState.SUSPECT, now=now, message=message))


def _clock(at: float) -> str:
    return f"{datetime.fromtimestamp(at, UTC):%H:%M:%S} UTC"


def _lose(node: Node, age: float, *, epoch: int, now) -> int:
    message = (
        f"no heartbeat for {age:.0f} s (outage bound {settings.MLQ_OUTAGE_BOUND_S:g} s + margin {lost_margin():g} s)"
    )
    if not node.token_digest and _token_reset_last(node):  # the job's timeline did not say why (QA)
        message += "; an admin had reset its node token, and no agent has registered with a new one"
    with fenced(epoch):
        if not do_mark_health(node, NodeState.LOST, now=now, message=message):
            return 0  # it heartbeat in the meantime
        _fail_tasks_on(node, "", f"node {node.name} was lost: {message}", now)
    return 1


def _token_reset_last(node: Node) -> bool:
    """Whether the node's last registration event is an admin's token reset (agents/services.py)."""
    last = (
        AuditEvent.objects.filter(node=node, reason__in=("REGISTERED", "NODE_TOKEN_RESET"))
        .order_by("-created_at", "-id")
        .values_list("reason", flat=True)
        .first()
    )
    return last == "NODE_TOKEN_RESET"


def _requeue_reclaimed(*, epoch: int, now) -> int:
    requeued = 0
    for node in Node.objects.filter(reclaim_deadline__lte=now, tasks__state__in=ON_NODE).distinct():
        with fenced(epoch):
            failed = _fail_tasks_on(node, StopReason.DRAIN, f"spot node {node.name} reclaimed", now)
        requeued += failed
    return requeued


def _fail_tasks_on(node: Node, stop_reason: str, message: str, now) -> int:
    """The node's active tasks fail as INFRA (their gangs' other ranks are stopped by the next
    sweep, and the whole gang is requeued)."""
    failed = unasked = 0
    for task in Task.objects.filter(node=node, state__in=ON_NODE):
        moved = lifecycle.transition_task(
            task,
            to_state=TaskState.FAILED,
            attempt=task.attempt,
            actor_name="scheduler",
            reason="NODE_LOST",
            message=message,
            now=now,
            failure_class=FailureClass.INFRA,
            exit_cause="node_lost",
            stop_reason=task.stop_reason or stop_reason,
        )
        failed += moved
        unasked += moved and not (task.stop_reason or stop_reason)
        notify.jobs_changed([task.job_id])
    node_health.note_infra_failures(node, unasked, now=now)  # a stop asked for is no fault of the node's
    return failed
