"""Where `Scheduler(actions_only=True)` stops trying a team's jobs (pruning.py): never before
a job that could still start, evict or reserve. Exact actions, against a pass that tries
every job (`schedule`)."""

from scheduling.core.decisions import Reservation
from scheduling.core.pruning import frontier_with
from scheduling.core.scheduler import Scheduler, schedule
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running, snapshot, teams
from tests.unit.core.test_schedule_equivalence import actions

NODES = cluster(rack("z1-r1", 1), rack("z1-r2", 1, gpu_type="A100"))
FULL = (
    running(1, ["z1-r1-n1"], remaining=HOUR),  # the H100 node, full for an hour
    running(2, ["z1-r2-n1"], gpus_per_node=4, gpu_type="A100", remaining=HOUR / 2),  # half the A100 node
)


def test_a_pinned_next_job_of_another_class_does_not_hide_a_job_that_may_still_reserve():
    """Job 10 takes the one H100 reservation. Left in the team's queue: job 11 next (H100,
    pinned: it yields to job 10), then job 12 (A100, 8 GPUs, half of them busy for 30
    minutes). The H100 book is full, but job 12 reads the A100 one, which is empty: it still
    reserves the A100 node, and a pass that prunes must still try it."""
    pending = (
        job(10, gpus=1, age=300.0),
        job(11, gpus=1, age=200.0, yields_to=10),
        job(12, gpus=8, gpu_type="A100", age=100.0),
    )
    state = snapshot(NODES, pending=pending, running_jobs=FULL, reservations_per_class=1, preemption=False)
    expected = (
        (),
        (),
        (
            Reservation(10, ("z1-r1-n1",), NOW + HOUR, {"z1-r1-n1": 1}),
            Reservation(12, ("z1-r2-n1",), NOW + HOUR / 2, {"z1-r2-n1": 8}),
        ),
        {},
    )
    assert actions(schedule(state)) == expected
    assert actions(Scheduler(actions_only=True).schedule(state)) == expected


def test_a_queue_is_left_out_when_neither_its_smallest_nor_its_shortest_job_fits():
    """Job 10 (8 GPUs) holds the one reservation: rack node n2, free in an hour. Left: team
    ranking's one-GPU jobs of 3-4 hours, which n2's one free GPU cannot take past the
    reservation, and its 8-GPU jobs of half an hour, which no node has room for. A one-GPU
    job of half an hour would fit, but none asks that: the pass leaves the queue out after
    job 10, and acts as trying every job."""
    nodes = rack("z1-r1", 2)
    busy = (
        running(1, ["z1-r1-n1"], team="other", remaining=2 * HOUR),
        running(2, ["z1-r1-n2"], team="other", gpus_per_node=7, remaining=HOUR),
    )
    pending = (
        job(10, gpus=8, runtime=0.1 * HOUR, age=300.0),
        job(11, gpus=1, runtime=3 * HOUR, team="ranking"),
        job(12, gpus=8, runtime=0.5 * HOUR, team="ranking"),
        job(13, gpus=1, runtime=4 * HOUR, team="ranking"),
        job(14, gpus=8, runtime=0.6 * HOUR, team="ranking"),
    )
    # Reclaim in turn off: under it a blocked job may keep an owner from reclaiming, so the
    # queue is not left out (`Pass._may_lower_turn`).
    state = snapshot(
        nodes, pending=pending, running_jobs=busy, reservations_per_class=1, preemption=False, reclaim_in_turn=False
    )
    decisions = Scheduler(actions_only=True).schedule(state)
    reference = schedule(state)
    assert actions(decisions) == actions(reference)
    assert [r.job_id for r in decisions.reservations] == [10]
    assert decisions.order == (10,)
    assert sorted(reference.order) == [10, 11, 12, 13, 14]


