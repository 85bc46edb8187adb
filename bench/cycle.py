"""How long one scheduling pass takes on a big cluster with a deep queue.

    python bench/cycle.py --fleet seed-2500 --pending 5000 [--passes 7] [--seed 1] [--fill 0.9]
    python bench/cycle.py --nodes 4000 --gpus-per-node 8 --racks 100 --zones 4 --pending 20000

Two figures, because a scheduler meets two kinds of pass:

- `cycle_ms_cold`: the first pass over a fresh queue of `--pending` tasks, with nothing
  decided yet: every placement, preemption and reclaim the queue calls for happens in it (a
  restart after an outage looks like this).
- `cycle_ms_p50` / `_p95`: steady passes. The queue is first settled (untimed passes, each
  topped up to `--pending` tasks with jobs submitted over the past hours, until a pass leaves
  about `--pending` tasks waiting and preempts almost nothing: the storm and its aftershocks
  are over); then `--passes` timed passes run one after
  another as the scheduler runs them (one `Scheduler` kept from pass to pass, as the worker
  keeps one): each pass's placements start running, its victims start
  stopping, the clock moves a second and `--arrivals` new jobs are submitted (the planning
  figure is a 1.2 jobs/s peak). Each steady pass gets its snapshot as the worker's kept reads
  of the store give it (scheduling/cluster.py `KeptReads`): what did not change is the last
  pass's object, what changed a new one. `--read-afresh` gives it a read without kept objects
  instead: every node, job and task a new object with the same fields (a deep copy, untimed),
  as the worker read the store from 2026-12-03 until its reads were kept.

Prints one JSON line to stdout; progress goes to stderr.
"""

import argparse
import copy
import gc
import json
import math
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

if not __package__:
    # Run as a script: make `bench` and `scheduling` importable from the repository root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleets import FLEETS, build_arrivals, build_fleet, build_teams, build_workload, custom_fleet  # noqa: E402
from scheduling.core.decisions import Decisions  # noqa: E402
from scheduling.core.model import ClusterSnapshot, Node, RunningJob  # noqa: E402
from scheduling.core.scheduler import Scheduler  # noqa: E402

# A fixed "now" (2026-01-01T00:00Z): with the seed, it makes the snapshot the same every run.
NOW = 1_767_225_600.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="seed-2500")
    parser.add_argument("--nodes", type=int, help="a custom uniform fleet of this many nodes, instead of --fleet")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--racks", type=int, help="custom fleet racks (default: one per 16 nodes)")
    parser.add_argument("--zones", type=int, default=2)
    parser.add_argument("--pending", type=int, default=5000, help="pending tasks in the queue")
    parser.add_argument("--passes", type=int, default=7, help="timed steady passes")
    parser.add_argument("--arrivals", type=int, default=2, help="new jobs submitted between steady passes")
    parser.add_argument(
        "--read-afresh",
        action="store_true",
        help="steady passes get every object anew (a read of the store without kept objects)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fill", type=float, default=0.9, help="share of each resource class already running")
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be at least 1")
    return args


def fleet_for(args: argparse.Namespace) -> tuple[str, list[Node]]:
    """The named fleet, or a custom one when --nodes is given."""
    if args.nodes is None:
        return args.fleet, build_fleet(args.fleet)
    racks = args.racks or max(1, math.ceil(args.nodes / 16))
    name = f"custom-{args.nodes}x{args.gpus_per_node}-r{racks}-z{args.zones}"
    return name, custom_fleet(args.nodes, args.gpus_per_node, racks, args.zones)


def timed(snapshot: ClusterSnapshot, scheduler: Scheduler) -> tuple[float, Decisions, float]:
    """Wall-clock ms, the decisions, and the pass's own CPU ms (steadier on a shared machine).
    The cyclic garbage collector waits for the end of the pass, as in the worker (`run_pass`)."""
    gc.disable()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        decisions = scheduler.schedule(snapshot, timer=time.perf_counter)
        return (time.perf_counter() - start) * 1000, decisions, (time.process_time() - cpu) * 1000
    finally:
        gc.enable()


def settle(
    snapshot: ClusterSnapshot, fleet: list[Node], args: argparse.Namespace, scheduler: Scheduler
) -> ClusterSnapshot:
    """Untimed passes, topping the queue up after each, until a pass leaves about `--pending`
    tasks waiting and preempts at most a handful (or twenty rounds)."""
    for round_ in range(20):
        _, decisions, _ = timed(snapshot, scheduler)
        snapshot = apply(snapshot, decisions)
        waiting = pending_tasks(snapshot)
        print(
            f"settling {round_ + 1}: {len(decisions.placements)} placed, {len(decisions.preemptions)} preempted, "
            f"{waiting} tasks left",
            file=sys.stderr,
        )
        if waiting >= 0.95 * args.pending and len(decisions.preemptions) <= 5:
            break
        if waiting < args.pending:
            snapshot = add_jobs(
                snapshot, fleet, tasks=args.pending - waiting, seed=args.seed * 100 + round_, submitted_over=8 * 3600
            )
    return snapshot


