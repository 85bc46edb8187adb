"""Job groups in the simulator and the forecast: a group's parallelism limit holds there as in
the leader's pass (issue 16)."""

from dataclasses import replace

from scheduling.core.model import Group
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.forecast import forecast
from scheduling.sim.policies import MlqueuePolicy
from scheduling.sim.trace import TraceJob
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running, snapshot

ARRAY = 100
CONFIG = SimConfig(checkpoint_interval_s=0, tick_s=0, sample_s=0)


def element(job_id: int, *, submit: float = 0.0, duration: float = 1000.0) -> TraceJob:
    return TraceJob(job_id, submit, duration, 1, "vision", "H100", "P2", duration, group=ARRAY)


def simulate(jobs, *, parallelism: int = 2, config: SimConfig = CONFIG, **extra) -> Simulation:
    nodes = list(cluster(rack("z1-r1", 1)))  # one node, 8 GPUs: room for every element at once
    groups = {ARRAY: Group("array", parallelism)}
    return Simulation(nodes, (), jobs, MlqueuePolicy(), config, groups=groups, **extra).run()


def starts(sim: Simulation) -> dict[int, float | None]:
    return {job_id: record.first_start for job_id, record in sorted(sim.records.items())}


def test_an_array_of_six_with_parallelism_two_starts_in_three_waves():
    sim = simulate([element(n) for n in range(1, 7)])
    assert starts(sim) == {1: 0.0, 2: 0.0, 3: 1000.0, 4: 1000.0, 5: 2000.0, 6: 2000.0}


def test_an_element_arriving_while_the_group_is_full_waits_for_a_slot_not_for_room():
    # The node has 6 GPUs free at 500 s; the running elements hold the group's two slots.
    sim = simulate([element(1), element(2), element(3, submit=500.0)])
    assert starts(sim) == {1: 0.0, 2: 0.0, 3: 1000.0}


def test_without_the_group_they_would_all_start_at_once():
    jobs = [replace(element(n), group=None) for n in range(1, 7)]
    assert set(starts(simulate(jobs)).values()) == {0.0}


def test_a_running_element_takes_its_slot_and_passes_its_group_on_when_it_starts():
    sim = simulate([element(n) for n in range(1, 4)], config=replace(CONFIG, stop_once_all_started=True))
    assert {run.placement.group for run in sim.running.values()} == {ARRAY}
    assert starts(sim) == {1: 0.0, 2: 0.0, 3: 1000.0}


def test_a_preempted_element_waits_again_as_one_of_its_group():
    # A P0 job takes the node at 100 s: elements 1 and 2 are evicted (120 s of grace), restart
    # when it ends, and element 3 still waits for one of them, not for the node alone.
    urgent = TraceJob(9, 100.0, 500.0, 8, "vision", "H100", "P0", 500.0)
    sim = simulate([element(1), element(2), element(3), urgent])
    assert starts(sim) == {1: 0.0, 2: 0.0, 3: 1720.0, 9: 220.0}
    assert (sim.records[1].preemptions, sim.records[1].end, sim.records[3].end) == (1, 1720.0, 2720.0)


def test_the_forecast_keeps_a_groups_parallelism():
    nodes = cluster(rack("z1-r1", 1))
    elements = [replace(job(n, gpus=1, runtime=HOUR, age=60 - n), group=ARRAY) for n in range(1, 7)]
    state = replace(snapshot(nodes, pending=elements), groups={ARRAY: Group("array", 2)})
    result = forecast(state, step_s=0)
    assert result.latest == {1: NOW, 2: NOW, 3: NOW + HOUR, 4: NOW + HOUR, 5: NOW + 2 * HOUR, 6: NOW + 2 * HOUR}
    assert result.complete


def test_the_forecast_counts_a_running_element_against_its_group():
    nodes = cluster(rack("z1-r1", 1))
    busy = running(1, ["z1-r1-n1"], gpus_per_node=1, remaining=HOUR / 2, group=ARRAY)
    waiting = [replace(job(n, gpus=1, runtime=HOUR, age=60 - n), group=ARRAY) for n in range(2, 5)]
    state = replace(snapshot(nodes, pending=waiting, running_jobs=[busy]), groups={ARRAY: Group("array", 2)})
    assert forecast(state, step_s=0).latest == {2: NOW, 3: NOW + HOUR / 2, 4: NOW + HOUR}
