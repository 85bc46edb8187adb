"""What a heartbeat does: note the node alive (in the cache), apply what the agent says its
tasks are doing, and answer with its lease, new assignments, signals and stale attempts to
kill.

Heartbeats are the hottest path in the system (2,500 nodes every 5 s), so the common case, a
node whose tasks did not change, costs one indexed read: the node and its active tasks in a
single SQL statement. Postgres is written only when a task or the node changes state."""

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone
from prometheus_client import Counter
from rest_framework import exceptions

from agents import ingest
from agents.protocol import health_of, heartbeat_tasks
from mlqueue.api_errors import flatten_errors
from mlqueue.middleware import DATABASE_UNAVAILABLE, RETRY_AFTER_S, database_outages, is_database_unavailable
from mlqueue.parsers import BodyError
from scheduling import lifecycle, liveness, node_health, nodes, notify
from scheduling.assignments import assignment_env, checkpoint_dir, gangs_of
from scheduling.models import FailureClass, Node, NodeState, SchedulerLease, Task, TaskState
from teams.models import hash_token

log = logging.getLogger(__name__)
EPOCH_CACHE_S = 1.0
HEARTBEATS = Counter("mlqueue_heartbeats_total", "Agent heartbeats answered", ["transport"])


@dataclass(frozen=True, slots=True)
class TaskRow:
    job_id: int
    rank: int
    attempt: int
    state: str
    stop_signal: str
    stop_reason: str
    kill_at: datetime | None = None  # past it, SIGKILL: the agent keeps the deadline too


@dataclass
class NodeView:
    id: int
    name: str
    health: str
    tasks: list[TaskRow]


NODE_SQL = f"""
SELECT n.token_digest, n.id, n.name, n.health, t.job_id, t.rank, t.attempt, t.state, t.stop_signal, t.stop_reason,
       t.kill_at
FROM {Node._meta.db_table} n
LEFT JOIN {Task._meta.db_table} t ON t.node_id = n.id AND t.state IN ('ASSIGNED', 'RUNNING')
WHERE n.token_digest IN ({{digests}})
"""


def load(token_digest: str) -> NodeView | None:
    return load_many({token_digest}).get(token_digest)


def load_many(token_digests: set[str]) -> dict[str, NodeView]:
    """token digest -> the node holding it, with its active tasks, for those that match."""
    with connection.cursor() as cursor:
        cursor.execute(NODE_SQL.format(digests=", ".join(["%s"] * len(token_digests))), sorted(token_digests))
        rows = cursor.fetchall()
    found: dict[str, NodeView] = {}
    for digest, node_id, name, health, *task in rows:
        node = found.setdefault(digest, NodeView(node_id, name, health, []))
        if task[0] is not None:
            node.tasks.append(TaskRow(*task[:-1], kill_at=in_utc(task[-1])))
    return found


