"""How much each cheaper forecast costs in accuracy, against the forecast as it was (issue 13).

    python bench/forecast_accuracy.py [--pending 5000] [--variants reference,noise,...] [--reference NAME]

Settles the same seed-2500 snapshot as bench/forecast.py, runs the reference (by default the
forecast before issue 13's sixth round: evictions as configured, reclaim searches <= 16,
decisions once a minute then 1/60 of the lead time, 200 passes; `--reference` names another
variant, e.g. `round12`, the default from the sixth to the twelfth round) and each variant on
it, and prints one markdown row per variant: CPU seconds of both simulations, jobs with a start
(bound / likely), and over the jobs both forecast the median and p90 absolute difference of
starts in minutes, and how many bound starts came out more than a minute earlier than the
reference's (the side where a bound stops being one). Every variant's options are over the
old reference's (`REFERENCE`), whichever is the reference; `noise` shifts the reference.
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
    # Issue 13, thirteenth round: coarser passes than the sixth round's default (`round12`).
    "round12": {"backdate": True, "step_s": 120.0, "step_growth": 1 / 20, "max_decisions": 80},
    "backdate-3min-7pct-55": {"backdate": True, "step_s": 180.0, "step_growth": 1 / 14, "max_decisions": 55},
    "backdate-3min-10pct-45": {"backdate": True, "step_s": 180.0, "step_growth": 1 / 10, "max_decisions": 45},
    "backdate-4min-10pct-40": {"backdate": True, "step_s": 240.0, "step_growth": 1 / 10, "max_decisions": 40},
    "backdate-4min-10pct-45": {"backdate": True, "step_s": 240.0, "step_growth": 1 / 10, "max_decisions": 45},
    "backdate-4min-10pct-40-reclaim-32": {
        "backdate": True,
        "step_s": 240.0,
        "step_growth": 1 / 10,
        "max_decisions": 40,
        "reclaim_searches": 32,
    },
    "no-evictions-backdate-4min-10pct-40": {
        "evictions": "none",
        "backdate": True,
        "step_s": 240.0,
        "step_growth": 1 / 10,
        "max_decisions": 40,
    },
}


def run(snapshot: ClusterSnapshot, variant: dict, reference: dict) -> tuple[Forecast, float]:
    """`variant` over `reference` (a variant's own options) over `REFERENCE`."""
    options = {**REFERENCE, **reference, **variant}
    shift = options.pop("shift_s", 0.0)
    if shift:
        snapshot = replace(snapshot, now=snapshot.now + shift)
    fractions = {team.name: 0.5 for team in snapshot.teams}
    started = time.process_time()
    result = forecast(snapshot, likely_fraction=fractions, **options)
    return result, time.process_time() - started


def compare(reference: dict[int, float], other: dict[int, float]) -> tuple[float, float, int, int]:
    """Over the jobs both forecast: the median and p90 gap in minutes, how many starts came out
    more than a minute earlier than the reference's, and how many moved by more than a minute."""
    both = sorted(reference.keys() & other.keys())
    gaps = sorted(abs(reference[job] - other[job]) / 60 for job in both)
    earlier = sum(1 for job in both if other[job] < reference[job] - 60)
    moved = sum(1 for gap in gaps if gap > 1)
    return statistics.median(gaps), gaps[int(0.9 * (len(gaps) - 1))], earlier, moved


def main(argv=None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_queue_arguments(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    parser.add_argument("--reference", choices=sorted(VARIANTS), default="reference")
    args = parser.parse_args(argv)
    _, snapshot = settled_queue(args)
    gc.collect()
    gc.freeze()
    names = [name for name in args.variants.split(",") if name not in ("reference", args.reference)]
    against = VARIANTS[args.reference]
    reference, cpu = run(snapshot, {}, against)
    label = "reference" if args.reference == "reference" else f"{args.reference} (the reference)"
    rows = [
        "| variant | CPU s | jobs (bound / likely) | med (min) | p90 (min) | bound earlier | moved > 1 min |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {label} | {cpu:.1f} | {len(reference.latest)} / {len(reference.likely)} | 0 | 0 | 0 | 0 / 0 |",
    ]
    print("\n".join(rows), flush=True)
    for name in names:
        result, cpu = run(snapshot, VARIANTS[name], against if name == "noise" else {})
        bound, likely = compare(reference.latest, result.latest), compare(reference.likely, result.likely)
        row = (
            f"| {name} | {cpu:.1f} | {len(result.latest)} / {len(result.likely)} | {bound[0]:.1f} / {likely[0]:.1f} "
            f"| {bound[1]:.0f} / {likely[1]:.0f} | {bound[2]} | {bound[3]} / {likely[3]} |"
        )
        rows.append(row)
        print(row, flush=True)
    return rows


if __name__ == "__main__":
    main()
