"""The simulator on hand-computed schedules, and its guarantees on random replays."""

import random

import pytest

from scheduling.core.model import Group, PolicyConfig, Quota, Team
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.metrics import jain, summarize
from scheduling.sim.policies import make_policy
from scheduling.sim.trace import TraceJob, load_generic, trace_groups, with_estimates

TWO_NODES = custom_fleet(2, 8, racks=1, zones=1)
NO_CHECKPOINTS = SimConfig(checkpoint_interval_s=0, tick_s=0)


def job(job_id: int, submit: float, gpus: int, duration: float, team: str = "a", **extra) -> TraceJob:
    return TraceJob(job_id, submit, duration, gpus, team, **extra)


def starts(policy: str, jobs: list[TraceJob], *, estimate: str = "exact", nodes=TWO_NODES, **config) -> dict:
    jobs = with_estimates(jobs, estimate)
    sim = Simulation(
        nodes,
        (),
        jobs,
        make_policy(policy, durations={j.job_id: j.duration for j in jobs}),
        SimConfig(**{"checkpoint_interval_s": 0, "tick_s": 0, **config}),
        PolicyConfig(explain=False),
    ).run()
    return {job_id: record.first_start for job_id, record in sim.records.items()}


# A (8 GPUs, 100 s) runs; B, a 16-GPU gang, must wait for it; C is small.
GANG_BEHIND = [job(1, 0, 8, 100), job(2, 1, 16, 50), job(3, 2, 1, 10)]


def test_fifo_blocks_everything_behind_the_head():
    assert starts("fifo", GANG_BEHIND) == {1: 0, 2: 100, 3: 150}


def test_easy_backfills_a_job_that_ends_before_the_head_can_start():
    assert starts("easy", GANG_BEHIND) == {1: 0, 2: 100, 3: 2}


def test_easy_never_backfills_what_would_delay_the_head():
    long_small = [job(1, 0, 8, 100), job(2, 1, 16, 50), job(3, 2, 1, 200)]
    assert starts("easy", long_small) == {1: 0, 2: 100, 3: 150}


def test_sjf_takes_the_shortest_first_and_fifo_takes_the_oldest():
    trace = [job(1, 0, 16, 100), job(2, 1, 8, 300), job(3, 1, 8, 50), job(4, 1, 16, 10)]
    assert starts("sjf", trace) == {1: 0, 4: 100, 3: 110, 2: 110}
    assert starts("fifo", trace) == {1: 0, 2: 100, 3: 100, 4: 400}


def test_mlqueue_backfills_like_easy_and_reserves_for_the_blocked_gang():
    assert starts("mlqueue", GANG_BEHIND) == {1: 0, 2: 100, 3: 2}


def test_a_preempted_job_loses_the_work_since_its_checkpoint_and_pays_the_grace():
    nodes = custom_fleet(1, 8, racks=1, zones=1)
    trace = with_estimates([job(1, 0, 8, 1000, priority="P3"), job(2, 700, 8, 100, team="b", priority="P1")], "exact")
    sim = Simulation(
        nodes,
        (),
        trace,
        make_policy("mlqueue"),
        SimConfig(checkpoint_interval_s=300, grace_s=60, tick_s=0),
        PolicyConfig(explain=False, min_runtime_before_preempt_s=0),
    ).run()
    low, high = sim.records[1], sim.records[2]
    assert high.first_start == 760  # after the victim's 60 s grace
    assert low.preemptions == 1 and low.lost_gpu_s == (760 - 600) * 8  # checkpointed at 600
    assert low.end == 860 + (1000 - 600)  # resumes from its checkpoint once the P1 job is done


def random_trace(seed: int, count: int = 150) -> list[TraceJob]:
    rng = random.Random(seed)
    return with_estimates(
        [
            job(
                i,
                rng.uniform(0, 4000),
                rng.choice([1, 1, 2, 4, 8, 16, 24, 32]),
                rng.uniform(30, 900),
                team=rng.choice("abc"),
                priority=rng.choice(["P1", "P2", "P2", "P3"]),
            )
            for i in range(1, count + 1)
        ],
        rng.choice(["exact", "x2"]),
    )


