"""The cluster's own history as a trace: the usage ledger's attempts, one TraceJob per job.

Pure, like the core: the ORM adapter (scheduling/history.py) reads the ledger into `Attempt`s
and this module decides what each job is in the trace:

1. its submit time: the job's own, as seconds from the window's start;
2. its GPUs, team and GPU type: from its attempts (the largest, should a retry differ);
3. its duration, the work it really needed: the run time of all its attempts, less the work
   an attempt lost because the scheduler or the fleet stopped it (preemption, drain, spot
   reclaim, node loss). The simulator stops jobs by its own rules under the replayed quotas
   and charges the lost work again itself: counted in the trace as well, it would be counted
   twice. Work lost to the job's own failure stays in: the job would fail again under any
   quota. An attempt still open at the export counts up to `as_of`: a lower bound;
4. priority, max_runtime (what the scheduler was told) and the job group (`ID%PARALLELISM`).

Jobs that never started, CPU jobs (a GPU trace) and jobs without useful work are left out
and counted by reason in `Export.skipped`. Ordered by submit time, then job id.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduling.sim.trace import TraceJob

NEVER_STARTED = "never_started"
CPU_ONLY = "cpu_only"
NO_USEFUL_WORK = "no_useful_work"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a job as the ledger keeps it, with its job's facts; times in seconds
    since the epoch. `lost_gpu_s`: the GPU-seconds the attempt lost to the scheduler or the
    fleet (0 for an attempt that ended by itself, failures included)."""

    job_id: int
    submitted: float
    started: float | None
    ended: float | None
    gpus: int
    team: str
    gpu_type: str | None
    lost_gpu_s: float = 0.0
    priority: str = "P2"
    max_runtime_s: float | None = None
    group: int | None = None
    parallelism: int | None = None


@dataclass(frozen=True)
class Export:
    jobs: list[TraceJob]
    skipped: Counter = field(default_factory=Counter)


def trace_of(attempts: Iterable[Attempt], *, start: float, as_of: float) -> Export:
    """The trace of the jobs the attempts belong to, submit times counted from `start`."""
    by_job: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_job[attempt.job_id].append(attempt)
    jobs, skipped = [], Counter()
    for own in by_job.values():
        found = _job(own, start=start, as_of=as_of)
        if isinstance(found, str):
            skipped[found] += 1
        else:
            jobs.append(found)
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return Export(jobs, skipped)


def _job(attempts: list[Attempt], *, start: float, as_of: float) -> TraceJob | str:
    """The job's TraceJob, or why it is left out."""
    ran = [a for a in attempts if a.started is not None]
    if not ran:
        return NEVER_STARTED
    first = max(ran, key=lambda a: (a.gpus, a.started))
    if first.gpus <= 0 or first.gpu_type is None:
        return CPU_ONLY
    # To the second: the ledger keeps lost work to 1/10,000 GPU-hour, 0.36 s a GPU.
    duration = round(sum(_useful_s(a, as_of) for a in ran))
    if duration <= 0:
        return NO_USEFUL_WORK
    return TraceJob(
        first.job_id,
        first.submitted - start,
        float(duration),
        first.gpus,
        first.team,
        first.gpu_type,
        first.priority,
        first.max_runtime_s,
        group=first.group if first.parallelism else None,
        parallelism=first.parallelism if first.group is not None else None,
    )


def _useful_s(attempt: Attempt, as_of: float) -> float:
    """The attempt's run time less the work it lost (its lost GPU-seconds over its GPUs)."""
    ended = attempt.ended if attempt.ended is not None else as_of
    ran = max(0.0, ended - attempt.started)
    lost = attempt.lost_gpu_s / attempt.gpus if attempt.gpus else 0.0
    return max(0.0, ran - min(lost, ran))
