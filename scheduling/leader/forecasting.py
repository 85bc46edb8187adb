"""The leader's start-time forecast for every pending job (scheduling/sim/forecast.py run
on the pass's snapshot), and the teams' runtime history it learns "likely" from.

Started after a pass at most every `MLQ_FORECAST_INTERVAL_S`, in two child processes, never per
request: the API and pages read the two stored columns. Writes are fenced and only where a
start moved."""

import dataclasses
import logging
import statistics
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from scheduling import notify
from scheduling.core.decisions import Decisions
from scheduling.core.model import resource_class
from scheduling.fencing import fenced
from scheduling.models import Job, JobState, SchedulerLease, StartForecast
from scheduling.sim.forecast import Forecast, forecast
from scheduling.sim.forecast_workers import Workers
from scheduling.states import QUEUED_OR_RUNNING
from scheduling.store_view import StoreView, build_everyone

log = logging.getLogger(__name__)

HISTORY = timedelta(days=30)
MIN_SAMPLES = 3
BATCH = 500
# A start that moves by less than this is not rewritten (each pass's "now" moves it a little).
SLACK_S = 30.0
# A forecast not back after this long, or 10 times as long as the last one took, is given up
# (a worker stopped or thrashing): its workers are ended, and the pass starts the next one.
# Seed-2500's takes about 2 s.
GIVE_UP_S = 120.0


def runtime_fractions(now) -> dict[tuple[str, str], float]:
    """(team, resource class) -> the median share of its asked-for max_runtime the team's jobs of
    that class used, over those that succeeded in the last 30 days (fewer than 3: no history).
    By class: a team's many one-second CPU jobs say nothing of how long its GPU training runs."""
    rows = (
        Job.objects.filter(
            state=JobState.SUCCEEDED, finished_at__gte=now - HISTORY, started_at__isnull=False, group_kind=""
        )
        .order_by("-finished_at")
        .values_list("team__name", "gpu_type", "started_at", "finished_at", "max_runtime_hours")[:5000]
    )
    shares: dict[tuple[str, str], list[float]] = {}
    for team, gpu_type, started, finished, hours in rows:
        if hours > 0:
            shares.setdefault((team, resource_class(gpu_type or None)), []).append(
                min(1.0, max(0.0, (finished - started).total_seconds() / (hours * 3600)))
            )
    return {key: max(0.01, statistics.median(found)) for key, found in shares.items() if len(found) >= MIN_SAMPLES}


class Forecaster:
    """Owned by the scheduler worker. The simulations run in child processes (a deep queue
    takes seconds to forecast; the leader's passes must not wait for it), the bound and the
    likely one each in its own, side by side, kept from one forecast to the next
    (`Workers`): a pass starts them when none is running and `interval_s` has passed, and a
    later pass writes their result once both have ended. `inline` runs them in the pass
    instead (tests; tiny clusters)."""

    def __init__(self, *, interval_s: float | None = None, inline: bool = False):
        self.interval_s = settings.MLQ_FORECAST_INTERVAL_S if interval_s is None else interval_s
        self.inline = inline
        self.last_started = -float("inf")
        self.running: _InFlight | None = None
        self.workers = Workers()  # spawned on the first forecast
        self.last_ms = 0.0

    def maybe_run(self, view: StoreView, decisions: Decisions, *, epoch: int, now) -> int | None:
        """Write a finished forecast and start the next one if due; returns rows written.
        `view` is this pass's (built before its placements, which are left alone). A forecast
        must see every pending job: where the pass's view left a group's children out (it holds
        only each group's head), the next one starts from a view of every pending job read
        now, after the pass's placements (`build_everyone`): the pass itself does not pay for
        the whole queue, only the passes that start a forecast do, after their own timing."""
        placed = {placement.job_id for placement in decisions.placements}
        written = None
        give_up = max(GIVE_UP_S, 10 * self.last_ms / 1000)
        running = self.running
        if running is not None and not running.ready() and time.perf_counter() - running.started > give_up:
            log.warning("the forecast started %.0f s ago has not finished: given up", give_up)
            self.stop()
        if self.running is not None and self.running.ready():
            children, self.running = self.running, None
            result = children.result()
            self.last_ms = (time.perf_counter() - children.started) * 1000
            if result is not None:
                written = self._written(
                    result, children.view, placed, epoch=epoch, started=children.started, current=view
                )
        if self.running is None and time.monotonic() - self.last_started >= self.interval_s:
            self.last_started = time.monotonic()
            started = time.perf_counter()
            whole = view if not view.left_out else build_everyone(now=now, config=view.snapshot.config)
            # The simulated passes go on from where this pass left the backlog gate.
            start = dataclasses.replace(whole.snapshot, reclaim_turn=decisions.reclaim_turn)
            args = (start, runtime_fractions(now), _options())
            if self.inline:
                written = self._written(_forecast(*args), whole, placed, epoch=epoch, started=started)
            else:
                self.running = _InFlight(self.workers, *args, view=whole, started=started)
        return written

    def _written(
        self, result: Forecast, view: StoreView, placed: set[int], *, epoch: int, started: float, current=None
    ) -> int:
        """Write a forecast's starts (`write`), then its age on the lease row: its snapshot's time
        and how long it took, from its start after a pass to the end of this write."""
        written = write(result, view, placed, epoch=epoch, current=current)
        self.last_ms = (time.perf_counter() - started) * 1000
        record_forecast(epoch=epoch, at=_moment(view.snapshot.now), ms=self.last_ms)
        return written

    def stop(self) -> None:
        """End a forecast under way and the kept workers."""
        self.running = None
        self.workers.kill()


