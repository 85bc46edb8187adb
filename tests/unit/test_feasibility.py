"""Can it ever run: table-driven, exact messages, no database."""

import pytest

from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import JobShape, Node, Topology


def rack_of(zone: str, rack: str, count: int, *, gpu_type="H100", gpus=8, labels=None) -> list[Node]:
    return [Node(f"{rack}-n{i}", zone, rack, gpu_type, gpus, 96, 1024, labels or {}) for i in range(count)]


# 2 zones x 2 racks x 4 H100 nodes of 8 = 128 H100; 4 A100 nodes with ib labels in z1; 2 CPU nodes.
CLUSTER = (
    rack_of("z1", "z1-r1", 4)
    + rack_of("z1", "z1-r2", 4)
    + rack_of("z2", "z2-r1", 4)
    + rack_of("z2", "z2-r2", 4)
    + rack_of("z1", "z1-r3", 4, gpu_type="A100", labels={"ib": "hdr"})
    + rack_of("z1", "z1-r4", 2, gpu_type=None, gpus=0)
)


def shape(gpu_type="H100", tasks=1, gpus=8, cpus=4, mem=64, selector=None, topology=Topology.NONE) -> JobShape:
    return JobShape(gpu_type, tasks, gpus, cpus, mem, selector or {}, topology)


@pytest.mark.parametrize(
    "job, field, message",
    [
        (
            shape(tasks=512),
            "resources.gpu_count",
            "asks 4096 H100; the cluster has 128, and a gang runs in one zone: 64 at most",
        ),
        (
            shape(tasks=512, topology=Topology.REQUIRE_SAME_RACK),
            "resources.gpu_count",
            "asks 4096 H100; the cluster has 128, and a gang runs in one rack: 32 at most",
        ),
        (
            shape(tasks=9),  # what the first message's 128 or 64 leads to: the zone's count says GPUs too
            "resources.gpu_count",
            "needs 9 tasks of 8 H100 in one zone (a gang never spans zones); the largest zone, z1, holds 8 such "
            "tasks (64 H100)",
        ),
        (shape(gpus=16), "resources.gpus_per_task", "asks 16 GPUs per task; the largest H100 node has 8"),
        (shape(gpu_type="L40S"), "resources.gpu_type", "no node in the cluster has gpu_type=L40S"),
        (shape(cpus=200), "resources.cpu_per_rank", "asks 200 CPUs per task; the largest H100 node has 96 CPUs"),
        (
            shape(mem=2000),
            "resources.memory_per_rank_gb",
            "asks 2000 GB of memory per task; the largest H100 node has 1024 GB",
        ),
        (shape(selector={"ib": "ndr"}), "node_selector", "no H100 node carries the labels ib=ndr (16 H100 nodes)"),
        (
            shape(selector={"zone": "z1"}),  # a node's zone is no label (QA)
            "node_selector",
            "no H100 node carries the labels zone=z1 (16 H100 nodes); zone and rack are not labels: a gang already "
            "runs in one zone, and topology_hint: require_same_rack keeps it in one rack",
        ),
        (
            shape(selector={"ib": "ndr", "rack": "z1-r1"}),
            "node_selector",
            "no H100 node carries the labels ib=ndr, rack=z1-r1 (16 H100 nodes); zone and rack are not labels: a "
            "gang already runs in one zone, and topology_hint: require_same_rack keeps it in one rack",
        ),
        (
            shape(tasks=12),
            "resources.gpu_count",
            "needs 12 tasks of 8 H100 in one zone (a gang never spans zones); the largest zone, z1, holds 8 such "
            "tasks (64 H100)",
        ),
        (
            shape(tasks=8, topology=Topology.REQUIRE_SAME_RACK),
            "topology_hint",
            "require_same_rack needs 8 tasks of 8 H100 in one rack; the largest rack, z1-r1, holds 4",
        ),
        (
            shape(gpu_type="A100", gpus=2, tasks=9, cpus=48, selector={"ib": "hdr"}),  # its CPUs bind, not GPUs
            "resources.cpu_per_rank",
            "48 CPUs per task leaves room for 2 tasks of 2 A100 per node (96 CPUs): the largest zone, z1, holds 8 "
            "such tasks, the job needs 9; 32 CPUs or fewer per task fits 3 per node",
        ),
        (
            shape(gpu_type=None, tasks=3, gpus=0, cpus=64),
            "resources.tasks",
            "needs 3 tasks of 64 CPU; the matching CPU nodes hold 2 at most",
        ),
    ],
)
def test_refuses_what_an_empty_cluster_cannot_hold(job, field, message):
    verdict = can_ever_run(job, CLUSTER)
    assert (verdict.ok, verdict.field, verdict.message) == (False, field, message)


@pytest.mark.parametrize(
    "job",
    [
        shape(tasks=8),  # 64 H100 in zone z1
        shape(tasks=4, topology=Topology.REQUIRE_SAME_RACK),  # one full rack
        shape(gpus=1, tasks=1),
        shape(gpu_type="A100", tasks=4, selector={"ib": "hdr"}),
        shape(gpu_type=None, tasks=2, gpus=0, cpus=96, mem=1024),
        shape(gpus=2, tasks=32, cpus=1, mem=1),  # 4 tasks per node, 32 fill zone z1
    ],
)
def test_accepts_what_fits_somewhere(job):
    assert can_ever_run(job, CLUSTER).ok


def test_one_zone_adds_no_most_to_the_clusters_size():
    """Where one gang may have the whole cluster, its size is the most: nothing more to say."""
    verdict = can_ever_run(shape(tasks=4), rack_of("z1", "z1-r1", 2))
    assert (verdict.field, verdict.message) == ("resources.gpu_count", "asks 32 H100; the cluster has 16")


def test_a_zone_label_some_node_carries_gets_no_hint():
    verdict = can_ever_run(shape(selector={"zone": "west"}), rack_of("z1", "z1-r1", 2, labels={"zone": "east"}))
    assert verdict.message == "no H100 node carries the labels zone=west (2 H100 nodes)"


def test_no_cpu_nodes_is_named():
    verdict = can_ever_run(shape(gpu_type=None, gpus=0), rack_of("z1", "r1", 2))
    assert (verdict.field, verdict.message) == ("resources.gpu_count", "the cluster has no CPU nodes")


def test_cpu_and_memory_bind_tasks_per_node():
    # 8 GPUs are free but 96 CPUs hold only 3 tasks of 32 CPUs: 4 nodes x 3 = 12 tasks of 2 GPUs per rack.
    job = shape(gpus=2, tasks=13, cpus=32, topology=Topology.REQUIRE_SAME_RACK)
    verdict = can_ever_run(job, CLUSTER)
    assert (
        verdict.message == "require_same_rack needs 13 tasks of 2 H100 in one rack; the largest rack, z1-r1, holds 12"
    )
