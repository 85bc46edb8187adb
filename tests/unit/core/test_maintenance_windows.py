"""Maintenance windows in the policy core: a job whose time limit would run into a node's
window does not start there (nor evicts, nor reserves there), a job that ends before may, and
the reason names the window. Exact messages."""

from dataclasses import replace
from datetime import datetime

import pytest

from scheduling.core import explain, whatif
from scheduling.core.maintenance import Windows
from scheduling.core.model import MaintenanceWindow, NodeState
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import Pass, Scheduler, schedule
from scheduling.core.state import ClusterState
from tests.unit.core.builders import HOUR, NOW, cluster, job, placed_nodes, rack, running, snapshot

FLEET = cluster(rack("z1-r1", 2), rack("z1-r2", 2))
RACK_R1 = MaintenanceWindow(7, "rack z1-r1", ("z1-r1-n1", "z1-r1-n2"), NOW + 2 * HOUR, NOW + 6 * HOUR)
R2_BUSY = [running(1, ["z1-r2-n1"], remaining=10 * HOUR), running(2, ["z1-r2-n2"], remaining=10 * HOUR)]


def with_windows(*windows, **kwargs):
    return replace(snapshot(FLEET, **kwargs), maintenance=tuple(windows))


@pytest.mark.parametrize(
    ("runtime", "nodes", "code", "message"),
    [
        # Ends before the window: the rack is still its to use.
        (HOUR, ["z1-r1-n1"], None, None),
        (2 * HOUR, ["z1-r1-n1"], None, None),
        # Would run into it: kept off the rack, and the reason names the window (its reservation
        # waits for room off the rack: a shadow start does not count on the window's end).
        (
            6 * HOUR,
            None,
            ReasonCode.MAINTENANCE,
            "rack z1-r1 drains at 2026-11-06 23:20 UTC for 4 h (maintenance #7); "
            "this job's 6 h time limit would run into it; reserved 1 node(s), estimated start 2026-11-07 07:20 UTC",
        ),
        (
            2 * HOUR + 60,
            None,
            ReasonCode.MAINTENANCE,
            "rack z1-r1 drains at 2026-11-06 23:20 UTC for 4 h (maintenance #7); "
            "this job's 2.02 h time limit would run into it; reserved 1 node(s), estimated start 2026-11-07 07:20 UTC",
        ),
    ],
)
def test_a_job_starts_on_a_window_rack_only_if_it_ends_before(runtime, nodes, code, message):
    decisions = schedule(with_windows(RACK_R1, pending=[job(10, runtime=runtime)], running_jobs=R2_BUSY))
    if nodes is not None:
        assert placed_nodes(decisions, 10) == nodes
        assert 10 not in decisions.pending
    else:
        assert decisions.placements == ()
        assert (decisions.pending[10].code, decisions.pending[10].message) == (code, message)


def test_a_window_under_way_says_until_when_not_when_it_drained():
    """It said "drains at" a time already past while the window was on."""
    active = MaintenanceWindow(7, "rack z1-r1", ("z1-r1-n1", "z1-r1-n2"), NOW - HOUR, NOW + HOUR)
    decisions = schedule(with_windows(active, pending=[job(10, runtime=HOUR)], running_jobs=R2_BUSY, backfill=False))
    assert (decisions.pending[10].code, decisions.pending[10].message) == (
        ReasonCode.MAINTENANCE,
        "rack z1-r1 is under maintenance until 2026-11-06 22:20 UTC (maintenance #7); this job would start inside it",
    )


def test_a_long_job_goes_to_a_rack_without_a_window():
    decisions = schedule(with_windows(RACK_R1, pending=[job(10, runtime=24 * HOUR)]))
    assert placed_nodes(decisions, 10) == ["z1-r2-n1"]


def test_a_window_that_is_over_keeps_nobody_off():
    over = MaintenanceWindow(3, "rack z1-r1", RACK_R1.nodes, NOW - 5 * HOUR, NOW - HOUR)
    decisions = schedule(with_windows(over, pending=[job(10, runtime=24 * HOUR)], running_jobs=R2_BUSY))
    assert placed_nodes(decisions, 10) == ["z1-r1-n1"]


