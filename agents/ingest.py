"""What agents report about their tasks, from the events endpoint and from heartbeats alike.

A node token reports only on the tasks placed on its node, and only on the attempt placed
there (or, for the last log chunks and reports, the attempt that ran there before a requeue
released it). Logs and metric reports are stored in bulk per batch (metrics:
scheduling/job_metrics.py). Logs are bytes from a program: what Postgres cannot hold in text
(NUL, lone surrogates) is replaced by U+FFFD, one character for one, so every offset stays
true; and what is stored per attempt and stream is capped by what is already stored, not by
where a chunk claims to start. A stream at its cap is named in the answer (`capped`): its agent
ships no more of it.

How much a stream has stored is a running total in the cache (Redis), added to with each batch,
not a sum over every chunk stored (a stream of 10 MB is ~300 chunks, read at each batch). Postgres
stays the record: a total the cache lost (Redis emptied, down, or the key's time up) is summed
from the chunks once, and so is a total about to cap a stream, which may have counted a chunk
sent twice (the agent resends a batch whose answer it did not get; the second is not stored):
the cap falls where the stored text says.
"""

from collections import defaultdict

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q, Sum
from django.db.models.functions import Length
from django.utils import timezone

from mlqueue.parsers import replace_bad_text
from scheduling import job_metrics, reports
from scheduling.models import Node, Task, TaskLog
from teams.models import AuditEvent, EventKind

NOT_HERE = "job {job_id} rank {rank} is not placed on node {node}."
# A running total lives this long after it was summed from Postgres: what a lost increment
# (a Redis outage, a process's own memory meanwhile) could let past the cap is this old at most.
LOG_TOTAL_TTL_S = 600
OTHER_ATTEMPT = "job {job_id} rank {rank} is at attempt {current} on this node, not attempt {attempt}."


def do_ingest_events(*, node: Node, events: list[dict], now=None) -> dict:
    """Apply a batch of an agent's events; returns how many were accepted and why others
    were refused (the agent drops those: a refusal is not worth a retry)."""
    now = now or timezone.now()
    attempts = attempts_on(node, {(e["job_id"], e["rank"]) for e in events})
    batched, refused = {"log": [], "metric": []}, []
    for index, event in enumerate(events):
        why = refusal(node, attempts, event)
        if why:
            refused.append({"index": index, "reason": why})
        elif event["type"] in batched:
            batched[event["type"]].append(event)
        elif why := apply_event(node.name, event, now=now):
            refused.append({"index": index, "reason": why})
    capped = store_logs(batched["log"], now=now)
    job_metrics.do_record_metrics(batched["metric"], now=now)
    answer = {"accepted": len(events) - len(refused), "refused": refused[:20]}
    if capped:
        answer["capped"] = [dict(zip(("job_id", "rank", "attempt", "stream"), key, strict=True)) for key in capped]
    return answer


