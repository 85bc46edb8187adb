"""Socket heartbeats answered in batches, as a database commits in groups.

A web process holds the sockets of many agents. The first heartbeat to arrive opens a batch,
which waits MLQ_HEARTBEAT_BATCH_WAIT_S (10 ms) for company, then answers all that came with
one thread hop, one SQL statement and one Redis command (agents.heartbeats.handle_many)
instead of one each; those that arrive meanwhile wait for the next batch. A batch's fixed cost
(the hop, the pooled connection's check, the round trips) is most of a lone heartbeat's, so the
busier the server, the less each heartbeat costs (in-process: 0.4-0.5 ms of CPU alone, 30-40 µs
each in a batch of 200). 10 ms is nothing to a heartbeat: one every 5 s, a lease of minutes.

Sockets opening are looked up the same way: a restart of the web tier brings 2,500 agents'
sockets back within seconds, and each looked up alone (a thread hop and a statement each, one
at a time) took longer than the agents' handshake timeout, so they gave up and came back to
be looked up again; together, a batch's one statement finds all their nodes.

Batches run one at a time per event loop (one per daphne process) and per kind of work, and
hold at most MLQ_HEARTBEAT_BATCH_MAX requests; 1 turns batching off (each alone, as over HTTP)."""

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings
from prometheus_client import Histogram

from agents.heartbeats import Beat, handle_many
from scheduling.models import Node

HEARTBEATS, SOCKETS = "heartbeats", "sockets"  # the kinds of work batched
BATCH_SIZE = Histogram(
    "mlqueue_heartbeat_batch_size",
    "Heartbeats (or sockets opening) from agents answered together",
    ["work"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
# Where a socket heartbeat's time goes, to tell a slow statement from a busy event loop.
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
BATCH_WAIT = Histogram(
    "mlqueue_heartbeat_batch_wait_seconds",
    "From a batch's oldest request arriving to the batch being answered",
    ["work"],
    buckets=SECONDS,
)
BATCH_SECONDS = Histogram(
    "mlqueue_heartbeat_batch_seconds",
    "A batch's own work in its thread (heartbeats: the statement, the Redis command, the replies)",
    ["work"],
    buckets=SECONDS,
)
LOOP_LAG = Histogram(
    "mlqueue_event_loop_lag_seconds",
    "How late the web process's event loop woke a batch from its wait (other work held the loop)",
    buckets=SECONDS,
)


@database_sync_to_async
def _answer_heartbeats(beats: list[Beat]) -> list[dict | Exception]:
    """Each heartbeat's reply or refusal; the batch's shared failure (Postgres unreachable)
    refuses them all with it."""
    with BATCH_SECONDS.labels(HEARTBEATS).time():
        try:
            return handle_many(beats, transport="socket")
        except Exception as exc:  # answered as a lone heartbeat's would be (fastlane.refused)
            return [exc] * len(beats)


@database_sync_to_async
def _find_owners(digests: list[str]) -> list[str | None | Exception]:
    """The name of the node holding each token digest (None: no node holds it); the batch's
    shared failure (Postgres unreachable) for each when the statement fails."""
    with BATCH_SECONDS.labels(SOCKETS).time():
        try:
            found = dict(Node.objects.filter(token_digest__in=set(digests)).values_list("token_digest", "name"))
        except Exception as exc:  # each socket refused as a lone lookup's would be
            return [exc] * len(digests)
        return [found.get(digest) for digest in digests]


@dataclass
class _Queue:
    work: str
    answer: Callable[[list], Awaitable[list]]
    waiting: list[tuple[object, asyncio.Future, float]] = field(default_factory=list)
    draining: asyncio.Task | None = None

    async def drain(self) -> None:
        """Answer what waits, a batch at a time. Every request taken into a batch is answered:
        with its outcome, or with the exception that kept the batch from being answered (the
        thread hop itself failing); if the drain is cancelled (the loop closing), its waiters
        are cancelled with it rather than left waiting for ever."""
        batch = []
        try:
            while self.waiting:
                size = max(1, settings.MLQ_HEARTBEAT_BATCH_MAX)
                if size > 1 and len(self.waiting) < size:
                    await _wait(settings.MLQ_HEARTBEAT_BATCH_WAIT_S)
                batch, self.waiting = self.waiting[:size], self.waiting[size:]
                BATCH_SIZE.labels(self.work).observe(len(batch))
                BATCH_WAIT.labels(self.work).observe(time.monotonic() - batch[0][2])
                try:
                    outcomes = await self.answer([request for request, _, _ in batch])
                except Exception as exc:  # each request refused with the batch's failure
                    outcomes = [exc] * len(batch)
                for (_, future, _), outcome in zip(batch, outcomes, strict=True):
                    if not future.done():  # its socket may have closed meanwhile
                        future.set_result(outcome)
                batch = []
        finally:
            self.draining = None
            for _, future, _ in batch:  # cancelled mid-batch
                future.cancel()


async def _wait(seconds: float) -> None:
    """Sleep `seconds`, noting how much later than that the loop woke this task."""
    began = time.monotonic()
    await asyncio.sleep(seconds)
    LOOP_LAG.observe(max(0.0, time.monotonic() - began - seconds))


_ANSWERS = {HEARTBEATS: _answer_heartbeats, SOCKETS: _find_owners}
_queues: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Queue]]" = weakref.WeakKeyDictionary()


async def _in_next_batch(work: str, request):
    loop = asyncio.get_running_loop()
    queues = _queues.setdefault(loop, {})
    queue = queues.get(work) or queues.setdefault(work, _Queue(work, _ANSWERS[work]))
    future = loop.create_future()
    queue.waiting.append((request, future, time.monotonic()))
    if queue.draining is None:
        queue.draining = loop.create_task(queue.drain())
    return await future


async def answer_heartbeat(beat: Beat) -> dict | Exception:
    """The reply to `beat`, or the exception that refuses it, from the next batch."""
    return await _in_next_batch(HEARTBEATS, beat)


async def socket_owner(token_digest: str) -> str | None | Exception:
    """The name of the node whose token this is (None: no node's), or the exception that kept
    the batch from finding out, from the next batch of sockets opening."""
    return await _in_next_batch(SOCKETS, token_digest)
