"""QA 5: "what would help" offered half the job ("fits now with 8 H100 (1 tasks)" for 3 tasks
of 8 H100 beside 16 free H100) where more fits: it now offers the most tasks that fit now, in
words that agree with the number. Exact messages."""

import pytest

from scheduling.core.model import JobShape, Topology
from scheduling.core.state import ClusterState
from scheduling.core.whatif import suggestions
from tests.unit.core.builders import cluster, rack, running

FLEET = cluster(rack("z1-r1", 4), rack("z1-r2", 4))


def h100(tasks: int, per_task: int = 8, topology=Topology.NONE) -> JobShape:
    return JobShape("H100", tasks, per_task, 4, 32, {}, topology)


def busy(*nodes: str, gpus: int = 8, first_id: int = 100):
    return [running(first_id + i, [node], gpus_per_node=gpus) for i, node in enumerate(nodes)]


ALL_BUT_R1 = ("z1-r2-n1", "z1-r2-n2", "z1-r2-n3", "z1-r2-n4")


@pytest.mark.parametrize(
    ("job", "taken", "said"),
    [
        # QA's: 16 H100 free (two nodes): 2 tasks, not the 1 that halving gave.
        (h100(3), (*ALL_BUT_R1, "z1-r1-n1", "z1-r1-n2"), ["fits now with 16 H100 (2 tasks)"]),
        (h100(3), (*ALL_BUT_R1, "z1-r1-n1", "z1-r1-n2", "z1-r1-n3"), ["fits now with 8 H100 (1 task)"]),
        # 7 of 10 fit; halving offered 5.
        (h100(10), ("z1-r1-n1",), ["fits now with 56 H100 (7 tasks)"]),
        # Not one task fits: nothing offered.
        (h100(3), (*ALL_BUT_R1, "z1-r1-n1", "z1-r1-n2", "z1-r1-n3", "z1-r1-n4"), []),
        # A rack is kept: the fullest free rack's 3 nodes (halving's 4 did not fit, so nothing was offered).
        (
            h100(8, topology=Topology.REQUIRE_SAME_RACK),
            ("z1-r1-n1", "z1-r2-n1", "z1-r2-n2"),
            ["fits now with 24 H100 (3 tasks)"],
        ),
    ],
)
def test_fewer_tasks_is_the_most_that_fit_now(job, taken, said):
    assert suggestions(ClusterState(FLEET, busy(*taken)), job, ["H100"]) == said


def test_smaller_tasks_of_one_gpu_say_gpu():
    # One GPU free on each node: 2 tasks of 1 GPU fit, 1 task of 2 does not.
    state = ClusterState(FLEET, busy(*(node.name for node in FLEET), gpus=7))
    assert suggestions(state, h100(1, per_task=2), ["H100"]) == ["fits now with 1 GPU per task (2 tasks)"]


def test_the_other_suggestions_come_first_as_before():
    # Two whole nodes free and half of two more: 6 tasks of 4 H100 fit, 3 of 8 do not, 2 of 8 do.
    state = ClusterState(FLEET, busy(*ALL_BUT_R1) + busy("z1-r1-n3", "z1-r1-n4", gpus=4, first_id=200))
    assert suggestions(state, h100(3), ["H100", "A100"]) == [
        "fits now with 4 GPUs per task (6 tasks)",
        "fits now with 16 H100 (2 tasks)",
    ]
