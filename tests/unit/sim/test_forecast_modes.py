"""The cheaper forecasts (issue 13): a simulated future without reclaim or without any
eviction, starts back-dated between coarse passes, and the two runs computed apart."""

from dataclasses import replace

import pytest

from scheduling.core.model import HOUR
from scheduling.sim.forecast import EVICTIONS, STEP_S, combine, forecast, simulate
from tests.unit.core.builders import NOW, cluster, job, rack, running, snapshot
from tests.unit.sim.test_forecast import random_state
from tests.unit.sim.test_forecast_effort import borrowed_cluster

FRACTIONS = {"vision": 0.5, "ranking": 0.3}


def starts(state, **options):
    result = forecast(state, likely_fraction=FRACTIONS, step_s=0, **options)
    return result.latest, result.likely


@pytest.mark.parametrize("seed", range(6))
def test_without_guarantees_a_future_without_reclaim_is_the_full_one(seed):
    state, _ = random_state(seed)  # no team has a guarantee; P2 jobs outrank P3 ones
    assert starts(state, evictions="priority") == starts(state, evictions="all")


@pytest.mark.parametrize("seed", range(6))
def test_with_one_class_and_no_guarantees_a_future_without_evictions_is_the_full_one(seed):
    state, _ = random_state(seed)
    state = replace(
        state,
        running=tuple(replace(run, priority="P2") for run in state.running),
        pending=tuple(replace(waiting, priority="P2") for waiting in state.pending),
    )
    assert starts(state, evictions="none") == starts(state, evictions="all")


def test_without_reclaim_an_owner_waits_for_the_borrowers_to_end_a_later_start_never_an_earlier_one():
    state = borrowed_cluster()  # team a, owed 16 GPUs, waits behind team b's two 8-GPU jobs
    # Reclaimed: they start at the first pass after the 120 s grace period.
    assert forecast(state).latest == {3: NOW + STEP_S, 4: NOW + STEP_S}
    assert forecast(state, step_s=120.0).latest == {3: NOW + 120, 4: NOW + 120}
    # b's jobs run to their max_runtime, an hour from now.
    assert forecast(state, evictions="priority").latest == {3: NOW + HOUR, 4: NOW + HOUR}
    assert forecast(state, evictions="none").latest == {3: NOW + HOUR, 4: NOW + HOUR}


def test_an_unknown_evictions_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="evictions must be one of all, priority, none, not 'some'"):
        forecast(borrowed_cluster(), evictions="some")
    assert EVICTIONS == ("all", "priority", "none")


def one_node_queue():
    """One node; the job on it ends in 10 s; three 8-GPU jobs of 100 s wait, 2 before 3 before 4."""
    nodes = cluster(rack("z1-r1", 1))
    busy = running(1, ["z1-r1-n1"], remaining=10)
    queue = [job(2, runtime=100, age=300), job(3, runtime=100, age=200), job(4, runtime=100, age=100)]
    return snapshot(nodes, pending=queue, running_jobs=[busy])


def test_backdated_starts_keep_room_busy_between_coarse_passes_and_are_still_rounded_up():
    state = one_node_queue()
    exact = forecast(state, step_s=0).latest
    assert exact == {2: NOW + 10, 3: NOW + 110, 4: NOW + 210}
    # Passes a minute apart: each job starts at the first pass after the room frees, and the
    # minutes the room stood idle push every later job back.
    coarse = forecast(state, step_s=60, step_growth=0, backdate=False).latest
    assert coarse == {2: NOW + 60, 3: NOW + 160, 4: NOW + 260}
    # Back-dated: 2 runs from 10 s (placed at the pass at 60 s), so 3 runs from 110 s (placed at
    # 120 s) and 4 from 210 s: each start within a step after the exact one, never before it.
    backdated = forecast(state, step_s=60, step_growth=0, backdate=True).latest
    assert backdated == {2: NOW + 60, 3: NOW + 120, 4: NOW + 210}
    assert forecast(state, step_s=60, step_growth=0).latest == backdated  # the default


def test_the_two_runs_apart_make_the_same_forecast():
    state = one_node_queue()
    fractions = {"vision": 0.5}
    together = forecast(state, likely_fraction=fractions, step_s=0)
    apart = combine(simulate(state, None, step_s=0), simulate(state, fractions, step_s=0))
    assert apart == together
    # Every run half as long: the running job has outlived half of its 1 h 10 s, so half of its
    # last 10 s are left; each waiting job runs 60 s (half of 100 s, raised to the minimum).
    assert together.likely == {2: NOW + 5, 3: NOW + 65, 4: NOW + 125}
    assert combine(simulate(state, None, step_s=0), None).likely == together.latest
