"""The usage ledger read back as a trace of the jobs submitted in a window: what
`manage.py export_trace` writes and what a what-if preview replays (scheduling/whatif.py).
What each job becomes is decided in scheduling/sim/history.py; this module only reads.

A job's submit time is its first attempt's `queued_at`; the jobs kept are those submitted in
[start, end) that started at least once (the ledger knows nothing of the others). Its max
runtime and job group come from the job's row while it exists. Two queries for the ledger's
rows (the candidates by the started_at index, then all of their rows) and one for the jobs.
"""

from collections.abc import Iterable
from datetime import datetime

from scheduling.core.model import gpu_type_of
from scheduling.models import Job, JobState, LostCause, UsageRecord
from scheduling.sim.history import Attempt, Export, trace_of

# Work lost to these is the scheduler's or the fleet's doing: the replay charges its own.
REPLAYED_CAUSES = (
    LostCause.PREEMPTION,
    LostCause.QUOTA_RECLAIM,
    LostCause.DRAIN,
    LostCause.RECLAIM,
    LostCause.NODE_LOSS,
)
ROW_FIELDS = (
    "job_id",
    "queued_at",
    "started_at",
    "ended_at",
    "outcome",
    "gpus",
    "team_name",
    "resource_class",
    "priority",
    "lost_gpu_hours",
    "lost_cause",
)


def submitted_in(start: datetime, end: datetime):
    """The ledger's first-attempt candidates for jobs submitted in [start, end): they started
    at or after `start` and waited from before `end` (one index range)."""
    return UsageRecord.objects.filter(started_at__gte=start, queued_at__gte=start, queued_at__lt=end)


def count_jobs(start: datetime, end: datetime) -> int:
    """How many jobs the window's trace holds at most (before the export leaves any out)."""
    return submitted_in(start, end).values("job_id").distinct().count()


def export_window(start: datetime, end: datetime, *, as_of: datetime) -> Export:
    """The trace of the jobs submitted in [start, end), submit times in seconds from `start`;
    attempts still open count up to `as_of`."""
    ids = set(submitted_in(start, end).values_list("job_id", flat=True).distinct())
    rows = list(UsageRecord.objects.filter(job_id__in=ids).order_by("job_id", "attempt").values(*ROW_FIELDS))
    submits = {}
    for row in rows:
        submits[row["job_id"]] = min(submits.get(row["job_id"], row["queued_at"]), row["queued_at"])
    # A job with an attempt that waited from before `start` was submitted before the window.
    kept = {job_id for job_id, submitted in submits.items() if start <= submitted < end}
    facts = _job_facts(kept)
    attempts = [_attempt(row, submits[row["job_id"]], facts.get(row["job_id"], {})) for row in rows]
    return trace_of((a for a in attempts if a.job_id in kept), start=start.timestamp(), as_of=as_of.timestamp())


def _attempt(row: dict, submitted: datetime, facts: dict) -> Attempt:
    # A placement withdrawn before it ran (the job went back to PENDING) did no work.
    withdrawn = row["outcome"] == JobState.PENDING
    lost = row["lost_gpu_hours"] * 3600 if row["lost_cause"] in REPLAYED_CAUSES else 0.0
    return Attempt(
        row["job_id"],
        submitted.timestamp(),
        None if withdrawn else row["started_at"].timestamp(),
        row["ended_at"].timestamp() if row["ended_at"] else None,
        row["gpus"],
        row["team_name"],
        gpu_type_of(row["resource_class"]),
        lost,
        row["priority"],
        **facts,
    )


def _job_facts(ids: Iterable[int]) -> dict[int, dict]:
    """Each job's max runtime (what the scheduler was told) and group, while its row exists."""
    found = {}
    for job in Job.objects.filter(pk__in=list(ids)).values("id", "max_runtime_hours", "parent_id", "parent__group"):
        parallelism = (job["parent__group"] or {}).get("parallelism") if job["parent_id"] else None
        found[job["id"]] = {
            "max_runtime_s": job["max_runtime_hours"] * 3600 if job["max_runtime_hours"] else None,
            "group": job["parent_id"] if parallelism else None,
            "parallelism": int(parallelism) if parallelism else None,
        }
    return found
