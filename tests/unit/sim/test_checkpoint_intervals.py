"""The simulator checkpoints each job at its own interval (the spec's `interval_minutes`), the
configured one being the default; a live job resumed by a forecast counts from its real last
confirmed checkpoint."""

import pytest

from scheduling.core.model import JobShape, PolicyConfig
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.policies import make_policy
from scheduling.sim.trace import TraceJob, with_estimates
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running

ONE_NODE = custom_fleet(1, 8, racks=1, zones=1)
NO_MINIMUM = PolicyConfig(explain=False, min_runtime_before_preempt_s=0)


def simulate(trace, *, nodes=ONE_NODE, running_at_start=(), **config):
    return Simulation(
        list(nodes),
        (),
        with_estimates(trace, "exact"),
        make_policy("mlqueue"),
        SimConfig(**{"checkpoint_interval_s": 300, "grace_s": 60, "tick_s": 0, "sample_s": 0, **config}),
        NO_MINIMUM,
        running_at_start=running_at_start,
    ).run()


@pytest.mark.parametrize("own_interval, saved_until", [(None, 900), (600, 600), (1000, 1000), (2000, 0)])
def test_a_preempted_job_keeps_the_work_up_to_its_own_last_checkpoint(own_interval, saved_until):
    trace = [
        TraceJob(1, 0, 10_000, 8, "a", priority="P3", checkpoint_interval_s=own_interval),
        TraceJob(2, 1000, 100, 8, "b", priority="P1"),
    ]
    victim = simulate(trace).records[1]  # preempted at 1,000 s, stopped at 1,060 s
    assert victim.preemptions == 1
    assert victim.lost_gpu_s == (1060 - saved_until) * 8


@pytest.mark.parametrize(
    "confirmed, own_interval, lost_s",
    [
        (NOW - 100, 600, 160),  # no new checkpoint before it stops: lost since the confirmed one
        (NOW - 100, 120, 40),  # one more, 120 s after the confirmed one
        (None, None, HOUR + 60),  # nothing confirmed, none expected: the whole run
    ],
)
def test_a_live_job_counts_from_its_real_last_checkpoint(confirmed, own_interval, lost_s):
    nodes = cluster(rack("z1-r1", 1))
    live = running(
        1,
        ["z1-r1-n1"],
        priority="P3",
        age=HOUR,
        remaining=HOUR,
        checkpointing=own_interval is not None,
        last_checkpoint_at=confirmed,
        checkpoint_interval_s=own_interval,
    )
    sim = simulate(
        [TraceJob(2, NOW, 100, 8, "b", priority="P1")],
        nodes=nodes,
        checkpoint_interval_s=0,
        running_at_start=((live, NOW + HOUR),),
    )
    assert sim.records[1].lost_gpu_s == pytest.approx(lost_s * 8)


def test_a_live_job_preempted_in_the_simulation_waits_again_with_its_own_shape_and_settings():
    """A CPU job of 2 x 64 CPUs, preempted for a P1 job, comes back as itself (not as a
    fleet-GPU job of as many GPUs as it held CPUs), so it restarts on the CPU nodes."""
    nodes = cluster(rack("z1-cpu", 2, gpu_type=None), rack("z1-r1", 1))
    live = running(
        1,
        ["z1-cpu-n1", "z1-cpu-n2"],
        gpu_type=None,
        gpus_per_node=0,
        cpus=64,
        memory_gb=200,
        team="a",
        priority="P3",
        age=HOUR,
        remaining=HOUR,
        checkpoint_interval_s=600,
    )
    preemptor = TraceJob(
        2,
        NOW,
        600,
        128,
        "b",
        priority="P1",
        max_runtime=600,
        view=job(
            2, gpu_type=None, gpus=0, tasks=2, cpus=64, memory_gb=200, team="b", priority="P1", runtime=600, age=0
        ),
    )
    sim = simulate([preemptor], nodes=nodes, checkpoint_interval_s=0, running_at_start=((live, NOW + HOUR),))
    victim = sim.records[1]
    assert victim.preemptions == 1
    assert victim.job.shape("H100") == JobShape(None, 2, 0, 64, 200)
    assert (victim.job.team, victim.job.priority) == ("a", "P3")
    # It stops at NOW + 60, job 2 runs 600 s; it reruns the 2 h it asked for, less the 3,600 s
    # saved by its 600 s checkpoints.
    assert sim.records[2].first_start == NOW + 60
    assert victim.end == NOW + 660 + 2 * HOUR - HOUR


@pytest.mark.parametrize("overhead", [0, 300])
def test_a_restart_costs_its_overhead_before_work_resumes_and_the_first_start_does_not(overhead):
    """Preempted at 1,000 s and stopped at 1,060 s with 900 s saved, the victim restarts at 1,160
    s (after the P1 job's 100 s) and needs 10,000 - 900 s more, plus the restart's overhead, which
    counts as lost work; its first start paid none."""
    trace = [TraceJob(1, 0, 10_000, 8, "a", priority="P3"), TraceJob(2, 1000, 100, 8, "b", priority="P1")]
    sim = simulate(trace, restart_overhead_s=overhead)
    victim = sim.records[1]
    assert victim.end == 1160 + overhead + 10_000 - 900
    assert sim.records[2].end == 1060 + 100  # the preemptor's first start: no overhead
    assert victim.lost_gpu_s == (1060 - 900) * 8


def test_a_job_preempted_during_its_restart_overhead_keeps_only_what_it_had_saved():
    trace = [
        TraceJob(1, 0, 10_000, 8, "a", priority="P3"),
        TraceJob(2, 1000, 100, 8, "b", priority="P1"),
        TraceJob(3, 1200, 100, 8, "c", priority="P1"),
    ]
    victim = simulate(trace, restart_overhead_s=300).records[1]
    # Restarted at 1,160 s; evicted again at 1,200 s, inside its 300 s overhead: it stops at 1,260 s
    # having saved nothing new, so the whole 100 s of that attempt is lost too.
    assert victim.preemptions == 2
    assert victim.lost_gpu_s == ((1060 - 900) + (1260 - 1160)) * 8