def in_utc(moment: datetime | None) -> datetime | None:
    """A time read by raw SQL, aware: SQLite's (make demo's store) comes back naive, in UTC, and
    subtracting it from now was a TypeError, a 500 for every heartbeat of a node with a stop
    asked: no stop reached its tasks (QA)."""
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def handle(name: str, authorization: str, data) -> dict:
    """One heartbeat, from the request's parts; raises DRF's exceptions for bad ones. Shared by
    the DRF view and the lean ASGI lane that serves heartbeats in production."""
    outcome = handle_many([Beat(name, bearer_digest(authorization), data)], transport="http")[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def bearer_digest(authorization: str) -> str:
    """The digest of the node token in an Authorization header (how tokens are stored)."""
    kind, _, raw = authorization.partition(" ")
    if kind.lower() != "bearer" or not raw.strip():
        raise exceptions.NotAuthenticated("send 'Authorization: Bearer <token>'.")
    return hash_token(raw.strip())


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat as it arrived: the node it is for, the digest of the token it came with
    (per request over HTTP, per connection over the agent's socket) and its body."""

    name: str
    token_digest: str
    data: object


def handle_many(beats: list[Beat], *, transport: str) -> list[dict | Exception]:
    """Heartbeats that arrived together (one HTTP request, or what the agents' sockets brought
    while the last batch ran), each answered or refused exactly as if alone: a reply, or the
    exception that refuses it (DRF's for a bad one). One SQL statement loads all their nodes,
    one Redis command records them alive. Raises only when that shared work fails (Postgres
    unreachable): then no heartbeat of the batch is answered."""
    found = load_many({beat.token_digest for beat in beats})
    checked = [_checked(beat, found.get(beat.token_digest)) for beat in beats]
    now = timezone.now()
    alive = [outcome for outcome in checked if not isinstance(outcome, Exception)]
    liveness.record_many({node.name: now.timestamp() for node, _, _ in alive})
    HEARTBEATS.labels(transport).inc(len(alive))
    answered, lease = set(), lease_terms(now) if alive else {}
    return [
        outcome if isinstance(outcome, Exception) else _answered(beat, *outcome, now, lease, answered)
        for beat, outcome in zip(beats, checked, strict=True)
    ]


def _checked(beat: Beat, node: NodeView | None) -> tuple[NodeView, list[dict], dict | None] | Exception:
    """The node, the tasks it reports and its health sample (None without one), or why the
    heartbeat is refused, in the order the agent API refuses: an unknown token (401), another
    node's name (403), a bad body (400)."""
    if node is None:
        return exceptions.AuthenticationFailed("invalid node token: register again.")
    if node.name != beat.name:
        return exceptions.PermissionDenied(f"this token belongs to node {node.name}; it cannot act for {beat.name}.")
    try:
        data, health = health_of(beat.data)
        return node, heartbeat_tasks(data), health
    except exceptions.ValidationError as exc:
        return exc


def _answered(
    beat: Beat, node: NodeView, tasks: list[dict], health: dict | None, now, lease: dict, answered: set
) -> dict | Exception:
    """The reply to one accepted heartbeat; an error in it refuses this one, not the batch. A
    node heard twice in one batch is read again for its second: the first may have changed it.
    A health sample whose fault cordoned the node or excluded a GPU reads it again too: the
    reply carries the stops the fault asked for."""
    try:
        if beat.token_digest in answered:
            node = load(beat.token_digest) or node
        answered.add(beat.token_digest)
        if node.health != NodeState.READY:
            nodes.note_alive(Node.objects.get(pk=node.id), now=now)
        if health is not None and node_health.receive(node.id, node.name, health, now=now):
            node = load(beat.token_digest) or node
        return reply(node, tasks, now, lease, reload=lambda: load(beat.token_digest))
    except Exception as exc:  # answered as the same error of a lone request would be
        return exc


def refused(exc: Exception, name: str) -> tuple[int, dict]:
    """The status and body that answer a heartbeat `exc` refused or failed, in the DRF view's
    error shape: the HTTP lane's answer (mlqueue/fastlane.py) and the socket's
    (agents/consumers.py) alike."""
    if isinstance(exc, BodyError):
        return 400, {"detail": str(exc), "fields": {exc.field: [exc.message]}}
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        first, messages = next(iter(fields.items()))
        return 400, {"detail": f"{first}: {messages[0]}", "fields": fields}
    if isinstance(exc, exceptions.APIException):
        return exc.status_code, {"detail": str(exc.detail)}
    if is_database_unavailable(exc):
        database_outages.note(exc)
        return 503, {"detail": DATABASE_UNAVAILABLE.format(seconds=RETRY_AFTER_S)}
    log.error("heartbeat from %s failed", name, exc_info=exc)
    return 500, {"detail": "internal error"}


_epoch = (0.0, 0)


def current_epoch() -> int:
    """The lease's epoch, read at most once a second per process."""
    global _epoch
    read_at, epoch = _epoch
    if time.monotonic() - read_at > EPOCH_CACHE_S:
        epoch = SchedulerLease.objects.values_list("epoch", flat=True).first() or 0
        _epoch = (time.monotonic(), epoch)
    return epoch


def apply_reported(node: NodeView, reported: list[dict], now) -> tuple[list[dict], bool]:
    """Record exits and starts the agent reports; fail what the server thinks runs here but
    the agent does not run (it restarted and lost it). Returns the attempts the agent runs that
    the server no longer assigns to it (it must kill them), and whether anything changed."""
    current = {(t.job_id, t.rank): t for t in node.tasks}
    held = {(item["job_id"], item["rank"], item["attempt"]) for item in reported}
    changed = _fail_forgotten(node, current, held, now)
    stale = []
    for item in reported:
        key, attempt = (item["job_id"], item["rank"]), item["attempt"]
        task = current.get(key)
        if item["state"] == "exited":
            if task is not None and task.attempt == attempt:
                ingest.apply_event(node.name, {**item, "type": "exited"}, now=now)
                changed = True
        elif task is None or task.attempt != attempt:
            stale.append({"job_id": key[0], "rank": key[1], "attempt": attempt})
        elif item["state"] == "running" and task.state == TaskState.ASSIGNED:
            ingest.apply_event(node.name, {**item, "type": "started"}, now=now)
            changed = True
    return stale, changed


def _fail_forgotten(node: NodeView, current: dict, held: set, now) -> bool:
    """What the server has on this node that the agent does not hold: a RUNNING task it lost
    (it restarted), or an ASSIGNED one already asked to stop, which no reply offers any more
    (an agent that started it, then restarted before reporting the start, would otherwise leave
    it ASSIGNED for good). The agent reports every task it holds, so neither runs there."""
    forgotten = [
        t
        for t in current.values()
        if (t.job_id, t.rank, t.attempt) not in held and (t.state == TaskState.RUNNING or t.stop_reason)
    ]
    lost = 0
    for row in forgotten:
        if row.state == TaskState.RUNNING and not row.stop_reason:
            lost += 1
            task = Task.objects.get(job_id=row.job_id, rank=row.rank)
            lifecycle.transition_task(
                task,
                to_state=TaskState.FAILED,
                attempt=row.attempt,
                actor_name=f"agent:{node.name}",
                reason="AGENT_LOST_TASK",
                now=now,
                message=f"rank {row.rank} is no longer running on {node.name} (agent restarted?)",
                failure_class=FailureClass.INFRA,
            )
        else:  # a stop was asked for: it ends as that stop says (a preemption stays one)
            ingest.apply_event(
                node.name,
                {
                    "type": "exited",
                    "job_id": row.job_id,
                    "rank": row.rank,
                    "attempt": row.attempt,
                    "exit_code": None,
                    "signal": "",
                    "cause": "lost",
                },
                now=now,
            )
        notify.wake_scheduler("lost task")
    if lost:
        node_health.note_infra_failures(Node.objects.get(pk=node.id), lost, now=now)
    return bool(forgotten)


def lease_terms(now) -> dict:
    """What every reply of a batch answered at `now` says alike: the lease, the interval, the
    epoch. Worked out once a batch, not once a heartbeat."""
    lease_s = settings.MLQ_OUTAGE_BOUND_S
    return {
        "lease_s": lease_s,
        "lease_until": (now + timedelta(seconds=lease_s)).isoformat(),
        "heartbeat_interval_s": settings.MLQ_HEARTBEAT_INTERVAL_S,
        "highest_epoch": current_epoch(),
    }


def reply(node: NodeView, reported: list[dict], now, lease: dict, *, reload) -> dict:
    stale, changed = apply_reported(node, reported, now)
    if changed:
        node = reload()
    known = {(item["job_id"], item["rank"], item["attempt"]) for item in reported}
    new = [
        t
        for t in node.tasks
        if t.state == TaskState.ASSIGNED and not t.stop_reason and (t.job_id, t.rank, t.attempt) not in known
    ]
    return {
        **lease,
        "assignments": assignments(node, new),
        "signals": [
            {
                "job_id": t.job_id,
                "rank": t.rank,
                "attempt": t.attempt,
                "signal": t.stop_signal,
                "reason": t.stop_reason,
                # Seconds to SIGKILL: the agent sends it itself when no later reply does (QA: with
                # no scheduler running, a draining job's processes outlived their deadline).
                "kill_in_s": None if t.kill_at is None else max(0.0, (t.kill_at - now).total_seconds()),
            }
            for t in node.tasks
            if t.stop_signal
        ],
        "kill": stale,
    }


def assignments(node: NodeView, rows: list[TaskRow]) -> list[dict]:
    if not rows:
        return []
    tasks = Task.objects.filter(node_id=node.id, state=TaskState.ASSIGNED).select_related(
        "job", "job__owner", "job__parent"
    )
    wanted = {(r.job_id, r.rank, r.attempt) for r in rows}
    chosen = [t for t in tasks if (t.job_id, t.rank, t.attempt) in wanted]
    gangs = gangs_of({t.job_id for t in chosen})  # one query, not one per task
    return [assignment(t, gang=gangs.get(t.job_id)) for t in chosen]


def assignment(task: Task, *, gang: list[Task] | None = None) -> dict:
    job = task.job
    gang = gang if gang is not None else gangs_of([job.pk]).get(job.pk, [])
    rank0 = next((t for t in gang if t.rank == 0), None)
    master = rank0.node.address or rank0.node.name if rank0 and rank0.node else ""
    return {
        "job_id": job.pk,
        "rank": task.rank,
        "attempt": task.attempt,
        "epoch": task.epoch,
        "owner": job.owner.get_username(),  # where the site maps owners to UIDs, the task runs as its owner
        "task_slot": job.run_slot,  # else as the pooled UID of this slot: every rank and attempt alike
        "command": job.command,
        "image": job.image,
        "gpu_indices": task.gpu_indices,
        "cpus": job.cpu_per_rank,
        "memory_gb": job.memory_per_rank_gb,
        "grace_period_seconds": job.grace_period_seconds,
        "checkpoint_dir": checkpoint_dir(job),
        "env": assignment_env(task, job=job, master_node=master, gang=gang),
    }
