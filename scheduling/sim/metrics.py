"""A replay's figures: waits, completion times, slowdown, utilization, fairness."""

import math
import statistics
from collections import defaultdict

from scheduling.sim.engine import Simulation

SIZE_BUCKETS = (("1", 1, 1), ("2-8", 2, 8), ("9-32", 9, 32), ("33+", 33, 1 << 30))
SLOWDOWN_FLOOR_S = 10.0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] if ordered else 0.0


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    values = [v for v in values if v >= 0]
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def summarize(sim: Simulation, *, entitlements: dict[str, float]) -> dict:
    done = [r for r in sim.records.values() if r.end is not None]
    waits = [r.first_start - r.job.submit for r in done]
    gpus = sum(n.gpus for n in sim.nodes)
    start = min((r.job.submit for r in done), default=0.0)
    makespan = max((r.end for r in done), default=0.0) - start
    used = sum(r.gpu_s for r in sim.records.values())
    return {
        "jobs": len(sim.records),
        "finished": len(done),
        "unfinished": len(sim.records) - len(done),  # past a horizon, or never startable (engine.run)
        "gpus": gpus,
        "avg_wait_s": round(statistics.fmean(waits), 1) if waits else 0.0,
        "p50_wait_s": round(percentile(waits, 50), 1),
        "p95_wait_s": round(percentile(waits, 95), 1),
        "p99_wait_s": round(percentile(waits, 99), 1),
        "max_wait_s": round(max(waits, default=0.0), 1),
        "avg_jct_s": round(statistics.fmean(r.end - r.job.submit for r in done), 1) if done else 0.0,
        "bounded_slowdown": round(
            statistics.fmean(max(1.0, (r.end - r.job.submit) / max(r.job.duration, SLOWDOWN_FLOOR_S)) for r in done), 3
        )
        if done
        else 0.0,
        "utilization": round(used / (gpus * makespan), 4) if gpus and makespan else 0.0,
        "makespan_s": round(makespan, 1),
        "wait_by_size_s": _wait_by_size(done),
        "wait_by_team_s": _wait_by_team(done),
        "jain_fairness": round(_fairness(sim, entitlements), 4),
        "preemptions": sum(r.preemptions for r in sim.records.values()),
        "restarts": sum(r.restarts_used for r in sim.records.values()),
        "gave_up": sum(r.failed_at is not None for r in sim.records.values()),
        "gpu_hours_lost": round(sum(r.lost_gpu_s for r in sim.records.values()) / 3600, 1),
        "decisions": sim.decisions,
    }


def versus(figures: dict, baseline: dict) -> dict:
    """The replay's averages and longest wait as ratios to another policy's on the same trace
    (e.g. `avg_jct_vs_easy`: below 1 is better). JCT is the one to watch with preemption: the
    queue wait counts only a job's first start, so churn (waiting again, redoing lost work)
    shows in completion times alone."""
    name = baseline["policy"]
    found = {
        "baseline": {key: baseline[key] for key in ("policy", "avg_wait_s", "max_wait_s", "avg_jct_s", "jain_fairness")}
    }
    for key in ("avg_wait_s", "max_wait_s", "avg_jct_s"):
        ratio = figures[key] / baseline[key] if baseline[key] else None
        found[f"{key[:-2]}_vs_{name}"] = round(ratio, 3) if ratio is not None else None
    return found


TABLE_COLUMNS = (
    "policy",
    "avg wait s",
    "p50",
    "p95",
    "p99",
    "max wait s",
    "avg JCT s",
    "JCT vs easy",
    "bounded slowdown",
    "utilization",
    "Jain",
    "preemptions",
    "GPU-h lost",
)


def table_row(figures: dict) -> str:
    """One markdown row of BENCHMARKS.md's replay tables."""
    ratio = figures.get("avg_jct_vs_easy")
    cells = (
        figures["policy"],
        f"{figures['avg_wait_s']:,.0f}",
        f"{figures['p50_wait_s']:,.0f}",
        f"{figures['p95_wait_s']:,.0f}",
        f"{figures['p99_wait_s']:,.0f}",
        f"{figures['max_wait_s']:,.0f}",
        f"{figures['avg_jct_s']:,.0f}",
        f"{ratio:.2f}" if ratio is not None else ("1.00" if figures["policy"] == "easy" else "-"),
        f"{figures['bounded_slowdown']:.2f}",
        f"{figures['utilization']:.4f}",
        f"{figures['jain_fairness']:.4f}",
        f"{figures['preemptions']:,}",
        f"{figures['gpu_hours_lost']:,.0f}",
    )
    return "| " + " | ".join(cells) + " |"


