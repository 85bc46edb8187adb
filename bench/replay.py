"""Replay a trace through a policy on a simulated cluster.

    python -m bench.replay --trace var/philly-2017-09-10.csv --policy mlqueue \\
        --nodes 64 --gpus-per-node 8 --runtime-estimate x2 [--from 2017-09-04 --to 2017-10-01]
        [--load-scale 1] [--quotas proportional|equal|none|FILE.json] [--fleet seed-2500]
        [--checkpoint-interval 1800] [--grace 120] [--restart-overhead 0] [--node-failures 0] [--seed 1]
        [--baseline easy|fifo|sjf|none] [--table]

The Philly trace is not in the repository: BENCHMARKS.md ("Getting the trace") says where to
get it and how it was cut. Prints one JSON line of figures (see scheduling/sim/metrics.py),
plus the wall time; unless `--baseline none`, also replays `easy` (or the named policy) on the
same jobs and adds the ratios to it: `avg_wait_vs_easy`, `max_wait_vs_easy`, `avg_jct_vs_easy`.
`--quotas FILE.json` replays the same trace under quotas an admin is considering, before applying
them: {"team": guaranteed GPUs, ...}, or the API's quotas ({"team": {"gpu:H100": {"guaranteed":
32, "borrowing_limit": 0}}}, the replayed --gpu-type's class): bench/quota_file.py.
"""

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import fields
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.quota_file import QuotaFileError, TeamQuota, read_quota_file  # noqa: E402
from scheduling.core.feasibility import can_ever_run  # noqa: E402
from scheduling.core.model import JobShape, PolicyConfig, Quota, Team, resource_class  # noqa: E402
from scheduling.sim.engine import SimConfig, Simulation  # noqa: E402
from scheduling.sim.fleets import build_fleet, custom_fleet  # noqa: E402
from scheduling.sim.metrics import summarize, table_row, versus  # noqa: E402
from scheduling.sim.policies import make_policy  # noqa: E402
from scheduling.sim.trace import load, load_scaled, trace_groups, with_estimates  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--policy", default="mlqueue", choices=["mlqueue", "fifo", "easy", "sjf"])
    parser.add_argument("--fleet", help="a named fleet (seed-2500, seed-10k) instead of --nodes")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--racks", type=int)
    parser.add_argument("--zones", type=int, default=1)
    parser.add_argument("--gpu-type", default="H100")
    parser.add_argument("--from", dest="start", help="first submit time kept (Philly: YYYY-MM-DD; generic: seconds)")
    parser.add_argument("--to", dest="end", help="submit times before this are kept")
    parser.add_argument("--load-scale", type=float, default=1.0)
    parser.add_argument("--runtime-estimate", default="x2", choices=["exact", "x2", "max"])
    parser.add_argument("--quotas", default="proportional", help="proportional, equal, none, or a JSON file")
    parser.add_argument("--checkpoint-interval", type=float, default=1800.0, help="seconds; 0: no checkpoints")
    parser.add_argument("--grace", type=float, default=120.0)
    parser.add_argument(
        "--restart-overhead",
        type=float,
        default=0.0,
        help="seconds a job restarted after a preemption or node loss spends before its work "
        "resumes (image pull, data and checkpoint load), counted as lost work; 0: free",
    )
    parser.add_argument("--tick", type=float, default=600.0)
    parser.add_argument("--node-failures", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--wait-bound",
        type=float,
        help="mlqueue: seconds before a waiting job goes first and "
        "holds its reservation strictly (default: the core's)",
    )
    parser.add_argument("--aging", type=float, help="mlqueue: seconds of waiting per priority class gained")
    parser.add_argument("--no-shortest-first", action="store_true", help="mlqueue: oldest first within a team")
    parser.add_argument("--order", choices=["fair_share", "weighted_shortest"], help="mlqueue: the queue order")
    parser.add_argument("--reservations", type=int, help="mlqueue: blocked jobs per class holding a reservation")
    parser.add_argument(
        "--set",
        action="append",
        metavar="FIELD=JSON",
        help="mlqueue: any PolicyConfig field, e.g. --set max_reclaim_searches=16 (repeatable)",
    )
    parser.add_argument(
        "--baseline",
        default="easy",
        choices=["easy", "fifo", "sjf", "none"],
        help="also replay this policy and report ratios to it (avg_jct_vs_easy, ...)",
    )
    parser.add_argument("--table", action="store_true", help="also print a markdown table row (to stderr)")
    parser.add_argument(
        "--progress",
        type=int,
        metavar="N",
        help="every N passes, print to stderr how far the replay got: the simulated day (days "
        "since the first job kept), the passes, the jobs waiting and the CPU seconds so far (a JSON line)",
    )
    return parser.parse_args(argv)