def steady_passes(
    snapshot: ClusterSnapshot, fleet: list[Node], args: argparse.Namespace, scheduler: Scheduler
) -> tuple[list[float], list[Decisions], list[float]]:
    timings, decisions, cpu = [], [], []
    for index in range(args.passes):
        read = copy.deepcopy(snapshot) if args.read_afresh else snapshot  # kept reads: the same objects
        elapsed, result, cpu_ms = timed(read, scheduler)
        timings.append(elapsed)
        cpu.append(cpu_ms)
        decisions.append(result)
        print(
            f"pass {index + 1}/{args.passes}: {elapsed:.1f} ms, {len(result.placements)} placed, "
            f"{len(result.preemptions)} preempted, {pending_tasks(snapshot)} tasks pending",
            file=sys.stderr,
        )
        snapshot = add_jobs(apply(snapshot, result), fleet, jobs=args.arrivals, seed=args.seed * 1000 + index)
    return timings, decisions, cpu


def pending_tasks(snapshot: ClusterSnapshot) -> int:
    return sum(job.shape.tasks for job in snapshot.pending)


def apply(snapshot: ClusterSnapshot, decisions: Decisions) -> ClusterSnapshot:
    """What the worker does with a pass: placed jobs run, victims stop; a second passes."""
    stopping = {p.victim_job_id: p.for_job_id for p in decisions.preemptions}
    placed = {p.job_id: p for p in decisions.placements}
    running = [
        replace(job, preempting=True, preempted_for=stopping[job.job_id]) if job.job_id in stopping else job
        for job in snapshot.running
    ]
    running += [
        RunningJob(
            job.job_id,
            job.team,
            job.priority,
            job.shape.gpu_type,
            placed[job.job_id].tasks,
            started_at=snapshot.now,
            expected_end=snapshot.now + job.max_runtime_s,
            checkpointing=job.checkpointing,
        )
        for job in snapshot.pending
        if job.job_id in placed
    ]
    pending = [job for job in snapshot.pending if job.job_id not in placed]
    return replace(snapshot, running=tuple(running), pending=tuple(pending), now=snapshot.now + 1.0)


def add_jobs(
    snapshot: ClusterSnapshot,
    fleet: list[Node],
    *,
    seed: int,
    tasks: int | None = None,
    jobs: int | None = None,
    submitted_over: float = 0.0,
) -> ClusterSnapshot:
    """New submissions: about `tasks` tasks, or `jobs` jobs, of the queue's mix."""
    first_id = 1 + max(j.job_id for j in (*snapshot.running, *snapshot.pending))
    arrivals = build_arrivals(
        fleet,
        snapshot.teams,
        tasks=tasks or 10**9,
        seed=seed,
        now=snapshot.now,
        first_id=first_id,
        jobs=jobs,
        submitted_over=submitted_over,
    )
    return replace(snapshot, pending=snapshot.pending + tuple(arrivals))


def nearest_rank(values: list[float], percentile: float) -> float:
    """The nearest-rank percentile: the smallest value with `percentile`% at or below it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


def summary(
    fleet: str,
    cold: tuple[float, Decisions, float],
    steady: ClusterSnapshot,
    args: argparse.Namespace,
    timings: list[float],
    decisions: list[Decisions],
    cpu: list[float],
) -> dict:
    """The result line: the cold pass alone, then medians over the steady passes; `cpu_`
    figures are the passes' own CPU time, which other processes on the machine hardly move."""
    p50 = statistics.median(timings)
    placements = statistics.median(len(d.placements) for d in decisions)
    return {
        "fleet": fleet,
        "nodes": len(steady.nodes),
        "pending_tasks": args.pending,
        "steady_pending_tasks": pending_tasks(steady),
        "running_jobs": len(steady.running),
        "passes": args.passes,
        "read_afresh": args.read_afresh,
        "cycle_ms_cold": round(cold[0], 2),
        "cycle_ms_p50": round(p50, 2),
        "cycle_ms_p95": round(nearest_rank(timings, 95), 2),
        "placements": placements,
        "placements_per_s": round(placements / (p50 / 1000), 1),
        "cold_placements": len(cold[1].placements),
        "cold_placements_per_s": round(len(cold[1].placements) / (cold[0] / 1000), 1),
        "cold_preemptions": len(cold[1].preemptions),
        "reservations": statistics.median(len(d.reservations) for d in decisions),
        "cpu_ms_cold": round(cold[2], 2),
        "cpu_ms_p50": round(statistics.median(cpu), 2),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    name, fleet = fleet_for(args)
    teams = build_teams(fleet)
    running, pending = build_workload(fleet, teams, pending_tasks=args.pending, fill=args.fill, seed=args.seed, now=NOW)
    snapshot = ClusterSnapshot(tuple(fleet), tuple(running), tuple(pending), teams, NOW)
    print(f"{name}: {len(fleet)} nodes, {len(running)} running, {len(pending)} pending jobs", file=sys.stderr)
    # The long-lived snapshot is not garbage: keep the cyclic collector off it, as a worker
    # holding a cluster snapshot should (gc.freeze, Python 3.7+).
    gc.collect()
    gc.freeze()
    timed(snapshot, Scheduler())  # warm-up: imports and first-touch allocations
    # The cold pass starts from nothing kept, as after a restart; the worker then keeps one
    # Scheduler from pass to pass, and so do the settling and steady passes.
    scheduler = Scheduler()
    cold = timed(snapshot, scheduler)
    steady = settle(snapshot, fleet, args, scheduler)
    gc.collect()
    gc.freeze()
    timings, decisions, cpu = steady_passes(steady, fleet, args, scheduler)
    print(json.dumps(summary(name, cold, steady, args, timings, decisions, cpu)))


if __name__ == "__main__":
    main()