def _wait_by_size(done) -> dict[str, float]:
    found = {}
    for label, low, high in SIZE_BUCKETS:
        waits = [r.first_start - r.job.submit for r in done if low <= r.job.gpus <= high]
        found[label] = round(statistics.fmean(waits), 1) if waits else None
    return found


def _wait_by_team(done) -> dict[str, float]:
    waits = defaultdict(list)
    for r in done:
        waits[r.job.team].append(r.first_start - r.job.submit)
    return {team: round(statistics.fmean(w), 1) for team, w in sorted(waits.items())}


def _fairness(sim: Simulation, entitlements: dict[str, float]) -> float:
    """Jain's index over teams of (GPUs held) / (GPUs entitled), averaged over the samples
    taken while someone waited. A team's entitlement at a sample is its max-min fair share
    of the cluster given what each team asked for then (held + waiting), weighted by its
    guarantee when there are guarantees: a team asking for less than its share is owed what
    it asked; the rest is split among the others. Over a whole replay every job ends, so
    totals alone would rate every policy fair; the index is taken while there is contention."""
    capacity = sum(n.gpus for n in sim.nodes)
    values = []
    for held, asked in sim.samples:
        owed = fair_shares(asked, capacity, entitlements)
        values.append(jain([held.get(team, 0) / owed[team] for team in asked if owed[team] > 0]))
    return statistics.fmean(values) if values else 1.0


def fair_shares(asked: dict[str, int], capacity: float, weights: dict[str, float]) -> dict[str, float]:
    """Max-min fair (water-filling) division of `capacity` among teams asking `asked`."""
    weight = {team: (weights.get(team, 0.0) if any(weights.values()) else 1.0) or 1e-9 for team in asked}
    owed, left, open_teams = {}, float(capacity), set(asked)
    while open_teams and left > 1e-9:
        per_weight = left / sum(weight[t] for t in open_teams)
        done = {t for t in open_teams if asked[t] - owed.get(t, 0.0) <= per_weight * weight[t]}
        if not done:
            for t in open_teams:
                owed[t] = owed.get(t, 0.0) + per_weight * weight[t]
            break
        for t in done:
            left -= asked[t] - owed.get(t, 0.0)
            owed[t] = float(asked[t])
        open_teams -= done
    return {team: owed.get(team, 0.0) for team in asked}


def by_team(sim: Simulation) -> dict[str, dict]:
    """Each team's figures in a replay: its jobs' average and p95 wait, average completion
    time, the GPU-hours it held and lost, and its share of all the GPU-hours held (lost work
    included: GPUs held are GPUs no one else had). Waits and completion times count the jobs
    that finished."""
    records = defaultdict(list)
    for record in sim.records.values():
        records[record.job.team].append(record)
    held = sum(r.gpu_s for r in sim.records.values())
    return {team: _team_figures(own, held) for team, own in sorted(records.items())}


def _team_figures(records: list, held_total: float) -> dict:
    done = [r for r in records if r.end is not None]
    waits = [r.first_start - r.job.submit for r in done]
    held = sum(r.gpu_s for r in records)
    return {
        "jobs": len(records),
        "finished": len(done),
        "unfinished": len(records) - len(done),
        "avg_wait_s": round(statistics.fmean(waits), 1) if waits else 0.0,
        "p95_wait_s": round(percentile(waits, 95), 1),
        "avg_jct_s": round(statistics.fmean(r.end - r.job.submit for r in done), 1) if done else 0.0,
        "gpu_hours": round(held / 3600, 2),
        "gpu_hours_lost": round(sum(r.lost_gpu_s for r in records) / 3600, 2),
        "preemptions": sum(r.preemptions for r in records),
        "share": round(held / held_total, 4) if held_total else 0.0,
    }
