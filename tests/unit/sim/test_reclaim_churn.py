"""The simulator remembers evictions as the store does, so the policy's eviction memory works
in replays; and the replay reports completion times against `easy`."""

import random

import pytest

from scheduling.core.model import PolicyConfig, Quota, Team
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.metrics import table_row, versus
from scheduling.sim.policies import make_policy
from scheduling.sim.trace import TraceJob, with_estimates

TEAMS = (
    Team("a", None, {"gpu:H100": Quota(24, 64)}),
    Team("b", None, {"gpu:H100": Quota(24, 64)}),
    Team("c", None, {"gpu:H100": Quota(16, 64)}),
)


def busy_trace(seed: int, count: int = 200) -> list[TraceJob]:
    rng = random.Random(seed)
    return with_estimates(
        [
            TraceJob(i, rng.uniform(0, 6000), rng.uniform(300, 4000), rng.choice([1, 1, 2, 4, 8, 8]), rng.choice("abc"))
            for i in range(1, count + 1)
        ],
        "x2",
    )


def replay(seed: int, config: PolicyConfig) -> Simulation:
    fleet = custom_fleet(8, 8, racks=2, zones=1)
    return Simulation(
        fleet,
        TEAMS,
        busy_trace(seed),
        make_policy("mlqueue"),
        SimConfig(checkpoint_interval_s=600, grace_s=30, tick_s=120, check_every_event=True),
        config,
    ).run()


def test_a_restarted_job_carries_its_eviction_count_to_the_policy():
    seen: dict[int, int] = {}

    class Watching:
        name, preempts, uses_time = "mlqueue", True, True

        def decide(self, snapshot):
            for job in snapshot.running:
                seen[job.job_id] = max(seen.get(job.job_id, 0), job.preemptions)
            return make_policy("mlqueue").decide(snapshot)

    fleet = custom_fleet(8, 8, racks=2, zones=1)
    sim = Simulation(
        fleet,
        TEAMS,
        busy_trace(1),
        Watching(),
        SimConfig(checkpoint_interval_s=600, grace_s=30, tick_s=120),
        PolicyConfig(explain=False),
    ).run()
    evicted = {job_id: r.preemptions for job_id, r in sim.records.items() if r.preemptions}
    assert evicted, "the trace should make the policy reclaim"
    # A job's last attempt started after all but its last eviction (none follows a finish).
    assert all(seen[job_id] >= count - 1 for job_id, count in evicted.items())
    assert any(seen[job_id] >= 1 for job_id in evicted)


@pytest.mark.parametrize("seed", range(3))
def test_no_job_is_reclaimed_more_often_than_allowed(seed):
    capped = replay(seed, PolicyConfig(explain=False, reclaim_max_evictions=1, reclaim_wait_bound_s=1e12))
    assert all(r.end is not None for r in capped.records.values())
    assert max(r.preemptions for r in capped.records.values()) <= 1


def test_versus_reports_ratios_to_the_baseline():
    mine = {"policy": "mlqueue", "avg_wait_s": 50.0, "max_wait_s": 300.0, "avg_jct_s": 80.0, "jain_fairness": 0.9}
    easy = {"policy": "easy", "avg_wait_s": 100.0, "max_wait_s": 400.0, "avg_jct_s": 100.0, "jain_fairness": 0.8}
    found = versus(mine, easy)
    assert (found["avg_wait_vs_easy"], found["max_wait_vs_easy"], found["avg_jct_vs_easy"]) == (0.5, 0.75, 0.8)
    assert found["baseline"]["avg_jct_s"] == 100.0
    row = table_row(
        {
            **mine,
            **found,
            "p50_wait_s": 0,
            "p95_wait_s": 10,
            "p99_wait_s": 20,
            "bounded_slowdown": 1.5,
            "utilization": 0.5,
            "preemptions": 1234,
            "gpu_hours_lost": 5.5,
        }
    )
    assert row == "| mlqueue | 50 | 0 | 10 | 20 | 300 | 80 | 0.80 | 1.50 | 0.5000 | 0.9000 | 1,234 | 6 |"