def policy_config(args) -> PolicyConfig:
    knobs = {"explain": False}
    if args.wait_bound is not None:
        knobs["reservation_wait_bound_s"] = args.wait_bound
    if args.aging is not None:
        knobs["aging_interval_s"] = args.aging
    if args.no_shortest_first:
        knobs["shortest_first_within_team"] = False
    if args.order:
        knobs["order"] = args.order
    if args.reservations:
        knobs["reservations_per_class"] = args.reservations
    known = {f.name for f in fields(PolicyConfig)}
    for option in args.set or ():
        name, _, value = option.partition("=")
        if name not in known:
            fail(f"--set {option}: PolicyConfig has no field {name!r}")
        try:
            knobs[name] = json.loads(value)
        except ValueError:
            fail(f"--set {option}: the value must be JSON (true, 600, null, ...)")
    try:
        return PolicyConfig(**knobs)
    except (TypeError, ValueError) as exc:  # a value of the wrong kind, or a gate out of order
        fail(f"--set: {exc}")


def fleet_for(args) -> list:
    if args.fleet:
        return build_fleet(args.fleet)
    racks = args.racks or max(1, math.ceil(args.nodes / 16))
    return custom_fleet(args.nodes, args.gpus_per_node, racks, args.zones, args.gpu_type)


