"""Workloads for the simulator: the Philly summary trace and a generic CSV, cut to a window,
compressed in time, and told a runtime estimate the way a real user would (or would not)."""

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from scheduling.core.model import Group, JobShape, PendingJob

WEEK_S = 7 * 24 * 3600.0
GPUS_PER_TASK = 8


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: int
    submit: float  # seconds from the trace's start
    duration: float  # what it really runs for
    gpus: int
    team: str
    gpu_type: str | None = None  # None: the fleet's GPU type
    priority: str = "P2"
    max_runtime: float | None = None  # what the scheduler is told; None: decided by the estimate option
    view: PendingJob | None = None  # a live job's own shape and settings (the forecast), else built from the above
    checkpoint_interval_s: float | None = None  # its own checkpoint interval; None: the simulation's
    group: int | None = None  # the job group it belongs to (Simulation.groups); a live job's view says
    parallelism: int | None = None  # its group's limit, from a trace's `group` column (`trace_groups`)

    @property
    def tasks(self) -> int:
        return max(1, math.ceil(self.gpus / GPUS_PER_TASK)) if self.gpus > GPUS_PER_TASK else 1

    @property
    def gpus_per_task(self) -> int:
        """Jobs of more than 8 GPUs are gangs of 8-GPU tasks (so 12 GPUs asks 2 x 8)."""
        return GPUS_PER_TASK if self.gpus > GPUS_PER_TASK else self.gpus

    def shape(self, fleet_gpu_type: str) -> JobShape:
        """What it asks the scheduler for: a live job's own shape, else one task per 8 GPUs."""
        if self.view is not None:
            return self.view.shape
        return JobShape(self.gpu_type or fleet_gpu_type, self.tasks, self.gpus_per_task, 1, 1)


def _epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def load_philly(path: Path, *, start: str | None = None, end: str | None = None) -> list[TraceJob]:
    """`timestamp,duration,num_gpus,gpu_time,cluster` rows; `start`/`end` are submit-time
    bounds as 'YYYY-MM-DD[ HH:MM:SS]' (end exclusive). Times become seconds from the first
    job kept."""
    low = _epoch(_full(start)) if start else -math.inf
    high = _epoch(_full(end)) if end else math.inf
    rows = []
    with open(path, newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            submit = _epoch(row["timestamp"])
            if low <= submit < high and float(row["duration"]) > 0 and int(row["num_gpus"]) > 0:
                rows.append(TraceJob(index + 1, submit, float(row["duration"]), int(row["num_gpus"]), row["cluster"]))
    return _from_zero(rows)


def _full(day: str) -> str:
    return day if " " in day else f"{day} 00:00:00"


def load_generic(path: Path, *, start: float | None = None, end: float | None = None) -> list[TraceJob]:
    """`job_id,submit_time,duration,num_gpus,team[,gpu_type][,priority][,max_runtime][,group]`,
    submit_time in seconds; `group` as Slurm writes an array's limit, `ID%PARALLELISM` (`17%4`:
    job group 17, at most 4 of its jobs at once)."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            submit = float(row["submit_time"])
            if (start is None or submit >= start) and (end is None or submit < end):
                rows.append(
                    TraceJob(
                        int(row["job_id"]),
                        submit,
                        float(row["duration"]),
                        int(row["num_gpus"]),
                        row["team"],
                        row.get("gpu_type") or None,
                        row.get("priority") or "P2",
                        float(row["max_runtime"]) if row.get("max_runtime") else None,
                        **_group(row.get("group") or ""),
                    )
                )
    return _from_zero(rows)


GENERIC_COLUMNS = (
    "job_id",
    "submit_time",
    "duration",
    "num_gpus",
    "team",
    "gpu_type",
    "priority",
    "max_runtime",
    "group",
)


def write_generic(jobs: Iterable[TraceJob], handle: TextIO) -> int:
    """The jobs as `load_generic` reads them (the inverse, submit times as given); how many rows."""
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(GENERIC_COLUMNS)
    count = 0
    for job in jobs:
        group = f"{job.group}%{job.parallelism}" if job.group is not None and job.parallelism else ""
        runtime = _number(job.max_runtime) if job.max_runtime is not None else ""
        writer.writerow(
            (job.job_id, _number(job.submit), _number(job.duration), job.gpus, job.team)
            + (job.gpu_type or "", job.priority, runtime, group)
        )
        count += 1
    return count


def _number(seconds: float) -> str:
    """Seconds to the millisecond, without a trailing `.0` for whole ones."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def _group(text: str) -> dict:
    """{group, parallelism} from `ID%PARALLELISM`; nothing from an empty cell."""
    if not text:
        return {}
    found, _, limit = text.partition("%")
    if not (found.isdigit() and limit.isdigit() and int(limit) > 0):
        raise ValueError(f"group {text!r}: write ID%PARALLELISM, e.g. 17%4")
    return {"group": int(found), "parallelism": int(limit)}


def trace_groups(jobs: list[TraceJob]) -> dict[int, Group]:
    """The job groups the trace's jobs name, for Simulation.groups."""
    groups: dict[int, Group] = {}
    for job in jobs:
        if job.group is None or job.parallelism is None:
            continue
        known = groups.setdefault(job.group, Group("array", job.parallelism))
        if known.parallelism != job.parallelism:
            raise ValueError(f"group {job.group}: parallelism {known.parallelism} and {job.parallelism} in one trace")
    return groups


def _from_zero(jobs: list[TraceJob]) -> list[TraceJob]:
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    first = jobs[0].submit if jobs else 0.0
    return [replace(job, submit=job.submit - first) for job in jobs]


def load_scaled(jobs: list[TraceJob], factor: float) -> list[TraceJob]:
    """Arrivals `factor` times as dense (2: the same jobs in half the time)."""
    if factor <= 0:
        raise ValueError("--load-scale must be positive")
    return [replace(job, submit=job.submit / factor) for job in jobs]


def with_estimates(jobs: list[TraceJob], mode: str) -> list[TraceJob]:
    """What each job tells the scheduler as max_runtime: `exact` (its real duration), `x2`
    (twice it, a cautious user), `max` (a week, a user who does not say)."""
    factor = {"exact": 1.0, "x2": 2.0}.get(mode)
    if mode not in ("exact", "x2", "max"):
        raise ValueError(f"--runtime-estimate must be exact, x2 or max, not {mode!r}")
    return [
        job
        if job.max_runtime is not None
        else replace(job, max_runtime=WEEK_S if mode == "max" else max(job.duration * factor, 60.0))
        for job in jobs
    ]


def load(path: Path, *, start=None, end=None) -> list[TraceJob]:
    """Either format, told apart by its header."""
    header = Path(path).open().readline()
    if header.startswith("timestamp,"):
        return load_philly(path, start=start, end=end)
    return load_generic(path, start=float(start) if start else None, end=float(end) if end else None)
