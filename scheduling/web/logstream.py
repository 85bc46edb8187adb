"""`GET /api/v1/jobs/{id}/logs?follow=1`: one rank's log attempt as server-sent events.

Events: `log` (data: {"attempt", "offset", "next_offset", "text"}, id: the offset after it, so a client
resumes with ?offset= or Last-Event-ID, which wins), then one `end` (data: {"next_offset", "state",
"attempt"}) once the attempt is over: its task ended, a newer attempt started, or the job
finished. A `: keep-alive` comment every MLQ_LOG_FOLLOW_HEARTBEAT_S; the stream closes itself
after the `end`, when the client goes, or after MLQ_LOG_FOLLOW_MAX_S (the client resumes).

New lines are found by polling every MLQ_LOG_FOLLOW_POLL_S: one query on the chunk table's
unique index (job, rank, attempt, stream, offset) and, when it found nothing, one on the
task (job, rank) for the end. Measured: about 0.2 ms each on Postgres, so a thousand open
streams cost about 400 queries per second, in the web process's thread, no leader work.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings

from scheduling.models import Task, TaskLog
from scheduling.states import ENDED, JOB_FINISHED

CONTENT_TYPE = "text/event-stream"


def read_log(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> tuple[str, int]:
    """The attempt's text from `offset` up to its first gap (later chunks have not arrived yet),
    and the offset after it."""
    text, end = "", offset
    chunks = TaskLog.objects.filter(job_id=job_id, rank=rank, stream=stream, attempt=attempt, offset__gte=offset)
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


def attempt_over(job_id: int, rank: int, attempt: int) -> str | None:
    """The state that ends `attempt` (its task's, or the job's), or None while it may still write."""
    row = Task.objects.filter(job_id=job_id, rank=rank).values_list("attempt", "state", "job__state").first()
    if row is None:
        return "MISSING"
    task_attempt, state, job_state = row
    if task_attempt > attempt or (task_attempt == attempt and state in ENDED) or job_state in JOB_FINISHED:
        return state
    return None


def event(name: str, data: dict, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data)}\n\n"


async def follow_log(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> AsyncIterator[str]:
    read, over = sync_to_async(read_log), sync_to_async(attempt_over)
    poll, heartbeat = settings.MLQ_LOG_FOLLOW_POLL_S, settings.MLQ_LOG_FOLLOW_HEARTBEAT_S
    deadline = time.monotonic() + settings.MLQ_LOG_FOLLOW_MAX_S
    quiet_since = time.monotonic()
    yield f"retry: {int(poll * 1000) + 1000}\n\n"
    while time.monotonic() < deadline:
        text, end = await read(job_id, rank, attempt, stream, offset)
        if text:
            yield event("log", {"attempt": attempt, "offset": offset, "next_offset": end, "text": text}, end)
            offset, quiet_since = end, time.monotonic()
            continue
        state = await over(job_id, rank, attempt)
        if state is not None:
            # its last chunks may have landed between the read and the state
            text, end = await read(job_id, rank, attempt, stream, offset)
            if text:
                yield event("log", {"attempt": attempt, "offset": offset, "next_offset": end, "text": text}, end)
                offset = end
            yield event("end", {"next_offset": offset, "attempt": attempt, "state": state}, offset)
            return
        if time.monotonic() - quiet_since >= heartbeat:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(poll)
