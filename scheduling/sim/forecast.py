"""When will each waiting job start? The simulator run forward from the live snapshot.

Two runs of the same core on a virtual clock, starting from what runs and waits now:

- the *bound*: every running and pending job lasts its whole `max_runtime` (the scheduler
  ends a job there, so nothing runs longer). The start it gives a job is "at the latest",
  as long as nothing that outranks it arrives meanwhile and no node fails;
- the *likely*: each job lasts what its team's jobs have typically taken, as a fraction of
  the runtime they asked for (learned from history by the caller), while the core is still
  told `max_runtime` as it will be in life. Teams without history last their `max_runtime`.

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
# The forecast decides at most once a minute for the first hour ahead, then once per 1/60
# of the lead time (10 minutes ten hours out), and at least once an hour: its starts are
# that coarse, and always rounded up.
STEP_S = 60.0
STEP_GROWTH = 1 / 60
# Reclaim victim searches per simulated pass. Unbounded, a deep queue of teams under their
# guarantee searches ~190 times a pass, two thirds of a forecast's time; at 16 the reclaims
# the live pass would make at once are spread over the next simulated minutes (BENCHMARKS.md,
# the forecast: 38% less time, starts within a few minutes of the unbounded run's). The
# cluster's own bound, if tighter, stays.
RECLAIM_SEARCHES = 16


@dataclass(frozen=True)
class Forecast:
    latest: dict[int, float]  # job id -> start at the latest (the bound run)
    likely: dict[int, float]  # job id -> likely start
    complete: bool  # False: the decision budget ran out before every job started


def forecast(
    snapshot: ClusterSnapshot,
    *,
    likely_fraction: Mapping[str, float] | None = None,
    grace_s: float = 120.0,
    max_decisions: int = 200,
    step_s: float = STEP_S,
    skip_quiet: bool = True,
    reclaim_searches: int | None = RECLAIM_SEARCHES,
) -> Forecast:
    """`likely_fraction`: team -> the share of its asked-for runtime its jobs typically use
    (0-1]. `grace_s`: how long a victim takes to stop (the longest grace period running, for a
    bound). Jobs that never start within `max_decisions` passes (held jobs, jobs that cannot
    fit, jobs past the budget) get no forecast; instants where no pass could decide anything
    are skipped and not counted (`skip_quiet=False`: the reference path, for comparisons).
    `reclaim_searches`: the most reclaim victim searches of a simulated pass (None: as the
    cluster is configured)."""
    snapshot = replace(snapshot, config=_forecast_config(snapshot.config, reclaim_searches))
    latest, done_latest = _simulate(snapshot, {}, grace_s, max_decisions, step_s, skip_quiet)
    if likely_fraction:
        likely, done_likely = _simulate(snapshot, likely_fraction, grace_s, max_decisions, step_s, skip_quiet)
        # A shorter run never makes anything later in life; where the policy's list
        # scheduling would (an anomaly), the bound still holds.
        likely = {job_id: min(at, latest.get(job_id, at)) for job_id, at in likely.items()}
    else:
        likely, done_likely = dict(latest), done_latest
    return Forecast(latest, likely, done_latest and done_likely)


def _forecast_config(config: PolicyConfig, reclaim_searches: int | None) -> PolicyConfig:
    """The cluster's policy, its reclaim searches bounded by `reclaim_searches` too."""
    if reclaim_searches is None:
        return config
    cap = config.max_reclaim_searches
    return replace(config, max_reclaim_searches=reclaim_searches if cap is None else min(cap, reclaim_searches))


def forecast_to(
    connection, snapshot: ClusterSnapshot, likely_fraction: Mapping[str, float], max_decisions: int, grace_s: float
) -> None:
    """A child process's body: forecast and send the result down `connection` (the leader's
    pipe; if the leader is gone, there is no one to tell). Lives here, not with the leader's
    Django code, so the child imports nothing but the core and the simulator."""
    try:
        connection.send(
            forecast(snapshot, likely_fraction=likely_fraction, max_decisions=max_decisions, grace_s=grace_s)
        )
    except (BrokenPipeError, EOFError):
        pass
    finally:
        connection.close()


def _simulate(
    snapshot: ClusterSnapshot,
    fraction: Mapping[str, float],
    grace_s: float,
    max_decisions: int,
    step_s: float,
    skip_quiet: bool = True,
) -> tuple[dict[int, float], bool]:
    now = snapshot.now
    running = tuple((job, _end(job, now, fraction.get(job.team, 1.0), grace_s)) for job in snapshot.running)
    jobs = [_trace_job(job, now, fraction.get(job.team, 1.0)) for job in snapshot.pending]
    config = SimConfig(
        checkpoint_interval_s=0,
        grace_s=grace_s,
        tick_s=0,
        sample_s=0,
        stop_once_all_started=True,
        max_decisions=max_decisions,
        decision_step_s=step_s,
        step_growth=STEP_GROWTH,
        skip_quiet_instants=skip_quiet,
    )
    sim = Simulation(
        list(snapshot.nodes),
        snapshot.teams,
        jobs,
        MlqueuePolicy(),
        config,
        replace(snapshot.config, explain=False),
        running_at_start=running,
        groups=snapshot.groups,  # a group's parallelism holds in the forecast too
    ).run()
    starts = {job.job_id: sim.records[job.job_id].first_start for job in snapshot.pending}
    found = {job_id: at for job_id, at in starts.items() if at is not None}
    return found, len(found) == len(starts)


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
