"""`GET /api/v1/jobs/{id}/logs?follow=1`: one rank's log attempt as server-sent events.

Events: `log` (data: {"attempt", "offset", "next_offset", "text"}, id: the offset after it, so a client
resumes with ?offset= or Last-Event-ID, which wins), then one `end` (data: {"next_offset", "state",
"attempt"}) once the attempt is over: its task ended, a newer attempt started, or the job
finished. A `: keep-alive` comment every MLQ_LOG_FOLLOW_HEARTBEAT_S; the stream closes itself
after the `end`, when the client goes, or after MLQ_LOG_FOLLOW_MAX_S (the client resumes).

New lines are found by polling every MLQ_LOG_FOLLOW_POLL_S (poll_once): one query on the chunk
table's unique index (job, rank, attempt, stream, offset) and, when it found nothing, one on the
task (job, rank) for the end; after each poll the stream gives its database connection back to
the pool, so open streams do not use up MLQ_DB_POOL_MAX. Measured on Postgres (a job of 8 ranks x
5,000 chunks): each query an index scan of about 0.03 ms in Postgres, about 0.4-0.5 ms of the
web process's time through the ORM; a quiet stream's poll, connection given back to the pool
included, about 1.2 ms a second (7 ms with MLQ_DB_POOL=0, which reconnects for each poll).
Each open stream also keeps one idle thread of its web process (Django runs a request's
database calls in a thread of its own).
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from mlqueue.middleware import is_database_unavailable
from scheduling.models import Task, TaskLog
from scheduling.states import ENDED, JOB_FINISHED

CONTENT_TYPE = "text/event-stream"


def read_log(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> tuple[str, int]:
    """The attempt's text from `offset` up to its first gap (later chunks have not arrived yet),
    and the offset after it."""
    text, end = "", offset
    logged = TaskLog.objects.filter(job_id=job_id, rank=rank, stream=stream, attempt=attempt)
    # An offset inside a chunk (a client resuming where it had read to) starts in that chunk:
    # it read nothing at all before, whatever came after.
    inside = logged.filter(offset__lt=offset).order_by("-offset").values_list("offset", "text").first()
    if inside is not None and inside[0] + len(inside[1]) > offset:
        text, end = inside[1][offset - inside[0] :], inside[0] + len(inside[1])
    chunks = logged.filter(offset__gte=end)
    for chunk_offset, chunk in chunks.order_by("offset").values_list("offset", "text"):
        if chunk_offset != end:
            break
        text += chunk
        end += len(chunk)
    return text, end


def latest_attempt(job_id: int, rank: int, stream: str) -> int:
    """The attempt the log shows by default: the newest with a chunk, or the task's own, or 1."""
    logged = (
        TaskLog.objects.filter(job_id=job_id, rank=rank, stream=stream)
        .order_by("-attempt")
        .values_list("attempt", flat=True)
        .first()
    )
    started = Task.objects.filter(job_id=job_id, rank=rank).values_list("attempt", flat=True).first()
    return max(logged or 0, started or 0, 1)


def attempt_over(job_id: int, rank: int, attempt: int) -> tuple[bool, str | None]:
    """Whether `attempt` is over (its task ended or moved on, or the job finished), and its task's
    state (None for a rank the job does not have: nothing will come, so it is over too)."""
    row = Task.objects.filter(job_id=job_id, rank=rank).values_list("attempt", "state", "job__state").first()
    if row is None:
        return True, None
    task_attempt, state, job_state = row
    return task_attempt > attempt or (task_attempt == attempt and state in ENDED) or job_state in JOB_FINISHED, state


def event(name: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data)}\n\n"


class Unreachable(Exception):
    """Postgres cannot be reached: the stream closes, and its client resumes from the last id."""


def between_polls(query):
    """`query`, then its connection given back (to the pool): an open stream holds none between
    its polls, so a web process's pool (MLQ_DB_POOL_MAX) does not bound how many may be open."""

    def run(*args):
        try:
            return query(*args)
        except (OperationalError, InterfaceError) as error:
            if is_database_unavailable(error):
                raise Unreachable from error
            raise
        finally:
            if not connection.in_atomic_block:  # a transaction around the request (a test's) stays whole
                connection.close()

    return sync_to_async(run)


async def follow_log(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> AsyncIterator[str]:
    try:
        async for item in _follow(job_id, rank, attempt, stream, offset):
            yield item
    except Unreachable:
        return


def poll_once(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> tuple[str, int, bool, str | None]:
    """What is new from `offset`, and, when nothing is, whether the attempt is over (then with what
    landed between the read and the state: its last chunks). (text, next offset, over, state)."""
    text, end = read_log(job_id, rank, attempt, stream, offset)
    if text:
        return text, end, False, None
    over, state = attempt_over(job_id, rank, attempt)
    if over:
        text, end = read_log(job_id, rank, attempt, stream, offset)
    return text, end, over, state


async def _follow(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> AsyncIterator[str]:
    poll = between_polls(poll_once)
    every, heartbeat = settings.MLQ_LOG_FOLLOW_POLL_S, settings.MLQ_LOG_FOLLOW_HEARTBEAT_S
    deadline = time.monotonic() + settings.MLQ_LOG_FOLLOW_MAX_S
    quiet_since = time.monotonic()
    yield f"retry: {int(every * 1000) + 1000}\n\n"
    while time.monotonic() < deadline:
        text, end, over, state = await poll(job_id, rank, attempt, stream, offset)
        if text:
            yield event("log", {"attempt": attempt, "offset": offset, "next_offset": end, "text": text}, end)
            offset, quiet_since = end, time.monotonic()
        if over:
            yield event("end", {"next_offset": offset, "attempt": attempt, "state": state}, offset)
            return
        if text:
            continue
        if time.monotonic() - quiet_since >= heartbeat:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(every)