def guarantees(jobs, gpus: int, mode: str, gpu_type: str) -> dict[str, TeamQuota]:
    """Team -> its quota: a guarantee by share of the trace's GPU-hours, equal, none, or a file's
    quotas for the replayed class (bench/quota_file.py)."""
    if mode == "none":
        return {}
    teams = sorted({job.team for job in jobs})
    if mode == "equal":
        return {team: TeamQuota(gpus // len(teams)) for team in teams}
    if mode == "proportional":
        hours = defaultdict(float)
        for job in jobs:
            hours[job.team] += job.duration * job.gpus
        total = sum(hours.values())
        return {team: TeamQuota(int(gpus * hours[team] / total)) for team in teams}
    return read_quota_file(Path(mode), resource_class(gpu_type))


def teams_for(owed: dict[str, TeamQuota], gpu_type: str, gpus: int) -> tuple[Team, ...]:
    """A team without a borrowing limit may borrow up to the whole cluster: idle GPUs are never wasted."""
    rclass = resource_class(gpu_type)
    return tuple(
        Team(
            team,
            None,
            {rclass: Quota(q.guaranteed, gpus if q.borrowing_limit is None else q.borrowing_limit, q.weight)},
        )
        for team, q in sorted(owed.items())
    )


def runnable(jobs, fleet, gpu_type: str):
    """Jobs no empty cluster of this size could hold are refused, as at submit."""
    kept, refused = [], 0
    for job in jobs:
        shape = JobShape(job.gpu_type or gpu_type, job.tasks, job.gpus_per_task, 1, 1)
        if can_ever_run(shape, fleet).ok:
            kept.append(job)
        else:
            refused += 1
    return kept, refused


def fail(message: str):
    print(f"replay: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_jobs(args) -> list:
    try:
        jobs = load(args.trace, start=args.start, end=args.end)
        trace_groups(jobs)  # a group given two limits is refused here, with the others
    except OSError as exc:
        fail(f"cannot read the trace {args.trace}: {exc.strerror}")
    except (KeyError, ValueError) as exc:
        fail(f"--from/--to or the trace's rows: {exc}")
    if args.load_scale <= 0:
        fail("--load-scale must be positive")
    if not jobs:
        fail("no jobs in the trace between --from and --to")
    return with_estimates(load_scaled(jobs, args.load_scale), args.runtime_estimate)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if not 0 <= args.restart_overhead < math.inf:
        fail("--restart-overhead must be a number of seconds >= 0")
    if args.progress is not None and args.progress < 1:
        fail(f"--progress must be a number of passes >= 1, not {args.progress}")
    fleet = fleet_for(args)
    gpus = sum(n.gpus for n in fleet)
    jobs = read_jobs(args)
    jobs, refused = runnable(jobs, fleet, args.gpu_type)
    try:
        owed = guarantees(jobs, gpus, args.quotas, args.gpu_type)
    except OSError as exc:
        fail(f"--quotas: expected proportional, equal, none or a JSON file ({args.quotas}: {exc.strerror})")
    except QuotaFileError as exc:
        fail(f"--quotas {args.quotas}: {exc}")
    started = time.perf_counter()
    summary = replay(args, args.policy, fleet, jobs, owed)
    wall = time.perf_counter() - started
    knobs = policy_config(args)
    setup = {"quotas": args.quotas, "runtime_estimate": args.runtime_estimate}
    if args.policy == "mlqueue":
        setup.update(order=knobs.order, wait_bound_s=knobs.reservation_wait_bound_s)
    figures = {
        "policy": args.policy,
        "nodes": len(fleet),
        **setup,
        **summary,
        "refused": refused,
        "wall_s": round(wall, 1),
        "jobs_per_min": round(len(jobs) / wall * 60) if wall else None,
    }
    if args.baseline not in ("none", args.policy):
        figures.update(versus(figures, {"policy": args.baseline, **replay(args, args.baseline, fleet, jobs, owed)}))
    print(json.dumps(figures))
    if args.table:
        print(table_row(figures), file=sys.stderr)
    return figures


def replay(args, name: str, fleet, jobs, owed: dict[str, TeamQuota]) -> dict:
    """One policy over the jobs: its summary figures."""
    gpus = sum(n.gpus for n in fleet)
    policy = make_policy(name, durations={job.job_id: job.duration for job in jobs})
    if args.progress:
        report_progress(policy, args.progress, name)
    config = SimConfig(
        checkpoint_interval_s=args.checkpoint_interval,
        grace_s=args.grace,
        tick_s=args.tick,
        restart_overhead_s=args.restart_overhead,
        gpu_type=args.gpu_type,
        node_failures=args.node_failures,
        seed=args.seed,
    )
    teams = teams_for(owed, args.gpu_type, gpus)
    # A generic trace's job groups (its `group` column) hold for mlqueue; the baselines ignore them.
    sim = Simulation(fleet, teams, jobs, policy, config, policy_config(args), groups=trace_groups(jobs)).run()
    return summarize(sim, entitlements={team: float(quota.guaranteed) for team, quota in owed.items()})


DAY = 86_400.0


def report_progress(policy, every: int, name: str) -> None:
    """Wrap `policy.decide` so that every `every` passes a JSON line on stderr says how far
    the replay got (for a replay that may not finish in the time it is given)."""
    decide, passes = policy.decide, 0

    def decide_and_report(snapshot, *args, **kwargs):
        nonlocal passes
        passes += 1
        if passes % every == 0:
            line = {"policy": name, "day": round(snapshot.now / DAY, 2), "passes": passes}
            line.update(waiting=len(snapshot.pending), cpu_s=round(time.process_time(), 1))
            print(json.dumps(line), file=sys.stderr, flush=True)
        return decide(snapshot, *args, **kwargs)

    policy.decide = decide_and_report


if __name__ == "__main__":
    main()