def test_the_earliest_window_on_the_nodes_is_named():
    later = MaintenanceWindow(9, "zone z1", tuple(n.name for n in FLEET), NOW + 3 * HOUR, NOW + 4 * HOUR)
    decisions = schedule(with_windows(later, RACK_R1, pending=[job(10, runtime=6 * HOUR)], running_jobs=R2_BUSY))
    assert decisions.pending[10].message == (
        "rack z1-r1 drains at 2026-11-06 23:20 UTC for 4 h (maintenance #7); "
        "this job's 6 h time limit would run into it"
    )


def test_equal_jobs_with_other_limits_are_decided_apart():
    # Same team and shape: the long one is refused the rack, the short one after it still gets it.
    pending = [job(10, runtime=6 * HOUR, age=120), job(11, runtime=HOUR, age=60)]
    decisions = schedule(with_windows(RACK_R1, pending=pending, running_jobs=R2_BUSY))
    assert placed_nodes(decisions, 11) == ["z1-r1-n1"]
    assert decisions.pending[10].code == ReasonCode.MAINTENANCE


def test_jobs_alike_but_for_their_limits_each_get_their_own_limit_in_the_reason():
    # One team and shape, both running into the window: the reason, worked out once per kind,
    # must still name each job's own time limit (it named the first one's for both).
    one_rack = cluster(rack("z1-r1", 1))
    window = MaintenanceWindow(7, "rack z1-r1", ("z1-r1-n1",), NOW + 2 * HOUR, NOW + 3 * HOUR)
    pending = [job(10, runtime=10 * HOUR, age=120), job(11, runtime=20 * HOUR, age=60)]
    decisions = schedule(replace(snapshot(one_rack, pending=pending, reservations_per_class=0), maintenance=(window,)))
    assert {job_id: decisions.pending[job_id].message for job_id in (10, 11)} == {
        10: "rack z1-r1 drains at 2026-11-06 23:20 UTC for 1 h (maintenance #7); "
        "this job's 10 h time limit would run into it",
        11: "rack z1-r1 drains at 2026-11-06 23:20 UTC for 1 h (maintenance #7); "
        "this job's 20 h time limit would run into it",
    }


def test_a_preemptor_does_not_evict_on_a_rack_it_could_not_start_on():
    # Fewest GPU-hours lost would pick job 3 (younger, on the window's rack); job 1 goes instead.
    busy = [
        running(3, ["z1-r1-n1"], priority="P3", age=HOUR),
        running(4, ["z1-r1-n2"], priority="P3", age=HOUR),
        running(1, ["z1-r2-n1"], priority="P3", age=3 * HOUR),
        running(2, ["z1-r2-n2"], priority="P3", age=4 * HOUR),
    ]
    incident = job(10, priority="P0", runtime=6 * HOUR)
    decisions = schedule(with_windows(RACK_R1, pending=[incident], running_jobs=busy))
    assert [p.victim_job_id for p in decisions.preemptions] == [1]
    without = schedule(snapshot(FLEET, pending=[incident], running_jobs=busy))
    assert [p.victim_job_id for p in without.preemptions] == [3]


def test_a_reservation_is_not_made_on_a_window_rack():
    gang = job(10, gpus=16, runtime=6 * HOUR)
    busy = [running(1, ["z1-r1-n1"], remaining=HOUR), *R2_BUSY]
    decisions = schedule(with_windows(RACK_R1, pending=[gang], running_jobs=busy))
    [reservation] = decisions.reservations
    assert reservation.nodes == ("z1-r2-n1", "z1-r2-n2")
    assert reservation.start_at == NOW + 10 * HOUR


def test_a_kept_scheduler_decides_as_a_fresh_pass():
    kept = Scheduler()
    first = with_windows(RACK_R1, pending=[job(10, runtime=6 * HOUR)], running_jobs=R2_BUSY)
    assert kept.schedule(first).pending[10].code == ReasonCode.MAINTENANCE
    later = replace(first, now=NOW + 7 * HOUR)  # the window is over
    assert placed_nodes(kept.schedule(later), 10) == ["z1-r1-n1"]
    assert placed_nodes(Pass(later).run(), 10) == ["z1-r1-n1"]