def _options() -> dict:
    """The simulations' options (`scheduling.sim.forecast.simulate`) from the settings."""
    return {
        "max_decisions": settings.MLQ_FORECAST_MAX_PASSES,
        "grace_s": longest_grace(),
        "evictions": settings.MLQ_FORECAST_EVICTIONS,
    }


def _forecast(snapshot, fractions, options: dict) -> Forecast:
    """What the children compute, in this process."""
    return forecast(snapshot, likely_fraction=fractions, **options)


def longest_grace() -> float:
    """The longest grace period of a job that runs or waits: how long any victim may take to stop."""
    found = Job.objects.filter(state__in=QUEUED_OR_RUNNING).aggregate(longest=Max("grace_period_seconds"))["longest"]
    return float(found if found is not None else 120)


class _InFlight:
    """A forecast under way in the kept `Workers`, with the view it forecasts from (its jobs
    are the ones it writes)."""

    def __init__(self, workers: Workers, snapshot, fractions, options: dict, *, view: StoreView, started: float):
        self.workers, self.view, self.started = workers, view, started
        workers.start(snapshot, fractions, options)

    def ready(self) -> bool:
        return self.workers.ready()

    def result(self) -> Forecast | None:
        return self.workers.result()

    def join(self, timeout: float) -> None:
        """Wait for both runs' results (tests)."""
        self.workers.wait(timeout)

    def kill(self) -> None:
        self.workers.kill()


def write(result: Forecast, view: StoreView, placed: set[int], *, epoch: int, current: StoreView | None = None) -> int:
    """Each pending job of `view` (the one forecast from), its two starts, where they moved
    from those stored (as `current`, a later pass's view, read them, else as `view` did);
    fenced; only jobs still pending. Jobs never started yet also keep them in their
    StartForecast (the first they got, and this one as the last so far)."""
    stored = current.starts if current is not None else {}
    changed = []
    for job in view.snapshot.pending:
        if job.job_id in placed:
            continue
        latest, likely = _moment(result.latest.get(job.job_id)), _moment(result.likely.get(job.job_id))
        before = stored.get(job.job_id) or view.starts.get(job.job_id, (None, None))
        if _moved(before, (latest, likely)):
            changed.append(Job(pk=job.job_id, estimated_start=latest, likely_start=likely))
    for first in range(0, len(changed), BATCH):
        batch = changed[first : first + BATCH]
        with fenced(epoch):
            # A job placed or cancelled since the snapshot keeps its own (cleared) columns.
            still = {
                pk: (team_id, started_at)
                for pk, team_id, started_at in Job.objects.filter(
                    pk__in=[job.pk for job in batch], state=JobState.PENDING
                ).values_list("pk", "team_id", "started_at")
            }
            Job.objects.bulk_update([job for job in batch if job.pk in still], ["estimated_start", "likely_start"])
            _keep_for_accuracy(
                [(job, still[job.pk][0]) for job in batch if job.pk in still and still[job.pk][1] is None]
            )
    notify.jobs_changed(job.pk for job in changed)
    return len(changed)


def record_forecast(*, epoch: int, at: datetime, ms: float) -> None:
    """The age of the starts just written, on the lease row beside the pass's: `at`, when the
    snapshot they were simulated from was taken; `ms`, how long the forecast took. Fenced like
    every leader write (raises Deposed), and conditional on the epoch as the pass's record is."""
    with fenced(epoch):
        SchedulerLease.objects.filter(pk=1, epoch=epoch).update(forecast_at=at, forecast_ms=ms)


def _keep_for_accuracy(jobs: list[tuple[Job, int]]) -> None:
    """One statement: a new row holds the job's first forecast (and it as the last so far); an
    existing one takes this forecast as its last. A forecast with neither start (beyond the
    horizon) is not one to measure."""
    now = timezone.now()
    rows = [
        StartForecast(
            job_id=job.pk,
            team_id=team_id,
            first_latest=job.estimated_start,
            first_likely=job.likely_start,
            first_at=now,
            last_latest=job.estimated_start,
            last_likely=job.likely_start,
            last_at=now,
        )
        for job, team_id in jobs
        if job.estimated_start is not None or job.likely_start is not None
    ]
    if rows:
        StartForecast.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["job"], update_fields=["last_latest", "last_likely", "last_at"]
        )


def _moment(at: float | None):
    return datetime.fromtimestamp(at, UTC) if at is not None else None


def _moved(stored: tuple, fresh: tuple) -> bool:
    for old, new in zip(stored, fresh, strict=True):
        if (old is None) != (new is None):
            return True
        if old is not None and abs((old - new).total_seconds()) > SLACK_S:
            return True
    return False
