"""Passes whose cost follows what changed: the simulator tells its policy which jobs started
and stopped running since the last pass (`Scheduler.schedule(moved=...)`), and a kept
`Scheduler` keeps the domains each running job spans for victim searches. The forecast's
starts are exactly those of fresh passes that keep and are told nothing."""

import argparse
from dataclasses import replace

import pytest

from bench.cycle import NOW, add_jobs, apply, settle
from bench.fleets import build_teams, build_workload, custom_fleet
from scheduling.core.fairshare import Ledger
from scheduling.core.model import ClusterSnapshot
from scheduling.core.scheduler import Scheduler, schedule
from scheduling.core.state import ClusterState
from scheduling.sim.forecast import simulate
from scheduling.sim.policies import MlqueuePolicy
from tests.unit.core.builders import cluster, rack, running
from tests.unit.sim.test_quiet_instants import TEAMS, live_state


def fresh_passes(self, snapshot, moved=None):
    """The reference: the core's pure pass on each snapshot, told nothing, keeping nothing."""
    return schedule(snapshot)


def both_ways(snapshot: ClusterSnapshot, monkeypatch, **options) -> tuple:
    fraction = {team.name: 0.5 for team in snapshot.teams} or None
    runs = [simulate(snapshot, None, **options), simulate(snapshot, fraction, **options)]
    with monkeypatch.context() as patched:
        patched.setattr(MlqueuePolicy, "decide", fresh_passes)
        reference = [simulate(snapshot, None, **options), simulate(snapshot, fraction, **options)]
    return runs, reference


def bench_snapshot(nodes: int, pending: int, seed: int) -> ClusterSnapshot:
    """The bench's settled queue (bench/forecast.py), on a small fleet."""
    fleet = custom_fleet(nodes, 8, racks=4, zones=2)
    teams = build_teams(fleet)
    busy, waiting = build_workload(fleet, teams, pending_tasks=pending, fill=0.9, seed=seed, now=NOW)
    args = argparse.Namespace(pending=pending, passes=1, arrivals=2, seed=seed)
    return settle(ClusterSnapshot(tuple(fleet), tuple(busy), tuple(waiting), teams, NOW), fleet, args, Scheduler())


@pytest.mark.parametrize("seed", range(2))
def test_the_forecast_of_the_bench_snapshot_is_the_one_fresh_passes_give(seed, monkeypatch):
    snapshot = bench_snapshot(48, 160, seed)
    runs, reference = both_ways(snapshot, monkeypatch, max_decisions=30)
    assert [run.starts for run in runs] == [run.starts for run in reference]
    assert [run.complete for run in runs] == [run.complete for run in reference]
    assert len(runs[0].starts) >= 40  # jobs waited, and many got a start


@pytest.mark.parametrize("seed", range(4))
def test_the_forecast_of_a_random_cluster_is_the_one_fresh_passes_give(seed, monkeypatch):
    nodes, busy, pending, _ = live_state(seed)
    snapshot = ClusterSnapshot(tuple(nodes), tuple(busy), tuple(pending), TEAMS, NOW)
    runs, reference = both_ways(snapshot, monkeypatch, max_decisions=40, step_s=60)
    assert [run.starts for run in runs] == [run.starts for run in reference]
    assert len(runs[0].starts) > 0


def test_a_refresh_told_what_moved_indexes_the_room_as_one_that_compares_every_job():
    nodes = cluster(rack("z1-r1", 4))
    first = running(1, ["z1-r1-n1"], gpus_per_node=4)
    second = running(2, ["z1-r1-n2"], gpus_per_node=8)
    third = running(3, ["z1-r1-n3"], gpus_per_node=2)
    told, compared = ClusterState(nodes, (first, second)), ClusterState(nodes, (first, second))
    now = (first, third)
    assert told.refresh(now, {2: None, 3: third}) is True
    assert compared.refresh(now) is True
    free = {name: slot.free_gpus for name, slot in told.slots.items()}
    assert free == {name: slot.free_gpus for name, slot in compared.slots.items()}
    assert free == {
        "z1-r1-n1": [4, 5, 6, 7],
        "z1-r1-n2": [0, 1, 2, 3, 4, 5, 6, 7],
        "z1-r1-n3": [2, 3, 4, 5, 6, 7],
        "z1-r1-n4": [0, 1, 2, 3, 4, 5, 6, 7],
    }
    assert told.free_units == compared.free_units == {"gpu:H100": 4 + 8 + 6 + 8}


def nonzero(usage) -> dict:
    return {team: {k: v for k, v in classes.items() if v} for team, classes in usage.items() if any(classes.values())}


def test_the_units_a_kept_scheduler_counts_per_team_are_those_counted_afresh_pass_after_pass():
    snapshot = bench_snapshot(48, 160, 0)
    scheduler, checked = Scheduler(), 0
    for index in range(6):
        decisions = scheduler.schedule(snapshot)
        kept = scheduler.usage[2].usage
        fresh = Ledger.build(snapshot.teams, snapshot.running, scheduler.state.fleet.capacity).usage
        assert nonzero(kept) == nonzero(fresh)
        checked += bool(decisions.placements)
        snapshot = apply(snapshot, decisions)
        ending = {job.job_id for job in snapshot.running if job.preempting} | {snapshot.running[index].job_id}
        snapshot = replace(snapshot, running=tuple(job for job in snapshot.running if job.job_id not in ending))
        snapshot = add_jobs(snapshot, list(snapshot.nodes), jobs=3, seed=index)
    assert checked >= 2  # jobs started and ended between the passes compared
