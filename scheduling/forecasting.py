"""The leader's start-time forecast for every pending job (scheduling/sim/forecast.py run
on the pass's snapshot), and the teams' runtime history it learns "likely" from.

Run after a pass at most every `MLQ_FORECAST_INTERVAL_S`, never per request: the API and
pages read the two stored columns. Writes are fenced and only where a start changed."""
import statistics
import time
from datetime import datetime, timedelta, timezone as dt_timezone

from django.conf import settings

from scheduling import notify
from scheduling.core.decisions import Decisions
from scheduling.fencing import fenced
from scheduling.models import Job, JobState
from scheduling.sim.forecast import forecast
from scheduling.snapshot import StoreView

HISTORY = timedelta(days=30)
MIN_SAMPLES = 3
BATCH = 500
# A start that moves by less than this is not rewritten (each pass's "now" moves it a little).
SLACK_S = 30.0


def runtime_fractions(now) -> dict[str, float]:
    """team -> the median share of its asked-for max_runtime its jobs used, over the jobs that
    succeeded in the last 30 days (teams with fewer than 3 have no history)."""
    rows = (Job.objects.filter(state=JobState.SUCCEEDED, finished_at__gte=now - HISTORY, started_at__isnull=False)
            .order_by("-finished_at").values_list("team__name", "started_at", "finished_at", "max_runtime_hours")[:5000])
    shares: dict[str, list[float]] = {}
    for team, started, finished, hours in rows:
        if hours > 0:
            shares.setdefault(team, []).append(min(1.0, max(0.0, (finished - started).total_seconds() / (hours * 3600))))
    return {team: max(0.01, statistics.median(found)) for team, found in shares.items() if len(found) >= MIN_SAMPLES}


class Forecaster:
    """Owned by the scheduler worker: decides when a forecast is due and writes it."""

    def __init__(self, *, interval_s: float | None = None):
        self.interval_s = settings.MLQ_FORECAST_INTERVAL_S if interval_s is None else interval_s
        self.last_run = -float("inf")
        self.last_ms = 0.0

    def maybe_run(self, view: StoreView, decisions: Decisions, *, epoch: int, now) -> int | None:
        """Forecast if one is due; returns the rows written (None if not due)."""
        if time.monotonic() - self.last_run < self.interval_s:
            return None
        self.last_run = time.monotonic()
        started = time.perf_counter()
        written = refresh(view, decisions, epoch=epoch, now=now)
        self.last_ms = (time.perf_counter() - started) * 1000
        return written


def refresh(view: StoreView, decisions: Decisions, *, epoch: int, now) -> int:
    result = forecast(view.snapshot, likely_fraction=runtime_fractions(now),
                      max_decisions=settings.MLQ_FORECAST_MAX_PASSES)
    placed = {placement.job_id for placement in decisions.placements}
    changed = []
    for job in view.snapshot.pending:
        if job.job_id in placed:
            continue
        latest, likely = _moment(result.latest.get(job.job_id)), _moment(result.likely.get(job.job_id))
        if _moved(view.starts.get(job.job_id, (None, None)), (latest, likely)):
            changed.append(Job(pk=job.job_id, estimated_start=latest, likely_start=likely))
    for first in range(0, len(changed), BATCH):
        with fenced(epoch):
            # Only jobs still pending: one placed or cancelled since keeps its own columns.
            ids = [job.pk for job in changed[first:first + BATCH]]
            still = set(Job.objects.filter(pk__in=ids, state=JobState.PENDING).values_list("pk", flat=True))
            Job.objects.bulk_update([job for job in changed[first:first + BATCH] if job.pk in still],
                                    ["estimated_start", "likely_start"])
    notify.jobs_changed(job.pk for job in changed)
    return len(changed)


def _moment(at: float | None):
    return datetime.fromtimestamp(at, dt_timezone.utc) if at is not None else None


def _moved(stored: tuple, fresh: tuple) -> bool:
    for old, new in zip(stored, fresh):
        if (old is None) != (new is None):
            return True
        if old is not None and abs((old - new).total_seconds()) > SLACK_S:
            return True
    return False
