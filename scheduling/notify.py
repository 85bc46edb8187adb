"""After-commit notifications: wake the leader, and tell live views what changed.

Both are best effort: the leader also ticks every second, and pages re-read on reconnect.
While Redis fails, neither is tried for a few seconds at a time (mlqueue/breaker.py). Each runs
as a robust on_commit hook: one that raises is logged, never the caller's error once its rows
have committed (a submit answered 500 for a written job would be written again on a retry)."""

import re

import redis
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from redis.connection import parse_url

from mlqueue.breaker import RedisBreaker
from mlqueue.channel_layer import group_send_from_sync

WAKE_CHANNEL = "mlqueue:scheduler:wake"  # and REDIS_URL's database: see wake_channel()
JOBS_GROUP = "jobs"
_wakeups = RedisBreaker("scheduler wake-ups (the leader ticks meanwhile)")
_live_views = RedisBreaker("live views (pages re-read when they reconnect)")


def wake_scheduler(reason: str = "") -> None:
    """Ask the leader for a pass now (after the current transaction commits)."""
    transaction.on_commit(lambda: _publish(reason), robust=True)


def wake_channel() -> str:
    """The leader's wake-up channel. Redis's publish/subscribe ignores database numbers, so the
    name carries REDIS_URL's: two clusters (or two test workers) on one Redis server, each with
    a database of its own, do not wake each other's leader."""
    return f"{WAKE_CHANNEL}:{parse_url(settings.REDIS_URL).get('db', 0)}"


def _publish(reason: str) -> None:
    client = _wakeups.client()
    if client is None:
        return
    try:
        client.publish(wake_channel(), reason or "wake")
    except redis.RedisError as exc:
        _wakeups.failed(exc)
    else:
        _wakeups.worked()


def jobs_changed(job_ids, *, team_id: int | None = None) -> None:
    """Tell WebSocket views which jobs changed (after commit), with each job's team so a
    consumer can keep to what its user may see without a query. `team_id`: the team of all of
    them, where the caller knows it (a submit), saving the query that reads it."""
    ids = sorted(set(job_ids))
    if ids:
        transaction.on_commit(lambda: _send_changed(ids, team_id), robust=True)


def _send_changed(ids: list[int], team_id: int | None = None) -> None:
    from scheduling.models import Job

    if team_id is None:
        teams = dict(Job.objects.filter(pk__in=ids).values_list("id", "team_id"))
    else:
        teams = dict.fromkeys(ids, team_id)
    _group_send({"type": "jobs.changed", "jobs": [[job_id, teams.get(job_id)] for job_id in ids]})


def _group_send(message: dict, group: str = JOBS_GROUP) -> None:
    layer = get_channel_layer()
    if layer is None or not _live_views.allowed():
        return
    try:
        group_send_from_sync(layer, group, message)
    except Exception as exc:  # a broken channel layer must never fail a scheduler write
        _live_views.failed(exc)
    else:
        _live_views.worked()


def wake_agents(node_names, reason: str = "") -> None:
    """Nudge these nodes' agents to heartbeat now (after commit): new work or a signal."""
    names = sorted(set(node_names))
    if names:
        transaction.on_commit(lambda: _wake_agents(names, reason), robust=True)


def agent_group(node_name: str) -> str:
    """The channel group a node's agent listens on (agents/consumers.py joins it)."""
    return "agent." + re.sub(r"[^A-Za-z0-9\-_.]", "_", node_name)[:90]


def _wake_agents(names: list[str], reason: str) -> None:
    for name in names:
        _group_send({"type": "agent.wake", "reason": reason}, group=agent_group(name))