def test_a_queue_of_two_resource_classes_is_left_out_once_neither_class_can_act():
    """As above, the team's queue spanning two classes (its H100 and A100 jobs wait in one
    priority class): its H100 jobs cannot start past job 10's reservation, and its A100 jobs
    find the one A100 node full for an hour and its one reservation taken by job 15. Each
    class's least is read alone: the pass leaves the whole queue out after jobs 10 and 15."""
    nodes = cluster(rack("z1-r1", 2), rack("z1-r2", 1, gpu_type="A100"))
    busy = (
        running(1, ["z1-r1-n1"], team="other", remaining=2 * HOUR),
        running(2, ["z1-r1-n2"], team="other", gpus_per_node=7, remaining=HOUR),
        running(3, ["z1-r2-n1"], team="other", gpu_type="A100", remaining=HOUR),
    )
    pending = (
        job(10, gpus=8, runtime=0.1 * HOUR, age=300.0),
        job(15, gpus=8, gpu_type="A100", runtime=0.1 * HOUR, age=300.0),
        job(11, gpus=1, runtime=3 * HOUR, team="ranking"),
        job(12, gpus=8, runtime=0.5 * HOUR, team="ranking"),
        job(16, gpus=8, gpu_type="A100", runtime=0.5 * HOUR, team="ranking"),
        job(17, gpus=1, gpu_type="A100", runtime=2 * HOUR, team="ranking"),
    )
    state = snapshot(
        nodes, pending=pending, running_jobs=busy, reservations_per_class=1, preemption=False, reclaim_in_turn=False
    )
    decisions = Scheduler(actions_only=True).schedule(state)
    reference = schedule(state)
    assert actions(decisions) == actions(reference)
    assert sorted(r.job_id for r in decisions.reservations) == [10, 15]
    assert sorted(decisions.order) == [10, 15]
    assert sorted(reference.order) == [10, 11, 12, 15, 16, 17]


def test_the_frontier_keeps_only_the_asks_no_other_is_below_in_every_part():
    """(units per task, units, runtime): an ask at least another in every part adds nothing;
    a new least one drops those it is below in every part."""
    frontier = frontier_with(((1, 1, 3 * HOUR),), (8, 8, 0.5 * HOUR))
    assert frontier == ((8, 8, 0.5 * HOUR), (1, 1, 3 * HOUR))
    assert frontier_with(frontier, (8, 16, HOUR)) is frontier
    assert frontier_with(frontier, (1, 1, 0.25 * HOUR)) == ((1, 1, 0.25 * HOUR),)
    assert frontier_with(frontier, (4, 4, HOUR)) == ((4, 4, HOUR), (8, 8, 0.5 * HOUR), (1, 1, 3 * HOUR))


def test_an_owner_waiting_its_turn_to_reclaim_is_left_out_after_its_first_job():
    """Reclaim in turn: a borrower's one-GPU job waits first (the least GPU-time) for room
    the owner's reclaim would free, so no owner's job may reclaim this pass: each asks at
    least the one GPU (`_reclaim_waits_turn`). The owner, within its guarantee, has a queue of
    larger jobs; a pass that prunes tries the first only, and acts as trying every job."""
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (16, 0)}, other={"gpu:H100": (0, 64)})
    borrowers = [
        running(10 + i, [f"z1-r1-n{1 + i // 8}"], gpus_per_node=1, first_gpu=i % 8, team="other", cpus=1, age=600 + i)
        for i in range(16)
    ]
    pending = (
        job(2, gpus=1, team="other", runtime=60, cpus=1),
        *(job(30 + i, gpus=4 + 4 * (i % 2), team="vision", runtime=HOUR * (2 + i)) for i in range(12)),
    )
    state = snapshot(
        nodes,
        pending=pending,
        running_jobs=borrowers,
        team_list=quotas,
        reclaim_in_turn=True,
        reclaim_in_turn_backlog=None,
        reclaim_in_turn_backlog_off=None,
    )
    decisions = Scheduler(actions_only=True).schedule(state)
    reference = schedule(state)
    assert actions(decisions) == actions(reference)
    assert reference.preemptions == ()  # every owner's job waits its turn
    assert len(reference.order) == 13
    assert decisions.order == reference.order[:2]  # the borrower's job, then the owner's first
