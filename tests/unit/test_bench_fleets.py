"""The benchmark's fleets and workloads: the advertised sizes, never an over-allocated node,
and the same input for the same seed, so benchmark figures compare like with like. No database."""

from collections import Counter, defaultdict

import pytest

from bench.fleets import build_fleet, build_teams, build_workload, capacity, custom_fleet
from scheduling.core.model import Node, RunningJob

NOW = 1_767_225_600.0


def workload(fleet: list[Node], *, pending_tasks: int = 400, seed: int = 1):
    return build_workload(fleet, build_teams(fleet), pending_tasks=pending_tasks, fill=0.9, seed=seed, now=NOW)


def test_seed_2500_has_4000_gpus_split_70_20_10_and_2000_cpu_hosts():
    fleet = build_fleet("seed-2500")
    assert len(fleet) == 2500
    assert sum(node.gpus for node in fleet) == 4000
    assert Counter(node.gpu_type for node in fleet) == {"H100": 350, "A100": 100, "L40S": 50, None: 2000}
    assert len({node.name for node in fleet}) == 2500


def test_seed_10k_has_10000_gpus_in_32_racks_over_2_zones():
    fleet = build_fleet("seed-10k")
    assert (len(fleet), sum(node.gpus for node in fleet)) == (1250, 10_000)
    assert len({node.rack for node in fleet}) == 32
    assert Counter(node.zone for node in fleet) == {"z1": 625, "z2": 625}
    assert Counter(node.gpu_type for node in fleet) == {"H100": 875, "A100": 250, "L40S": 125}


def test_custom_fleet_spreads_nodes_over_racks_and_zones():
    fleet = custom_fleet(100, 4, racks=10, zones=5)
    assert sum(node.gpus for node in fleet) == 400
    assert Counter(node.rack for node in fleet) == {rack: 10 for rack in {node.rack for node in fleet}}
    assert len({node.zone for node in fleet}) == 5


def test_unknown_fleet_names_the_known_ones():
    with pytest.raises(ValueError, match="seed-2500"):
        build_fleet("seed-1")


def test_team_guarantees_add_up_to_the_fleet():
    fleet = build_fleet("seed-2500")
    teams = build_teams(fleet)
    for rclass, total in capacity(fleet).items():
        divisions = [team for team in teams if team.parent is None]
        assert sum(division.quotas[rclass].guaranteed for division in divisions) == total
        for division in divisions:
            members = [team for team in teams if team.parent == division.name]
            assert sum(team.quotas[rclass].guaranteed for team in members) == division.quotas[rclass].guaranteed


def assert_never_over_allocated(fleet: list[Node], running: list[RunningJob]) -> None:
    nodes = {node.name: node for node in fleet}
    gpus, cpus, memory = defaultdict(list), Counter(), Counter()
    for job in running:
        for task in job.tasks:
            assert nodes[task.node].gpu_type == job.gpu_type
            gpus[task.node] += task.gpu_indices
            cpus[task.node] += task.cpus
            memory[task.node] += task.memory_gb
    for name, indices in gpus.items():
        node = nodes[name]
        assert len(indices) == len(set(indices)) and all(0 <= i < node.gpus for i in indices), name
        assert cpus[name] <= node.cpus and memory[name] <= node.memory_gb, name


@pytest.mark.parametrize("name", ["seed-2500", "seed-10k"])
def test_running_jobs_never_over_allocate_a_node_and_fill_the_cluster(name):
    fleet = build_fleet(name)
    running, _ = workload(fleet)
    assert_never_over_allocated(fleet, running)
    gpu_total = sum(node.gpus for node in fleet)
    assert 0.80 * gpu_total <= sum(job.gpus for job in running) <= 0.91 * gpu_total


def test_running_jobs_started_in_the_past_and_end_in_the_future():
    running, _ = workload(build_fleet("seed-10k"))
    assert all(job.started_at < NOW < job.expected_end for job in running)
    assert all(job.started_at <= job.last_checkpoint_at <= NOW for job in running if job.checkpointing)


@pytest.mark.parametrize("pending_tasks", [1, 250, 1000])
def test_pending_task_count_is_within_5_percent_of_the_request(pending_tasks):
    _, pending = workload(build_fleet("seed-2500"), pending_tasks=pending_tasks)
    assert abs(sum(job.shape.tasks for job in pending) - pending_tasks) <= 0.05 * pending_tasks


def test_job_ids_are_unique_across_running_and_pending():
    running, pending = workload(build_fleet("seed-2500"))
    ids = [job.job_id for job in running] + [job.job_id for job in pending]
    assert len(ids) == len(set(ids))


def test_the_same_seed_gives_the_same_workload_and_another_seed_does_not():
    fleet = build_fleet("seed-2500")
    assert workload(fleet, seed=7) == workload(fleet, seed=7)
    assert workload(fleet, seed=7) != workload(fleet, seed=8)