@pytest.mark.parametrize("seed", range(4))
def test_mlqueue_never_over_allocates_in_a_random_replay(seed):
    fleet = custom_fleet(8, 8, racks=2, zones=2)
    teams = (
        Team("a", None, {"gpu:H100": Quota(24, 64)}),
        Team("b", None, {"gpu:H100": Quota(24, 64)}),
        Team("c", None, {"gpu:H100": Quota(16, 64)}),
    )
    config = SimConfig(
        checkpoint_interval_s=300,
        grace_s=30,
        tick_s=120,
        node_failures=3,
        failure_downtime_s=500,
        seed=seed,
        check_every_event=True,
    )
    sim = Simulation(
        fleet, teams, random_trace(seed), make_policy("mlqueue"), config, PolicyConfig(explain=False)
    ).run()
    assert all(record.end is not None for record in sim.records.values())  # everything finished
    assert sim.decisions > 0


def test_the_same_seed_gives_the_same_replay():
    def replay():
        fleet = custom_fleet(6, 8, racks=2, zones=1)
        sim = Simulation(
            fleet,
            (),
            random_trace(7),
            make_policy("mlqueue"),
            SimConfig(node_failures=2, seed=7),
            PolicyConfig(explain=False),
        ).run()
        return summarize(sim, entitlements={})

    assert replay() == replay()


def test_jain_index():
    assert jain([1, 1, 1]) == 1.0
    assert round(jain([1, 0, 0]), 4) == round(1 / 3, 4)


def test_fair_shares_water_fill():
    from scheduling.sim.metrics import fair_shares

    assert fair_shares({"a": 10, "b": 100, "c": 100}, 90, {}) == {"a": 10, "b": 40, "c": 40}
    assert fair_shares({"a": 100, "b": 100}, 90, {"a": 2, "b": 1}) == {"a": 60, "b": 30}
    assert fair_shares({"a": 5, "b": 5}, 90, {}) == {"a": 5, "b": 5}


def test_a_generic_trace_names_job_groups_and_their_limit_holds(tmp_path):
    trace = tmp_path / "groups.csv"
    trace.write_text(
        "job_id,submit_time,duration,num_gpus,team,gpu_type,priority,max_runtime,group\n"
        + "".join(f"{n},0,100,1,a,,,,7%2\n" for n in range(1, 6))
        + "6,0,100,1,a,,,,\n"
    )
    jobs = load_generic(trace)
    assert trace_groups(jobs) == {7: Group("array", 2)}
    sim = Simulation(TWO_NODES, (), jobs, make_policy("mlqueue"), NO_CHECKPOINTS, groups=trace_groups(jobs)).run()
    assert {n: r.first_start for n, r in sim.records.items()} == {1: 0, 2: 0, 3: 100, 4: 100, 5: 200, 6: 0}


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        (["7", "7"], "group '7': write ID%PARALLELISM, e.g. 17%4"),
        (["7%0", "7%0"], "group '7%0': write ID%PARALLELISM, e.g. 17%4"),
        (["7%2", "7%3"], "group 7: parallelism 2 and 3 in one trace"),
    ],
)
def test_a_bad_group_cell_is_refused_with_its_value(tmp_path, cells, message):
    trace = tmp_path / "bad.csv"
    rows = "".join(f"{n},0,100,1,a,,,,{cell}\n" for n, cell in enumerate(cells, start=1))
    trace.write_text("job_id,submit_time,duration,num_gpus,team,gpu_type,priority,max_runtime,group\n" + rows)
    with pytest.raises(ValueError) as error:
        trace_groups(load_generic(trace))
    assert str(error.value) == message


def test_a_job_its_teams_limit_never_admits_is_left_unfinished_not_waited_on_for_ever():
    """QA: `bench.replay --quotas` with a team's limit below one of its jobs never ended (ticks
    kept the replay going, simulated years on). An idle cluster whose pass starts none of the
    waiting jobs, with nothing left to arrive or end, stops; the others' figures stand."""
    teams = (Team("a", quotas={"gpu:H100": Quota(guaranteed=8, borrowing_limit=0)}), Team("b"))
    trace = [job(1, 0, 16, 100), job(2, 5, 8, 50), job(3, 10, 8, 30, team="b")]
    sim = Simulation(
        TWO_NODES,
        teams,
        trace,
        make_policy("mlqueue"),
        SimConfig(checkpoint_interval_s=0, tick_s=60, sample_s=60),
        PolicyConfig(explain=False),
    ).run()
    assert {job_id: record.first_start for job_id, record in sim.records.items()} == {1: None, 2: 5, 3: 10}
    assert sim.now < 3600 and list(sim.pending) == [1]
    assert summarize(sim, entitlements={})["unfinished"] == 1