def attempts_on(node: Node, keys: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """(job, rank) -> the attempt this node may report on, for the given tasks."""
    if not keys:
        return {}
    rows = (
        Task.objects.filter(job_id__in={job for job, _ in keys})
        .filter(Q(node=node) | Q(node__isnull=True, last_node=node))
        .values_list("job_id", "rank", "attempt")
    )
    return {(job, rank): attempt for job, rank, attempt in rows if (job, rank) in keys}


def refusal(node: Node, attempts: dict, event: dict) -> str:
    key = (event["job_id"], event["rank"])
    if key not in attempts:
        return NOT_HERE.format(job_id=key[0], rank=key[1], node=node.name)
    if attempts[key] != event["attempt"]:
        return OTHER_ATTEMPT.format(job_id=key[0], rank=key[1], current=attempts[key], attempt=event["attempt"])
    return ""


def apply_event(node_name: str, event: dict, *, now) -> str:
    """A start, an exit, a checkpoint, a skipped metrics line or a dropped event, already known
    to be this node's.
    Returns why it changed nothing where that is worth telling the agent (a checkpoint not
    recorded), else ""."""
    job_id, rank, attempt = event["job_id"], event["rank"], event["attempt"]
    kind = event["type"]
    if kind == "started":
        reports.do_report_started(job_id=job_id, rank=rank, attempt=attempt, now=now)
    elif kind == "exited":
        reports.do_report_exited(
            job_id=job_id,
            rank=rank,
            attempt=attempt,
            exit_code=event["exit_code"],
            signal=event["signal"],
            cause=event.get("cause", ""),
            now=now,
        )
    elif kind == "checkpoint":
        return reports.do_report_checkpoint(
            job_id=job_id,
            rank=rank,
            attempt=attempt,
            node_name=node_name,
            step=event["step"],
            at=event["at"],
            epoch=event.get("epoch", 0),
            now=now,
        )
    elif kind == "metric_skipped":
        job_metrics.note_skipped(event, node_name=node_name, now=now)
    elif kind == "dropped":
        AuditEvent.objects.create(
            job_id=job_id,
            kind=EventKind.TRANSITION,
            actor_name=f"agent:{node_name}",
            reason="AGENT_DROPPED_EVENT",
            message=replace_bad_text(event["data"])[:1000],
            data={"rank": rank, "attempt": attempt},
            created_at=now,
        )
    return ""


def store_logs(events: list[dict], *, now) -> list[tuple]:
    """Keep log chunks up to MLQ_MAX_LOG_CHARS stored per attempt and stream; past it the rest
    is dropped (the agent keeps the whole file) and the job's timeline says so, once. Returns
    the streams of this batch that are at the cap, sorted: their agent stops sending them."""
    if not events:
        return []
    cap = settings.MLQ_MAX_LOG_CHARS
    stored = running_totals({_log_key(e) for e in events})
    summed, added, rows = set(), defaultdict(int), []
    for event in events:
        key, text = _log_key(event), replace_bad_text(event["data"])
        if text and 0 < cap - stored[key] <= len(text) and key not in summed:
            summed.add(key)  # about to cap it: by what is stored, not by a total that counted a resend
            stored[key] = stored_chars({key})[key] + added[key]
        room = cap - stored[key]
        if room <= 0 or not text:
            continue
        if len(text) >= room:
            text = text[:room]
            _note_log_cap(key, cap, now=now)
        stored[key] += len(text)
        added[key] += len(text)
        rows.append(
            TaskLog(
                job_id=key[0],
                rank=key[1],
                attempt=key[2],
                stream=key[3],
                offset=event["offset"],
                text=text,
                created_at=now,
            )
        )
    TaskLog.objects.bulk_create(rows, ignore_conflicts=True)
    _count(added, summed={key: stored[key] for key in summed})
    return sorted(key for key in stored if stored[key] >= cap)


def _log_key(event: dict) -> tuple[int, int, int, str]:
    return event["job_id"], event["rank"], event["attempt"], event["stream"]


def _total_key(key: tuple) -> str:
    return "mlq:logchars:{}:{}:{}:{}".format(*key)


def running_totals(keys: set[tuple]) -> defaultdict:
    """The characters stored per stream: the cache's running totals, summed from Postgres (and
    cached) for the streams the cache does not hold."""
    cached = cache.get_many([_total_key(key) for key in keys])
    totals = defaultdict(int, {key: cached[_total_key(key)] for key in keys if _total_key(key) in cached})
    missing = keys - set(totals)
    if missing:
        summed = stored_chars(missing)
        cache.set_many({_total_key(key): summed[key] for key in missing}, timeout=LOG_TOTAL_TTL_S)
        totals.update({key: summed[key] for key in missing})
    return totals


def _count(added: dict, *, summed: dict) -> None:
    """Add what this batch stored to the running totals; a total summed from Postgres in this
    batch is set (what it stored included). A total the cache dropped meanwhile stays dropped:
    the next batch sums it."""
    if summed:
        cache.set_many({_total_key(key): total for key, total in summed.items()}, timeout=LOG_TOTAL_TTL_S)
    for key, chars in added.items():
        if chars and key not in summed:
            try:
                cache.incr(_total_key(key), chars)
            except ValueError:
                pass


def stored_chars(keys: set[tuple]) -> defaultdict:
    """The characters stored per stream, summed over its chunks (a read of every chunk's text:
    only when the running total is missing or about to cap the stream)."""
    match = Q()
    for job_id, rank, attempt, stream in keys:
        match |= Q(job_id=job_id, rank=rank, attempt=attempt, stream=stream)
    rows = (
        TaskLog.objects.filter(match)
        .values_list("job_id", "rank", "attempt", "stream")
        .annotate(chars=Sum(Length("text")))
    )
    stored = defaultdict(int)
    for job_id, rank, attempt, stream, chars in rows:
        stored[(job_id, rank, attempt, stream)] = chars or 0
    return stored


def _note_log_cap(key: tuple, cap: int, *, now) -> None:
    job_id, rank, attempt, stream = key
    AuditEvent.objects.create(
        job_id=job_id,
        kind=EventKind.TRANSITION,
        actor_name="mlqueue",
        reason="LOG_CAPPED",
        message=f"rank {rank} attempt {attempt}: {stream} reached the {cap:,} characters kept; "
        "the rest is only in the agent's file on the node",
        data={"rank": rank, "attempt": attempt, "stream": stream},
        created_at=now,
    )
