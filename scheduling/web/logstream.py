"""`GET /api/v1/jobs/{id}/logs?follow=1`: one rank's log attempt as server-sent events.

Events: `log` (data: {"attempt", "offset", "next_offset", "text"}, id: the offset after it, so a client
resumes with ?offset= or Last-Event-ID, which wins), then one `end` (data: {"next_offset", "state",
"attempt"}, and "superseded_by": N when a later attempt N has replaced it) once the attempt is
over: its task ended or was requeued, a newer attempt started, or the job finished. `state` is
how that attempt ended (attempt_outcome), not the task's state now: attempt 1 that exited 4
ends FAILED even once attempt 2 has succeeded. A `: keep-alive` comment every
MLQ_LOG_FOLLOW_HEARTBEAT_S; the stream closes itself after the `end`, when the client goes, or
after MLQ_LOG_FOLLOW_MAX_S (the client resumes). An offset past the end of what is stored reads
nothing and answers the end as `next_offset`, not the offset asked for.

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
from collections.abc import AsyncIterator, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from mlqueue.middleware import is_database_unavailable
from mlqueue.serializer_fields import ChoiceField
from scheduling.models import Task, TaskLog, UsageRecord
from scheduling.states import ENDED, JOB_FINISHED, ON_NODE
from teams.models import AuditEvent, EventKind

CONTENT_TYPE = "text/event-stream"


def read_log(job_id: int, rank: int, attempt: int, stream: str, offset: int) -> tuple[str, int]:
    """The attempt's text from `offset` up to its first gap (later chunks have not arrived yet),
    and the offset after it. An offset past everything stored gives the stored end: a client
    that asked past it (a made-up offset) goes on from there, not from a number no chunk will
    ever reach."""
    text, end = "", offset
    logged = TaskLog.objects.filter(job_id=job_id, rank=rank, stream=stream, attempt=attempt)
    # An offset inside a chunk (a client resuming where it had read to) starts in that chunk:
    # it read nothing at all before, whatever came after.
    inside = logged.filter(offset__lt=offset).order_by("-offset").values_list("offset", "text").first()
    if inside is not None and inside[0] + len(inside[1]) > offset:
        text, end = inside[1][offset - inside[0] :], inside[0] + len(inside[1])
    chunks = list(logged.filter(offset__gte=end).order_by("offset").values_list("offset", "text"))
    if not chunks and not text:  # nothing at or after it: the end is where the last chunk ends
        return "", min(offset, inside[0] + len(inside[1])) if inside is not None else 0
    for chunk_offset, chunk in chunks:
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


def attempt_over(job_id: int, rank: int, attempt: int) -> tuple[bool, str | None, int | None]:
    """Whether `attempt` is over (its task ended, was requeued or moved on, or the job finished),
    how it ended and the later attempt that replaced it (None: none has). A rank the job does
    not have is over too (nothing will come), with no state. One query while it runs."""
    row = Task.objects.filter(job_id=job_id, rank=rank).values_list("attempt", "state", "job__state").first()
    if row is None:
        return True, None, None
    task_attempt, state, job_state = row
    over = task_attempt > attempt or (task_attempt == attempt and state not in ON_NODE) or job_state in JOB_FINISHED
    if not over:
        return False, None, None
    superseded_by = task_attempt if task_attempt > attempt else None
    return True, attempt_outcome(job_id, rank, attempt, task_attempt=task_attempt, task_state=state), superseded_by


def attempt_outcome(job_id: int, rank: int, attempt: int, *, task_attempt: int, task_state: str) -> str | None:
    """How this rank's `attempt` ended, whatever came after it: the first end this rank
    recorded on the job's timeline while the attempt held its nodes (the usage ledger's row
    of the attempt gives that window), else how the ledger says the attempt ended. An attempt
    the ledger never opened (the job never ran) is the task's own state, unless a later
    attempt replaced it: then nothing is known (None)."""
    window = (
        UsageRecord.objects.filter(job_id=job_id, attempt=attempt)
        .values_list("started_at", "ended_at", "outcome")
        .first()
    )
    if window is None:
        return task_state if task_attempt <= attempt else None
    started, ended, outcome = window
    ends = AuditEvent.objects.filter(
        job_id=job_id, kind=EventKind.TRANSITION, to_state__in=ENDED, created_at__gte=started
    )
    if ended is not None:
        ends = ends.filter(created_at__lte=ended)
    for to_state, data in ends.order_by("created_at", "id").values_list("to_state", "data"):
        if data.get("rank", rank) == rank:  # a whole gang's move names no rank
            return to_state
    if outcome:
        return outcome
    return task_state if task_attempt == attempt and task_state in ENDED else None


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


ACCESS_ENDED = "the stream's credentials no longer read this job (a token revoked or expired, a logout, a team left)"


async def follow_log(
    job_id: int, rank: int, attempt: int, stream: str, offset: int, still_allowed: Callable[[], bool] | None = None
) -> AsyncIterator[str]:
    """`still_allowed`: asked again every MLQ_WS_RECHECK_S, as the live views' sockets ask (a
    new request would): when it says no, the stream ends with a `closed` event. A follow
    lasts up to MLQ_LOG_FOLLOW_MAX_S; a token revoked a minute in read on for the rest (QA)."""
    try:
        async for item in _follow(job_id, rank, attempt, stream, offset, still_allowed):
            yield item
    except Unreachable:
        return


def poll_once(
    job_id: int, rank: int, attempt: int, stream: str, offset: int
) -> tuple[str, int, bool, str | None, int | None]:
    """What is new from `offset`, and, when nothing is, whether the attempt is over (then with what
    landed between the read and the state: its last chunks).
    (text, next offset, over, how it ended, the attempt that superseded it)."""
    text, end = read_log(job_id, rank, attempt, stream, offset)
    if text:
        return text, end, False, None, None
    over, state, superseded_by = attempt_over(job_id, rank, attempt)
    if over:
        text, end = read_log(job_id, rank, attempt, stream, end)
    return text, end, over, state, superseded_by


async def _follow(
    job_id: int, rank: int, attempt: int, stream: str, offset: int, still_allowed: Callable[[], bool] | None
) -> AsyncIterator[str]:
    poll = between_polls(poll_once)
    allowed = between_polls(still_allowed) if still_allowed is not None else None
    every, heartbeat = settings.MLQ_LOG_FOLLOW_POLL_S, settings.MLQ_LOG_FOLLOW_HEARTBEAT_S
    deadline = time.monotonic() + settings.MLQ_LOG_FOLLOW_MAX_S
    quiet_since = checked_at = time.monotonic()
    yield f"retry: {int(every * 1000) + 1000}\n\n"
    while time.monotonic() < deadline:
        if allowed is not None and time.monotonic() - checked_at >= settings.MLQ_WS_RECHECK_S:
            if not await allowed():
                yield event("closed", {"reason": ACCESS_ENDED})
                return
            checked_at = time.monotonic()
        text, end, over, state, superseded_by = await poll(job_id, rank, attempt, stream, offset)
        if text:
            yield event("log", {"attempt": attempt, "offset": offset, "next_offset": end, "text": text}, end)
            quiet_since = time.monotonic()
        offset = end  # past what is stored, an offset comes back to the stored end
        if over:
            ended = {"next_offset": offset, "attempt": attempt, "state": state}
            yield event("end", {**ended, "superseded_by": superseded_by} if superseded_by else ended, offset)
            return
        if text:
            continue
        if time.monotonic() - quiet_since >= heartbeat:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(every)


# The API's schema of the logs endpoint's answers (scheduling/web/api.py JobLogs).
class LogAnswerSerializer(serializers.Serializer):
    """A rank's log of one attempt and stream, from `offset` (without `follow`)."""

    job_id = serializers.IntegerField()
    rank = serializers.IntegerField()
    attempt = serializers.IntegerField()
    stream = ChoiceField(["stdout", "stderr"])
    offset = serializers.IntegerField(help_text="where this text starts in the attempt's stream")
    next_offset = serializers.IntegerField(help_text="where the next read starts: ask again with offset = this")
    text = serializers.CharField(allow_blank=True)
    capped = serializers.BooleanField(
        help_text="the stream reached the most that is kept of it; the rest was not stored"
    )


# GET /api/v1/jobs/{id}/logs?follow=1's events (scheduling/web/logstream.py), as a client's
# EventSource sees each: its `event` name, its `data` (a JSON object) and its `id` (the offset).
LOG_EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["log", "end", "closed"]},
        "data": {
            "type": "string",
            "description": "a JSON object: log {attempt, offset, next_offset, text}, "
            "end {next_offset, state, attempt, superseded_by?}, closed {reason}",
        },
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["event", "data"],
}


# The logs endpoint's answers: JSON, or with `follow` the attempt's events.
LOG_RESPONSES = {
    (200, "application/json"): OpenApiResponse(
        LogAnswerSerializer,
        description="JSON {job_id, rank, attempt, stream, offset, next_offset, text, capped}; with follow, "
        "text/event-stream: `log` events, then `end` (scheduling/web/logstream.py)",
    ),
    (200, CONTENT_TYPE): LOG_EVENT_SCHEMA,
    409: OpenApiResponse(description="a group's parent: it runs nothing, its children have the logs"),
}
