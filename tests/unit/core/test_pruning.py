"""Where `Scheduler(actions_only=True)` stops trying a team's jobs (pruning.py): never before
a job that could still start, evict or reserve. Exact actions, against a pass that tries
every job (`schedule`)."""

from scheduling.core.decisions import Reservation
from scheduling.core.scheduler import Scheduler, schedule
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running, snapshot
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
