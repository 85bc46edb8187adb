"""Skipping the instants where no pass could decide anything (sim/gate.py) leaves the
schedule exactly as asking the policy at every instant that matters does (the reference
path, `skip_quiet_instants=False`), on random replays and on forecast-like runs of live jobs."""

import random

import pytest

from scheduling.core.model import PolicyConfig, Quota, Team, Topology
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.gate import Watched
from scheduling.sim.policies import make_policy
from scheduling.sim.trace import TraceJob, with_estimates
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running

TEAMS = (
    Team("a", None, {"gpu:H100": Quota(24, 64)}),
    Team("b", None, {"gpu:H100": Quota(16, 64)}),
    Team("c", None, {"gpu:H100": Quota(8, 64)}),
    Team("d", None, {}),
)


def random_trace(seed: int, count: int = 160) -> list[TraceJob]:
    """Bursts of arrivals on a small cluster, so a queue builds up and most instants are quiet."""
    rng = random.Random(seed)
    return with_estimates(
        [
            TraceJob(
                i,
                rng.uniform(0, 3000) if rng.random() < 0.7 else rng.uniform(3000, 20000),
                rng.uniform(30, 2400),
                rng.choice([1, 1, 1, 2, 4, 8, 8, 16, 24]),
                rng.choice("abcd"),
                priority=rng.choice(["P1"] + ["P2"] * 16 + ["P3"] * 3),
            )
            for i in range(1, count + 1)
        ],
        rng.choice(["exact", "x2"]),
    )


def outcome(sim: Simulation) -> tuple:
    lives = {
        job_id: (
            r.first_start,
            r.end,
            r.preemptions,
            r.restarts_used,
            r.failed_at,
            round(r.lost_gpu_s, 6),
            round(r.gpu_s, 6),
        )
        for job_id, r in sim.records.items()
    }
    return lives, sim.samples


def replay(
    policy: str, seed: int, *, skip: bool, failures: int = 0, step: float = 0.0, reclaim: bool = True
) -> Simulation:
    trace = random_trace(seed)
    config = SimConfig(
        checkpoint_interval_s=60,
        grace_s=30,
        tick_s=300,
        sample_s=900,
        node_failures=failures,
        failure_downtime_s=900,
        seed=seed,
        check_every_event=True,
        decision_step_s=step,
        skip_quiet_instants=skip,
    )
    return Simulation(
        custom_fleet(6, 8, racks=2, zones=1),
        TEAMS,
        trace,
        make_policy(policy, durations={j.job_id: j.duration for j in trace}),
        config,
        PolicyConfig(explain=False, min_runtime_before_preempt_s=120, reclaim=reclaim),
    ).run()


def test_mlqueue_replays_the_same_schedule_with_fewer_passes():
    quiet = 0
    for seed in range(6):
        reference = replay("mlqueue", seed, skip=False, failures=seed % 3)
        gated = replay("mlqueue", seed, skip=True, failures=seed % 3)
        assert outcome(gated) == outcome(reference)
        assert gated.decisions + gated.quiet == reference.decisions
        quiet += gated.quiet
    assert quiet > 0


def test_without_reclaim_the_gate_skips_the_instants_where_only_a_reclaim_was_possible():
    quiet, quiet_with_reclaim = 0, 0
    for seed in range(3):
        reference = replay("mlqueue", seed, skip=False, reclaim=False)
        gated = replay("mlqueue", seed, skip=True, reclaim=False)
        assert outcome(gated) == outcome(reference)
        quiet += gated.quiet
        quiet_with_reclaim += replay("mlqueue", seed, skip=True).quiet
    assert quiet > quiet_with_reclaim


@pytest.mark.parametrize("policy", ["fifo", "easy", "sjf"])
def test_the_baselines_replay_the_same_schedule_with_fewer_passes(policy):
    quiet = 0
    for seed in range(3):
        reference, gated = replay(policy, seed, skip=False, failures=1), replay(policy, seed, skip=True, failures=1)
        assert outcome(gated) == outcome(reference)
        quiet += gated.quiet
    assert quiet > 0


def test_decision_steps_fall_on_the_same_instants_when_passes_are_skipped():
    quiet = 0
    for seed in range(3):
        reference, gated = replay("mlqueue", seed, skip=False, step=90), replay("mlqueue", seed, skip=True, step=90)
        assert outcome(gated) == outcome(reference)
        quiet += gated.quiet
    assert quiet > 0


