"""A trial's quick fit check (`Trial.fits`, per-zone totals of the tasks each node holds) says
what laying the job out says (`placement.plan_on`, which reads rooms above 0 only), also where a
node's room is below 0: its running tasks hold more memory or CPUs than the node reports now
(an agent registered again on a machine that shrank). A review of the forecast's round 7 found
a zone's total pulled down by such a node, and a reservation put off."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.model import ClusterSnapshot, JobShape, Node, PendingJob, RunningJob, TaskPlacement, Team, Topology
from scheduling.core.scheduler import schedule
from scheduling.core.state import ClusterState
from scheduling.core.trial import Trial

NOW = 1_000_000.0
NODES = tuple(
    Node(f"z{z}-r{r}-n{i}", f"z{z}", f"z{z}-r{r}", "H100", 8, 96, 1024) for z in (1, 2) for r in (1, 2) for i in (1, 2)
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(-3, 4), min_size=8, max_size=8), st.integers(1, 6), st.sampled_from(list(Topology)))
def test_fits_says_what_a_layout_says(rooms, tasks, topology):
    state = ClusterState(NODES)
    slots = [state.slots[node.name] for node in NODES]
    job = PendingJob(1, "t", "P1", JobShape("H100", tasks, 1, 1, 1, topology=topology), 0.0, 60.0)
    trial = Trial(job, {slot: n for slot, n in zip(slots, rooms, strict=True) if n})
    assert trial.fits() == (trial.total >= tasks and trial.plan() is not None)


def test_a_node_over_its_memory_does_not_put_a_reservation_off():
    def running(job_id, node, gpus, ends_in, memory_gb=10, first_gpu=0):
        task = TaskPlacement(0, node, tuple(range(first_gpu, first_gpu + gpus)), 1, memory_gb)
        return RunningJob(job_id, "t", "P1", "H100", (task,), NOW - 7200, NOW + ends_in, preemptible=False)

    nodes = (
        Node("a1", "a", "ra", "H100", 8, 96, 100),  # its job holds 110 GB: room for no task, below 0
        Node("a2", "a", "ra", "H100", 8, 96, 1024),
        Node("b1", "b", "rb", "H100", 8, 96, 1024),
    )
    busy = (
        running(1, "a1", 1, 5000, memory_gb=110),
        running(2, "a2", 5, 9000),
        running(3, "a2", 1, 100, first_gpu=5),  # frees a third GPU on a2 at +100
        running(4, "b1", 7, 1000),
    )
    job = PendingJob(100, "t", "P2", JobShape("H100", 3, 1, 1, 10), NOW - 60, 3600.0)
    [reservation] = schedule(ClusterSnapshot(nodes, busy, (job,), (Team("t"),), NOW)).reservations
    assert (reservation.start_at - NOW, reservation.units) == (100, {"a2": 3})