def test_windows_close_nodes_by_end_time():
    windows = Windows([RACK_R1], NOW)
    assert windows.closed(NOW + HOUR) == frozenset()
    assert windows.closed(NOW + 2 * HOUR) == frozenset()  # ends as the window starts: allowed
    assert windows.closed(NOW + 2 * HOUR + 1) == {"z1-r1-n1", "z1-r1-n2"}
    assert windows.variant(NOW + HOUR) == (True,)
    assert windows.variant(NOW + 3 * HOUR) == (False,)


def test_a_pass_that_reads_only_actions_keeps_to_the_windows_too():
    # The simulator's and the forecast's passes prune a team's turns by the least runtime asked.
    pending = [job(10 + i, runtime=6 * HOUR, age=300 - i) for i in range(3)] + [job(20, runtime=HOUR, age=10)]
    snap = with_windows(RACK_R1, pending=pending, running_jobs=R2_BUSY)
    actions = Scheduler(actions_only=True).schedule(snap)
    assert [(p.job_id, [t.node for t in p.tasks]) for p in actions.placements] == [(20, ["z1-r1-n1"])]
    assert actions.placements == schedule(snap).placements


def test_the_forecast_starts_a_long_job_after_the_window_not_on_its_rack_before():
    from scheduling.sim.forecast import forecast

    nodes = cluster(rack("z1-r1", 1))
    window = MaintenanceWindow(7, "rack z1-r1", ("z1-r1-n1",), NOW + 2 * HOUR, NOW + 3 * HOUR)
    pending = [job(10, runtime=6 * HOUR), job(11, runtime=HOUR, age=30)]
    snap = replace(snapshot(nodes, pending=pending), maintenance=(window,))
    starts = forecast(snap).latest
    assert starts[11] == NOW  # ends before the window: it starts now
    assert NOW + 3 * HOUR <= starts[10] <= NOW + 3 * HOUR + 600  # once the window is over
    assert forecast(snapshot(nodes, pending=pending)).latest[10] == NOW + HOUR  # without it: after job 11


def test_the_forecast_brings_an_active_window_s_nodes_back_at_its_end():
    from scheduling.sim.forecast import forecast

    nodes = cluster(rack("z1-r1", 1, state=NodeState.DRAINING), rack("z1-r2", 1, state=NodeState.CORDONED))
    window = MaintenanceWindow(
        7, "2 nodes", ("z1-r1-n1", "z1-r2-n1"), NOW - HOUR, NOW + HOUR, drained=("z1-r1-n1",)
    )  # z1-r2-n1: an admin's cordon, which the window's end leaves alone
    snap = replace(snapshot(nodes, pending=[job(10, runtime=HOUR / 2)]), maintenance=(window,))
    assert forecast(snap).latest[10] == NOW + HOUR


def test_a_preemptor_in_flight_stops_holding_a_node_once_a_window_there_would_cut_it_short():
    # P0 job 5 (6 h) evicted job 1 on z1-r1-n1 and holds it and the free z1-r1-n2. Then rack
    # z1-r1 gets a window in 2 h: job 5 can no longer start there, so it stops holding n2 and
    # a 1-hour job starts there, on a kept scheduler as on a fresh pass.
    victim = running(1, ["z1-r1-n1"], preempting=True, preempted_for=5)
    preemptor = job(5, gpus=16, priority="P0", runtime=6 * HOUR)
    first = snapshot(FLEET, pending=[preemptor], running_jobs=[victim, *R2_BUSY])
    kept = Scheduler()
    kept.schedule(first)
    second = replace(first, maintenance=(RACK_R1,), pending=(preemptor, job(6, runtime=HOUR)), now=NOW + 1)
    assert placed_nodes(kept.schedule(second), 6) == ["z1-r1-n2"]
    assert placed_nodes(Pass(second).run(), 6) == ["z1-r1-n2"]


