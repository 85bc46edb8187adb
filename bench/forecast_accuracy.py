"""How much each cheaper forecast costs in accuracy, against the forecast as it was (issue 13).

    python bench/forecast_accuracy.py [--pending 5000] [--variants reference,noise,...]

Settles the same seed-2500 snapshot as bench/forecast.py, runs the reference (evictions as
configured, reclaim searches <= 16, decisions once a minute then 1/60 of the lead time, 200
passes) and each variant on it, and prints one markdown row per variant: CPU seconds of both
simulations, jobs with a start (bound / likely), and over the jobs both forecast the median
and p90 absolute difference of starts in minutes, and how many bound starts came out more than
a minute earlier than the reference's (the side where a bound stops being one).
"""

import argparse
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.forecast import add_queue_arguments, settled_queue  # noqa: E402
from scheduling.core.model import ClusterSnapshot  # noqa: E402
from scheduling.sim.forecast import Forecast, forecast  # noqa: E402

REFERENCE = {"evictions": "all", "step_s": 60.0, "step_growth": 1 / 60, "backdate": False, "max_decisions": 200}
VARIANTS = {
    "reference": {},
    "noise": {"shift_s": 15.0},  # the reference 15 s later: how much it moves by itself
    "backdate": {"backdate": True},  # SimConfig.backdate_starts, the reference's steps
    "backdate-2min": {"backdate": True, "step_s": 120.0, "step_growth": 1 / 20},
    "backdate-2min-80": {"backdate": True, "step_s": 120.0, "step_growth": 1 / 20, "max_decisions": 80},
    "no-reclaim": {"evictions": "priority"},
    "no-evictions": {"evictions": "none"},
    "no-evictions-backdate-2min-80": {
        "evictions": "none",
        "backdate": True,
        "step_s": 120.0,
        "step_growth": 1 / 20,
        "max_decisions": 80,
    },
    "no-evictions-backdate-5min": {"evictions": "none", "backdate": True, "step_s": 300.0, "step_growth": 1 / 6},
    "no-evictions-backdate-5min-60": {
        "evictions": "none",
        "backdate": True,
        "step_s": 300.0,
        "step_growth": 1 / 6,
        "max_decisions": 60,
    },
}


def run(snapshot: ClusterSnapshot, variant: dict) -> tuple[Forecast, float]:
    options = {**REFERENCE, **variant}
    shift = options.pop("shift_s", 0.0)
    if shift:
        snapshot = replace(snapshot, now=snapshot.now + shift)
    fractions = {team.name: 0.5 for team in snapshot.teams}
    started = time.process_time()
    result = forecast(snapshot, likely_fraction=fractions, **options)
    return result, time.process_time() - started


def compare(reference: dict[int, float], other: dict[int, float]) -> tuple[float, float, int]:
    both = sorted(reference.keys() & other.keys())
    gaps = sorted(abs(reference[job] - other[job]) / 60 for job in both)
    earlier = sum(1 for job in both if other[job] < reference[job] - 60)
    return statistics.median(gaps), gaps[int(0.9 * (len(gaps) - 1))], earlier


def main(argv=None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_queue_arguments(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    args = parser.parse_args(argv)
    _, snapshot = settled_queue(args)
    gc.collect()
    gc.freeze()
    names = [name for name in args.variants.split(",") if name != "reference"]
    reference, cpu = run(snapshot, VARIANTS["reference"])
    rows = [
        "| variant | CPU s | jobs (bound / likely) | med (min) | p90 (min) | bound earlier |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| reference | {cpu:.1f} | {len(reference.latest)} / {len(reference.likely)} | 0 | 0 | 0 |",
    ]
    print("\n".join(rows), flush=True)
    for name in names:
        result, cpu = run(snapshot, VARIANTS[name])
        bound, likely = compare(reference.latest, result.latest), compare(reference.likely, result.likely)
        row = (
            f"| {name} | {cpu:.1f} | {len(result.latest)} / {len(result.likely)} | {bound[0]:.1f} / {likely[0]:.1f} "
            f"| {bound[1]:.0f} / {likely[1]:.0f} | {bound[2]} |"
        )
        rows.append(row)
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    main()
