"""When will each waiting job start? The simulator run forward from the live snapshot.

Two runs of the same core on a virtual clock, starting from what runs and waits now:

- the *bound*: every running and pending job lasts its whole `max_runtime` (the scheduler
  ends a job there, so nothing runs longer). The start it gives a job is "at the latest",
  as long as nothing that outranks it arrives meanwhile and no node fails;
- the *likely*: each job lasts what its team's jobs of its resource class have typically taken,
  as a fraction of the runtime they asked for (learned from history by the caller), while the
  core is still told `max_runtime` as it will be in life. Without history a job lasts its
  `max_runtime`.

A preemption already under way ends its victim after the grace period (the victim's own
requeue is not forecast: it is no longer pending). Pure, like the core: no clock, no I/O.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace

from scheduling.core.model import ClusterSnapshot, PendingJob, PolicyConfig, RunningJob
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.policies import MlqueuePolicy
from scheduling.sim.trace import TraceJob

MIN_LENGTH_S = 60.0
# The forecast decides at most once every four minutes for the first 40 minutes ahead, then
# once per 1/10 of the lead time (an hour ten hours out), and at least once an hour: its starts
# are that coarse, and always rounded up (Slurm's backfill plans at a resolution too, its
# `bf_resolution`). A job placed at a simulated pass runs from when it could have started since
# the previous one (`SimConfig.backdate_starts`), so room does not idle between passes. 45
# passes reach ~15 hours. Against the twelfth round's 2 minutes, 1/20 and 80 passes (11.9
# hours): ~35% less CPU, starts 2 minutes later at the median and 40 minutes apart at p90,
# about what the same forecast moves by itself from one second to the next; against a finer
# forecast (every minute, 200 passes) bound starts are 71 minutes off at p90 where those
# were 49 (BENCHMARKS.md, "the forecast, thirteenth round").
STEP_S = 240.0
STEP_GROWTH = 1 / 10
BACKDATE = True
MAX_DECISIONS = 45
# Reclaim victim searches per simulated pass. Unbounded, a deep queue of teams under their
# guarantee searches ~190 times a pass, two thirds of a forecast's time; at 16 the reclaims
# the live pass would make at once are spread over the next simulated minutes (BENCHMARKS.md,
# the forecast: 38% less time, starts within a few minutes of the unbounded run's). The
# cluster's own bound, if tighter, stays.
RECLAIM_SEARCHES = 16
# What the simulated future evicts: "all" as the cluster is configured, "priority" (owners do
# not reclaim from borrowers), or "none". Evictions already under way end as they would.
# Without reclaim an owner within its guarantee waits for room to free by itself: its bound
# comes out later than in life (still a bound). Everyone else's can come out earlier: in life
# owners take room ahead of them and the borrowers they evict wait again in the same queue.
# Cheaper (BENCHMARKS.md: 6x without any eviction) but starts move by ~2 hours at p90.
EVICTIONS = ("all", "priority", "none")


@dataclass(frozen=True)
class Run:
    starts: dict[int, float]  # job id -> its first start in the run
    complete: bool  # False: the decision budget ran out before every job started


@dataclass(frozen=True)
class Forecast:
    latest: dict[int, float]  # job id -> start at the latest (the bound run)
    likely: dict[int, float]  # job id -> likely start
    complete: bool  # False: the decision budget ran out before every job started


def forecast(snapshot: ClusterSnapshot, *, likely_fraction: Mapping | None = None, **options) -> Forecast:
    """`likely_fraction`: (team, resource class), or a team for all its classes, -> the share of
    its asked-for runtime its jobs typically use (0-1]; without it the likely starts are the
    bound's. `options`: those of `simulate`. The two runs one after the other; the leader runs
    them in two kept processes (forecast_workers.py)."""
    bound = simulate(snapshot, None, **options)
    return combine(bound, simulate(snapshot, likely_fraction, **options) if likely_fraction else None)


def simulate(
    snapshot: ClusterSnapshot,
    fraction: Mapping | None,
    *,
    grace_s: float = 120.0,
    max_decisions: int = MAX_DECISIONS,
    step_s: float = STEP_S,
    step_growth: float = STEP_GROWTH,
    backdate: bool = BACKDATE,
    skip_quiet: bool = True,
    reclaim_searches: int | None = RECLAIM_SEARCHES,
    evictions: str = "all",
) -> Run:
    """One run: the bound (`fraction` None) or the likely. `grace_s`: how long a victim takes
    to stop (the longest grace period running, for a bound). Jobs that never start within
    `max_decisions` passes (held jobs, jobs that cannot fit, jobs past the budget) get no
    forecast; instants where no pass could decide anything are skipped and not counted
    (`skip_quiet=False`: the reference path, for comparisons). `step_s`, `step_growth`: how
    often the simulated policy decides; `backdate`: see `SimConfig.backdate_starts`.
    `reclaim_searches`: the most reclaim victim searches of a simulated pass (None: as the
    cluster is configured); `evictions`: one of `EVICTIONS`."""
    snapshot = replace(snapshot, config=_forecast_config(snapshot.config, reclaim_searches, evictions))
    fraction = fraction or {}
    now = snapshot.now
    running = tuple(
        (job, _end(job, now, fraction_of(fraction, job.team, job.resource_class), grace_s)) for job in snapshot.running
    )
    jobs = [_trace_job(job, now, fraction_of(fraction, job.team, job.shape.resource_class)) for job in snapshot.pending]
    config = SimConfig(
        checkpoint_interval_s=0,
        grace_s=grace_s,
        tick_s=0,
        sample_s=0,
        stop_once_all_started=True,
        max_decisions=max_decisions,
        decision_step_s=step_s,
        step_growth=step_growth,
        backdate_starts=backdate,
        skip_quiet_instants=skip_quiet,
        wake_when_victims_age=True,  # no ticks: a preemption waiting on its victims' minimum happens
    )
    sim = Simulation(
        list(snapshot.nodes),
        snapshot.teams,
        jobs,
        MlqueuePolicy(reclaim_turn=snapshot.reclaim_turn or frozenset()),
        config,
        replace(snapshot.config, explain=False),
        running_at_start=running,
        groups=snapshot.groups,  # a group's parallelism holds in the forecast too
        maintenance=snapshot.maintenance,  # and no job starts where it would run into a window
    ).run()
    starts = {job.job_id: sim.records[job.job_id].first_start for job in snapshot.pending}
    found = {job_id: at for job_id, at in starts.items() if at is not None}
    return Run(found, len(found) == len(starts))


def combine(bound: Run, likely: Run | None) -> Forecast:
    """The forecast of the two runs (without a likely run, the likely starts are the bound's)."""
    if likely is None:
        return Forecast(bound.starts, dict(bound.starts), bound.complete)
    # A shorter run never makes anything later in life; where the policy's list scheduling
    # would (an anomaly), the bound still holds.
    starts = {job_id: min(at, bound.starts.get(job_id, at)) for job_id, at in likely.starts.items()}
    return Forecast(bound.starts, starts, bound.complete and likely.complete)


def _forecast_config(config: PolicyConfig, reclaim_searches: int | None, evictions: str) -> PolicyConfig:
    """The cluster's policy, its reclaim searches bounded by `reclaim_searches` too, and the
    simulated future's evictions as `evictions` says."""
    if evictions not in EVICTIONS:
        raise ValueError(f"evictions must be one of {', '.join(EVICTIONS)}, not {evictions!r}")
    if evictions == "priority":
        config = replace(config, reclaim=False)
    elif evictions == "none":
        config = replace(config, preemption=False)
    if reclaim_searches is None:
        return config
    cap = config.max_reclaim_searches
    return replace(config, max_reclaim_searches=reclaim_searches if cap is None else min(cap, reclaim_searches))


def fraction_of(fraction: Mapping, team: str, rclass: str) -> float:
    """The share for the team's jobs of that class, else for all its jobs, else 1 (the bound)."""
    return fraction.get((team, rclass), fraction.get(team, 1.0))


def _end(job: RunningJob, now: float, fraction: float, grace_s: float) -> float:
    """When a running job ends: at its bound, or `fraction` of the way there, not before now."""
    if job.preempting:
        return min(job.expected_end, now + grace_s)
    if fraction >= 1.0:
        return max(now, job.expected_end)
    likely = job.started_at + fraction * (job.expected_end - job.started_at)
    if likely <= now:  # it has outlived the typical run: what is left shrinks the same way
        likely = now + fraction * max(0.0, job.expected_end - now)
    return max(now, min(likely, job.expected_end))


def _trace_job(job: PendingJob, now: float, fraction: float) -> TraceJob:
    length = max(MIN_LENGTH_S, job.max_runtime_s * min(1.0, fraction))
    arrives = max(now, job.not_before or now)  # a job in back-off or not_before waits until then
    return TraceJob(
        job.job_id,
        arrives,
        length,
        job.shape.units,
        job.team,
        job.shape.gpu_type,
        job.priority,
        job.max_runtime_s,
        view=job,
    )