@pytest.mark.parametrize(
    "at, expected",
    [
        ("2026-11-06T21:20:00+00:00", "21:20 UTC"),  # the same UTC day
        ("2026-11-06T23:59:00+00:00", "23:59 UTC"),
        ("2026-11-07T00:20:00+00:00", "2026-11-07 00:20 UTC"),  # past midnight: dated
        ("2026-11-09T05:00:00+00:00", "2026-11-09 05:00 UTC"),
    ],
)
def test_a_time_on_another_day_than_the_pass_carries_its_date(at, expected):
    now = datetime.fromisoformat("2026-11-06T20:00:00+00:00").timestamp()
    assert explain.clock_near(datetime.fromisoformat(at).timestamp(), now) == expected
    assert explain.clock_near(3600.0, 0.0) == "t=3600s"  # a simulation's virtual times stay as seconds


def test_a_window_over_several_nodes_reads_in_the_plural():
    nodes = MaintenanceWindow(9, "3 nodes", ("a", "b", "c"), NOW + 2 * HOUR, NOW + 6 * HOUR)
    assert explain.describe_window(nodes).startswith("3 nodes drain at ")
    assert explain.describe_window(RACK_R1).startswith("rack z1-r1 drains at ")
    under_way = MaintenanceWindow(9, "3 nodes", ("a", "b", "c"), NOW - HOUR, NOW + HOUR)
    assert "3 nodes are under maintenance until" in explain.maintenance(None, under_way, NOW).message  # no job read


# Two windows at different times on different free racks: z1-r1's in 2 h, z1-r2's in 27.6 h.
RACK_R2_LATER = MaintenanceWindow(8, "rack z1-r2", ("z1-r2-n1", "z1-r2-n2"), NOW + 27.6 * HOUR, NOW + 30 * HOUR)
BEFORE_7 = "fits now with a time limit of at most 2 h (ending before maintenance #7)"
BEFORE_8 = "fits now with a time limit of at most 27.6 h (ending before maintenance #8)"


@pytest.mark.parametrize(
    ("gpus", "busy", "runtime", "expected"),
    [
        # The later window's rack is free: the longest limit that starts now is up to it (it
        # said "at most 2 h", the first window on the nodes a placement ignoring windows took).
        (8, [], 48 * HOUR, BEFORE_8),
        (16, [], 48 * HOUR, BEFORE_8),
        # Three nodes take one of z1-r1's, and with z1-r2 busy only z1-r1 is free: up to its window.
        (24, [], 48 * HOUR, BEFORE_7),
        (8, R2_BUSY, 48 * HOUR, BEFORE_7),
        # Fits as it is, or not even before the first window: nothing to suggest.
        (8, [], 24 * HOUR, None),
        (40, [], 48 * HOUR, None),
    ],
)
def test_the_limit_suggested_before_a_window_is_the_longest_that_starts_now(gpus, busy, runtime, expected):
    pending = job(10, gpus=gpus, runtime=runtime)
    windows = Windows((RACK_R1, RACK_R2_LATER), NOW)
    state = ClusterState(FLEET, busy)
    assert whatif.before_window(state, pending.shape, windows, now=NOW, end_at=NOW + runtime) == expected


def test_a_reservation_starting_later_is_kept_off_a_rack_a_window_drains_by_then():
    """QA: a gang's shadow start was kept off the nodes a window reaches within its time limit
    from now, not from the start it found: it reserved a rack due to drain before that start."""
    gang = job(10, gpus=16, runtime=HOUR)  # from now it would end before the window (2 h away)
    busy = [running(1, ["z1-r1-n1"], remaining=1.5 * HOUR), *R2_BUSY]  # rack r1 is free at 1.5 h
    decisions = schedule(with_windows(RACK_R1, pending=[gang], running_jobs=busy))
    [reservation] = decisions.reservations
    assert reservation.nodes == ("z1-r2-n1", "z1-r2-n2")  # from 1.5 h it would run into the window
    assert reservation.start_at == NOW + 10 * HOUR
    without = schedule(snapshot(FLEET, pending=[gang], running_jobs=busy))  # no window: rack r1
    assert without.reservations[0].nodes == ("z1-r1-n1", "z1-r1-n2")
    assert without.reservations[0].start_at == NOW + 1.5 * HOUR
