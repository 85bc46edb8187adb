"""A day of the demo cluster's history written into the usage ledger as scheduling/ledger.py
writes it (one row per attempt), for the export_trace and what-if tests."""

from datetime import UTC, datetime, timedelta

from scheduling.models import LostCause, UsageRecord
from teams.models import Team

DAY = datetime(2026, 4, 13, tzinfo=UTC)  # a Monday, a week before the tests' frozen clock
FM, VISION, RANKING = "research-foundation-models", "research-vision", "production-ranking"
HOUR = 3600


def at(seconds: float) -> datetime:
    return DAY + timedelta(seconds=seconds)


def record(job_id: int, team: str, *, queued: float, started: float, ended: float | None, **row) -> UsageRecord:
    """One attempt; times in seconds from DAY."""
    defaults = {
        "attempt": 1,
        "job_name": f"job-{job_id}",
        "owner_id": 1,
        "owner_name": "alice",
        "resource_class": "gpu:H100",
        "priority": "P2",
        "gpus": 16,
        "cpus": 32,
        "outcome": "SUCCEEDED" if ended is not None else "",
    }
    return UsageRecord.objects.create(
        job_id=job_id,
        team_id=Team.objects.get(name=team).pk,
        team_name=team,
        queued_at=at(queued),
        started_at=at(started),
        ended_at=at(ended) if ended is not None else None,
        **{**defaults, **row},
    )


def busy_morning(first_id: int = 9001) -> list[int]:
    """From 09:00: FM's six 16-GPU jobs of 2 hours (96 of the 128 H100: its 32 guaranteed and
    64 borrowed) and ranking's two 1-hour jobs at 09:01. FM's first job was preempted 30
    minutes in, 10 of them since its checkpoint lost (2.67 GPU-hours), and ran its last 100
    minutes after; its 20 kept minutes plus those are its 2 hours. Job ids from `first_id`."""
    nine = 9 * HOUR
    ids = list(range(first_id, first_id + 8))
    fm, ranking = ids[:6], ids[6:]
    for job_id in fm[1:]:
        record(job_id, FM, queued=nine, started=nine, ended=nine + 2 * HOUR)
    lost = round(16 * 600 / HOUR, 4)
    record(
        fm[0],
        FM,
        queued=nine,
        started=nine,
        ended=nine + 1800,
        outcome="PREEMPTED",
        lost_gpu_hours=lost,
        lost_cause=LostCause.PREEMPTION,
    )
    record(fm[0], FM, attempt=2, queued=nine + 1800, started=nine + 1900, ended=nine + 1900 + 100 * 60)
    for job_id in ranking:
        record(job_id, RANKING, queued=nine + 60, started=nine + 60, ended=nine + 60 + HOUR, owner_name="bob")
    return ids


def around_the_morning() -> None:
    """What a window of that day leaves out or counts apart: a job submitted the day before
    (its second attempt inside the day), a CPU job, and one still running."""
    record(8001, VISION, queued=-HOUR, started=-HOUR, ended=60, outcome="PREEMPTED", lost_cause=LostCause.DRAIN)
    record(8001, VISION, attempt=2, queued=60, started=120, ended=HOUR)
    record(8002, RANKING, queued=10 * HOUR, started=10 * HOUR, ended=11 * HOUR, resource_class="cpu", gpus=0)
    record(8003, VISION, queued=20 * HOUR, started=20 * HOUR, ended=None, gpus=8)
