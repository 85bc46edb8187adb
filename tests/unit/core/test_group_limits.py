"""A job group's parallelism in the core (issue 16): at most `parallelism` of its children on
nodes at once, counting those running, those stopping, and those that evicted to start."""

from dataclasses import replace

from scheduling.core.model import Group
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from tests.unit.core.builders import HOUR, cluster, job, rack, running, snapshot, teams

ARRAY = 100


def element(job_id: int, **extra):
    return job(job_id, gpus=1, group=ARRAY, **extra)


def with_groups(snap, **groups):
    return replace(snap, groups={ARRAY: Group("array", groups.get("parallelism", 2))})


def test_only_parallelism_children_start_and_the_rest_say_why():
    nodes = cluster(rack("z1-r1", 2))
    pending = [element(i) for i in range(1, 6)]
    decisions = schedule(with_groups(snapshot(nodes, pending=pending), parallelism=2))

    assert sorted(p.job_id for p in decisions.placements) == [1, 2]
    assert {job_id: (r.code, r.message) for job_id, r in decisions.pending.items()} == {
        job_id: (
            ReasonCode.GROUP_LIMIT,
            "its array (job 100) runs at most 2 elements at once, and 2 are running or starting; "
            "it starts when one of them ends",
        )
        for job_id in (3, 4, 5)
    }
    assert {r.histogram for r in decisions.pending.values()} == {()}  # not a story about room


def test_running_and_stopping_children_take_their_slots():
    nodes = cluster(rack("z1-r1", 2))
    on_nodes = [
        running(1, ["z1-r1-n1"], gpus_per_node=1, group=ARRAY),
        running(2, ["z1-r1-n1"], gpus_per_node=1, first_gpu=1, group=ARRAY, preempting=True, preempted_for=99),
    ]
    decisions = schedule(with_groups(snapshot(nodes, pending=[element(3)], running_jobs=on_nodes), parallelism=3))
    assert [p.job_id for p in decisions.placements] == [3]  # 2 of 3 taken: one slot left

    decisions = schedule(with_groups(snapshot(nodes, pending=[element(3)], running_jobs=on_nodes), parallelism=2))
    assert decisions.placements == () and decisions.pending[3].code == ReasonCode.GROUP_LIMIT


def test_children_that_failed_and_await_their_verdict_hold_their_slots():
    nodes = cluster(rack("z1-r1", 2))
    snap = snapshot(nodes, pending=[element(3), element(4)])
    decisions = schedule(replace(snap, groups={ARRAY: Group("array", 2, settling=1)}))
    assert [p.job_id for p in decisions.placements] == [3]
    assert decisions.pending[4].message == (
        "its array (job 100) runs at most 2 elements at once, and 1 is running or starting and 1 failed "
        "just now (a failed one holds its slot until it is retried or failed for good); it starts when one "
        "of them ends"
    )

    decisions = schedule(replace(snap, groups={ARRAY: Group("array", 2, settling=2)}))
    assert decisions.placements == () and {r.code for r in decisions.pending.values()} == {ReasonCode.GROUP_LIMIT}


def test_a_child_that_evicts_takes_a_slot_and_its_sibling_waits():
    nodes = cluster(rack("z1-r1", 1))
    quotas = teams(vision={"gpu:H100": (8, 8)}, ranking={"gpu:H100": (0, 8)})
    borrowers = [running(10, ["z1-r1-n1"], team="ranking", age=HOUR)]
    pending = [element(1, team="vision"), element(2, team="vision")]
    decisions = schedule(
        with_groups(snapshot(nodes, pending=pending, running_jobs=borrowers, team_list=quotas), parallelism=1)
    )
    assert [p.victim_job_id for p in decisions.preemptions] == [10]
    assert decisions.pending[1].code == ReasonCode.PREEMPTING
    assert decisions.pending[2].code == ReasonCode.GROUP_LIMIT


def test_a_child_whose_victims_are_stopping_keeps_its_slot():
    nodes = cluster(rack("z1-r1", 1))
    stopping = [running(10, ["z1-r1-n1"], team="ranking", preempting=True, preempted_for=1)]
    pending = [element(1), element(2)]
    decisions = schedule(with_groups(snapshot(nodes, pending=pending, running_jobs=stopping), parallelism=1))
    assert decisions.pending[1].code == ReasonCode.PREEMPTING
    assert decisions.pending[2].code == ReasonCode.GROUP_LIMIT


def test_jobs_of_no_group_and_children_of_an_unknown_group_are_not_limited():
    nodes = cluster(rack("z1-r1", 1))
    pending = [job(1, gpus=1), job(2, gpus=1, group=7), job(3, gpus=1, group=7)]
    decisions = schedule(snapshot(nodes, pending=pending))
    assert sorted(p.job_id for p in decisions.placements) == [1, 2, 3]


def test_a_group_of_one_at_a_time_says_so_in_the_singular():
    """QA: "runs at most 1 elements at once, and 1 are running or starting"."""
    nodes = cluster(rack("z1-r1", 2))
    decisions = schedule(with_groups(snapshot(nodes, pending=[element(1), element(2)]), parallelism=1))
    assert decisions.pending[2].message == (
        "its array (job 100) runs at most 1 element at once, and 1 is running or starting; "
        "it starts when one of them ends"
    )
