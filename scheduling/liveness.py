"""When each node was last heard from.

Two records, so that Redis stays a cache:
- Redis (a sorted set: node -> last heartbeat), written on every heartbeat: the fresh one;
- Postgres (`Node.last_heartbeat_at`), written in batches: each web process remembers the
  nodes it answered and writes them every MLQ_LIVENESS_FLUSH_S (every second while Redis
  fails), never a write per heartbeat: at most FLUSH_CHUNK nodes a statement, the rest with the
  heartbeat batches right after.
The leader reads both and takes the later time. Redis losing its data, or being down, then
costs nothing but freshness, and the leader restarts its failure-detection clocks when it
notices (scheduling/leader/failures.py). Embedded (no Redis), the local file cache stands in for Redis.

A Redis that fails is not asked again for a few seconds (a circuit breaker): a heartbeat
must not wait for a connect timeout each time."""

import itertools
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection

from mlqueue.breaker import RedisBreaker
from scheduling.models import Node

log = logging.getLogger(__name__)

ZSET = "mlq:heartbeats"
# Set by the leader when it first reads this Redis: missing means Redis lost its data.
SENTINEL = "mlq:heartbeats:since"
KEY = "mlq:hb:{}"
TTL_S = 24 * 3600
FAST_FLUSH_S = 1.0
# A flush rides on the heartbeat batch that finds it due (agents/heartbeats.py), and every
# heartbeat the process holds waits for that batch. One statement for all 1,250 nodes a web
# process answers, every 10 s, made the socket heartbeats' p99 spike every 10 s (BENCHMARKS.md,
# "the liveness flush"), so: at most this many nodes a statement, the rest with the next batches.
FLUSH_CHUNK = 250
FLUSH_SQL = f"""UPDATE {Node._meta.db_table} AS n SET last_heartbeat_at = v.at
FROM (VALUES {{rows}}) AS v(name, at)
WHERE n.name = v.name AND (n.last_heartbeat_at IS NULL OR n.last_heartbeat_at < v.at)
"""


_redis = RedisBreaker("liveness (heartbeats go to Postgres meanwhile)")


def _first_flush() -> float:
    """Half to one interval from now: web processes started together do not all write at once."""
    return time.monotonic() + settings.MLQ_LIVENESS_FLUSH_S * random.uniform(0.5, 1.0)


@dataclass
class Pending:
    """Heartbeats answered by this process, not yet written to Postgres (in the order first
    heard since the last write: the oldest are written first)."""

    heard: dict[str, float] = field(default_factory=dict)
    next_flush: float = field(default_factory=_first_flush)
    lock: threading.Lock = field(default_factory=threading.Lock)


_pending = Pending()


def record(node_name: str, at: float) -> None:
    """A heartbeat from `node_name` at `at` (epoch seconds). Never raises for Redis."""
    record_many({node_name: at})


def record_many(heard: dict[str, float]) -> None:
    """Heartbeats answered together (node -> epoch seconds): one Redis command for them all."""
    if not heard:
        return
    with _pending.lock:
        for name, at in heard.items():
            _pending.heard[name] = max(at, _pending.heard.get(name, at))
    _record_fresh(heard)
    if time.monotonic() >= _pending.next_flush:
        flush(limit=FLUSH_CHUNK)


def _record_fresh(heard: dict[str, float]) -> None:
    if not settings.REDIS_URL:
        cache.set_many({KEY.format(name): at for name, at in heard.items()}, TTL_S)
        return
    client = _redis.client()
    if client is None:
        return
    try:
        client.zadd(ZSET, heard)
    except redis.RedisError as exc:
        _redis.failed(exc)
    else:
        _redis.worked()


def flush(limit: int | None = None) -> int:
    """Write the heartbeats heard since the last flush in one statement: all of them, or with
    `limit` at most that many, the others left due for the next batch to write. On a database
    error keep them for the next try. Returns how many nodes were written."""
    with _pending.lock:
        heard, now = _take(limit), time.monotonic()
        later = now + (FAST_FLUSH_S if _redis.failing else settings.MLQ_LIVENESS_FLUSH_S)
        _pending.next_flush = now if _pending.heard else later
    if not heard:
        return 0
    rows = ", ".join(["(%s, %s::timestamptz)"] * len(heard)) if connection.vendor == "postgresql" else None
    try:
        if rows is None:
            _flush_each(heard)
        else:
            params = [value for name, at in heard.items() for value in (name, _moment(at))]
            with connection.cursor() as cursor:
                cursor.execute(FLUSH_SQL.format(rows=rows), params)
    except DatabaseError as exc:
        log.warning("could not write %d heartbeats to Postgres (%s); keeping them for the next try", len(heard), exc)
        with _pending.lock:
            for name, at in heard.items():
                _pending.heard[name] = max(at, _pending.heard.get(name, at))
            _pending.next_flush = later  # not again with the very next batch
        return 0
    return len(heard)


def _take(limit: int | None) -> dict[str, float]:
    """The heartbeats to write now, out of `_pending` (whose lock the caller holds)."""
    if limit is None or len(_pending.heard) <= limit:
        heard, _pending.heard = _pending.heard, {}
        return heard
    return {name: _pending.heard.pop(name) for name in list(itertools.islice(_pending.heard, limit))}


def _flush_each(heard: dict[str, float]) -> None:
    """SQLite (embedded, one machine): no VALUES join in UPDATE; a few nodes at most."""
    for name, at in heard.items():
        Node.objects.filter(name=name).exclude(last_heartbeat_at__gte=_moment(at)).update(last_heartbeat_at=_moment(at))


def _moment(at: float) -> datetime:
    return datetime.fromtimestamp(at, tz=UTC)


@dataclass(frozen=True)
class Seen:
    """What the leader knows: node -> last heartbeat (epoch seconds), from Redis and Postgres
    together; whether Redis answered, and whether it had lost its data since the last read."""

    at: dict[str, float]
    redis_answered: bool
    redis_lost_data: bool


def last_seen(nodes: list[Node], *, now: float) -> Seen:
    """The later of Redis's and Postgres's record for each node (absent if neither has one)."""
    fresh, answered, lost = _fresh(nodes, now=now)
    at = {}
    for node in nodes:
        times = [t for t in (fresh.get(node.name), node.last_heartbeat_at and node.last_heartbeat_at.timestamp()) if t]
        if times:
            at[node.name] = max(times)
    return Seen(at, answered, lost)


def _fresh(nodes: list[Node], *, now: float) -> tuple[dict[str, float], bool, bool]:
    names = [node.name for node in nodes]
    if not settings.REDIS_URL:
        found = cache.get_many([KEY.format(name) for name in names]) if names else {}
        prefix = len(KEY.format(""))
        return {key[prefix:]: value for key, value in found.items()}, True, False
    client = _redis.client()
    if client is None:
        return {}, False, False
    if not names:
        return {}, True, False
    try:
        created, scores = client.pipeline(transaction=False).set(SENTINEL, now, nx=True).zmscore(ZSET, names).execute()
    except redis.RedisError as exc:
        _redis.failed(exc)
        return {}, False, False
    _redis.worked()
    return {name: score for name, score in zip(names, scores, strict=True) if score is not None}, True, bool(created)


def last_heard(names: list[str]) -> dict[str, float]:
    """node -> its last heartbeat (epoch seconds), for pages and tests."""
    nodes = list(Node.objects.filter(name__in=names))
    return last_seen(nodes, now=time.time()).at