def live_state(seed: int):
    """A forecast's input: live jobs of every kind (gangs with topology hints, CPU jobs, held
    jobs, dependencies, back-off, P0 to P3) on a full cluster, some runs being preempted."""
    rng = random.Random(seed)
    nodes = cluster(rack("z1-r1", 4), rack("z1-r2", 4), rack("z1-c1", 2, gpu_type=None, cpus=32))
    gpu_hosts = [node.name for node in nodes if node.gpu_type]
    rng.shuffle(gpu_hosts)
    busy, job_id = [], 1
    while gpu_hosts:
        count = min(len(gpu_hosts), rng.choice([1, 1, 2]))
        hosts, gpu_hosts = gpu_hosts[:count], gpu_hosts[count:]
        busy.append(
            running(
                job_id,
                hosts,
                team=rng.choice("abcd"),
                age=rng.uniform(100, 3000),
                remaining=rng.uniform(600, 4 * HOUR),
                priority=rng.choice(["P1", "P2"]),
                preempting=rng.random() < 0.1,
            )
        )
        job_id += 1
    busy.append(running(job_id, ["z1-c1-n1"], gpus_per_node=0, gpu_type=None, cpus=24, team="d"))
    pending = []
    for job_id in range(100, 150):
        gpus = rng.choice([0, 4, 8, 8, 16, 24])
        pending.append(
            job(
                job_id,
                gpus=gpus,
                gpu_type="H100" if gpus else None,
                cpus=rng.choice([16, 32]),
                **({} if gpus else {"tasks": rng.choice([1, 2])}),
                team=rng.choice("abcd"),
                runtime=rng.uniform(600, 3 * HOUR),
                age=rng.uniform(0, 9000),
                priority=rng.choice(["P0"] + ["P2"] * 8 + ["P3"] * 2),
                topology=rng.choice(list(Topology)) if gpus > 8 else Topology.NONE,
                held=rng.random() < 0.05,
                waiting_on=(job_id - 1,) if rng.random() < 0.1 else (),
                not_before=NOW + rng.uniform(0, 4 * HOUR) if rng.random() < 0.3 else None,
            )
        )
    return nodes, busy, pending, rng


def test_a_forecast_run_of_live_jobs_gives_the_same_starts():
    quiet = 0
    for seed in range(6):
        nodes, busy, pending, rng = live_state(seed)
        ends = tuple((run, NOW + rng.uniform(0.1, 1.0) * (run.expected_end - NOW)) for run in busy)
        jobs = [
            TraceJob(
                p.job_id,
                max(NOW, p.not_before or NOW),
                p.max_runtime_s * rng.uniform(0.2, 1.0),
                p.shape.units,
                p.team,
                p.shape.gpu_type,
                p.priority,
                p.max_runtime_s,
                view=p,
            )
            for p in pending
        ]
        reference, gated = forecast_run(nodes, jobs, ends, skip=False), forecast_run(nodes, jobs, ends, skip=True)
        assert outcome(gated) == outcome(reference)
        quiet += gated.quiet
    assert quiet > 0


def forecast_run(nodes, jobs, ends, *, skip: bool) -> Simulation:
    config = SimConfig(
        checkpoint_interval_s=0,
        grace_s=120,
        tick_s=0,
        sample_s=0,
        decision_step_s=60,
        step_growth=1 / 60,
        skip_quiet_instants=skip,
    )
    # No guarantees here (the replays above reclaim): a reclaim of work that never
    # checkpoints can go round in circles, which a forecast cuts short by its budget.
    return Simulation(
        list(nodes), (), jobs, make_policy("mlqueue"), config, PolicyConfig(explain=False), running_at_start=ends
    ).run()


def test_a_watched_dict_reports_every_change():
    seen = []
    watched = Watched(lambda k, v: seen.append(("+", k, v)), lambda k, v: seen.append(("-", k, v)))
    watched[1] = "a"
    watched[1] = "b"
    del watched[1]
    watched[2] = "c"
    assert watched.pop(2) == "c" and watched.pop(3, None) is None
    assert seen == [("+", 1, "a"), ("-", 1, "a"), ("+", 1, "b"), ("-", 1, "b"), ("+", 2, "c"), ("-", 2, "c")]
    with pytest.raises(TypeError):
        watched.update({4: "d"})
