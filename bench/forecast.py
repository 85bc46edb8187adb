"""How long the leader's start-time forecast takes on a big cluster with a deep queue.

    python bench/forecast.py --fleet seed-2500 --pending 5000 [--max-passes 45] [--runs 4] [--processes 2]

The queue is settled first as in bench/cycle.py (the storm of a fresh queue is over), then
the forecast (two simulations: the bound and the likely) runs `--runs` times on the same
snapshot. Prints one JSON line: the first run's wall time and the median of the others, the
simulated passes it is allowed, how many pending jobs got a start and how far ahead the last
one is. `--processes 2` runs the two simulations as the leader does, in its two kept worker
processes (scheduling/sim/forecast_workers.py): the first run spawns them (their start is in
`forecast_ms_first`), the others find them waiting, as the leader's forecasts after its first.
"""

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cycle import NOW, fleet_for, settle  # noqa: E402
from bench.fleets import FLEETS, build_teams, build_workload  # noqa: E402
from scheduling.core.model import ClusterSnapshot  # noqa: E402
from scheduling.core.scheduler import Scheduler  # noqa: E402
from scheduling.sim.forecast import EVICTIONS, MAX_DECISIONS, forecast  # noqa: E402
from scheduling.sim.forecast_workers import Workers  # noqa: E402


def add_queue_arguments(parser: argparse.ArgumentParser) -> None:
    """The fleet and queue a forecast benchmark runs on (this one and bench/forecast_accuracy.py)."""
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="seed-2500")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--racks", type=int)
    parser.add_argument("--zones", type=int, default=2)
    parser.add_argument("--pending", type=int, default=5000, help="pending tasks in the queue")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fill", type=float, default=0.9)


def settled_queue(args: argparse.Namespace) -> tuple[str, ClusterSnapshot]:
    """The fleet's name and its queue settled as in bench/cycle.py, so that a forecast meets the
    steady state the leader sees, not the storm of a fresh queue."""
    args.passes, args.arrivals = 1, 2  # what settle() reads
    name, fleet = fleet_for(args)
    teams = build_teams(fleet)
    running, pending = build_workload(fleet, teams, pending_tasks=args.pending, fill=args.fill, seed=args.seed, now=NOW)
    snapshot = ClusterSnapshot(tuple(fleet), tuple(running), tuple(pending), teams, NOW)
    return name, settle(snapshot, fleet, args, Scheduler())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_queue_arguments(parser)
    parser.add_argument("--max-passes", type=int, default=MAX_DECISIONS)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1)
    parser.add_argument("--evictions", choices=EVICTIONS, default="all", help="MLQ_FORECAST_EVICTIONS")
    parser.add_argument(
        "--ask-every-instant",
        action="store_true",
        help="the reference path: ask the core even where no pass could decide anything",
    )
    args = parser.parse_args(argv)
    name, snapshot = settled_queue(args)
    gc.collect()
    gc.freeze()
    timings, result, workers = [], None, Workers()
    for _ in range(args.runs):
        started = time.perf_counter()
        fractions = {team.name: 0.5 for team in snapshot.teams}
        if args.processes == 2:
            workers.start(snapshot, fractions, {"max_decisions": args.max_passes, "evictions": args.evictions})
            workers.wait(600)
            result = workers.result()
        else:
            result = forecast(
                snapshot,
                likely_fraction=fractions,
                max_decisions=args.max_passes,
                skip_quiet=not args.ask_every_instant,
                evictions=args.evictions,
            )
        timings.append((time.perf_counter() - started) * 1000)
    workers.kill()
    horizon = max(result.latest.values(), default=NOW) - NOW
    figures = {
        "fleet": name,
        "running": len(snapshot.running),
        "pending_jobs": len(snapshot.pending),
        "max_passes": args.max_passes,
        "forecast_ms_first": round(timings[0], 1),
        "forecast_ms_p50": round(statistics.median(timings[1:] or timings), 1),
        "forecast_ms_max": round(max(timings[1:] or timings), 1),
        "jobs_forecast": len(result.latest),
        "complete": result.complete,
        "horizon_h": round(horizon / 3600, 1),
    }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
