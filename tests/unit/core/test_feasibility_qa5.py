"""QA 5: a gang that CPUs, memory or scratch disk per task keep out of every zone, while the
zone's GPUs would hold it, is refused naming that field, with the largest value that fits (it
blamed `gpu_count`: "the largest zone, z1, holds 8" beside 64 free H100). Exact messages."""

from dataclasses import replace

import pytest

from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import JobShape, Node, Topology


def nodes(zone: str, rack: str, count: int, *, gpu_type="H100", gpus=8, cpus=192, mem=2048, scratch=30_000):
    return [
        Node(f"{rack}-n{i}", zone, rack, gpu_type, gpus, cpus, mem, {}, scratch_disk_gb=scratch) for i in range(count)
    ]


# The demo fleet's H100: a rack of 8 nodes (8 H100, 192 CPUs, 2048 GB) in each of two zones;
# and 4 CPU nodes (96 CPUs, 384 GB) in each.
DEMO = (
    nodes("z1", "z1-r1", 8)
    + nodes("z2", "z2-r1", 8)
    + nodes("z1", "z1-r4", 4, gpu_type=None, gpus=0, cpus=96, mem=384)
    + nodes("z2", "z2-r4", 4, gpu_type=None, gpus=0, cpus=96, mem=384)
)
# Zone z1's nodes differ: half hold one 100-CPU task, half none.
MIXED = nodes("z1", "z1-r1", 4) + nodes("z1", "z1-r2", 4, cpus=96)
# Scratch disk: z1's 8 nodes have 10 TB, z2's 2 nodes 40 TB.
SCRATCH = nodes("z1", "z1-r1", 8, scratch=10_000) + nodes("z2", "z2-r1", 2, scratch=40_000)
# One zone of two 6-node racks.
TWO_RACKS = nodes("z1", "z1-r1", 6) + nodes("z1", "z1-r2", 6)


def h100(tasks, per_task=4, cpus=16, mem=256, scratch=0, topology=Topology.NONE) -> JobShape:
    return JobShape("H100", tasks, per_task, cpus, mem, {}, topology, scratch)


def cpu_job(tasks, cpus, mem) -> JobShape:
    return JobShape(None, tasks, 0, cpus, mem)


CPU_100 = (
    "100 CPUs per task leaves room for 1 task of 4 H100 per node (192 CPUs): the largest zone, z1, holds 8 such"
    " tasks, the job needs 16; 96 CPUs or fewer per task fits 2 per node"
)

# (fleet, job, field, message, the field's largest value that fits, if one does)
REFUSED = [
    # QA's own: 64 H100 in 16 tasks of 4 with 100 CPUs each.
    (DEMO, h100(16, cpus=100), "resources.cpu_per_rank", CPU_100, 96),
    (
        DEMO,
        h100(16, mem=1100),
        "resources.memory_per_rank_gb",
        "1100 GB of memory per task leaves room for 1 task of 4 H100 per node (2048 GB): the largest zone, z1,"
        " holds 8 such tasks, the job needs 16; 1024 GB of memory or less per task fits 2 per node",
        1024,
    ),
    (
        DEMO,
        h100(32, per_task=2, cpus=60),
        "resources.cpu_per_rank",
        "60 CPUs per task leaves room for 3 tasks of 2 H100 per node (192 CPUs): the largest zone, z1, holds 24 such"
        " tasks, the job needs 32; 48 CPUs or fewer per task fits 4 per node",
        48,
    ),
    # Both bind: CPUs are blamed first, and no CPU count alone fits it.
    (
        DEMO,
        h100(16, cpus=100, mem=1100),
        "resources.cpu_per_rank",
        "100 CPUs per task leaves room for 1 task of 4 H100 per node (192 CPUs): the largest zone, z1, holds 8 such"
        " tasks, the job needs 16; fewer CPUs per task alone does not fit it (memory_per_rank_gb caps it too)",
        None,
    ),
    # Two CPU-heavy ranks per node fit; memory is what binds.
    (
        DEMO,
        h100(16, cpus=90, mem=1100),
        "resources.memory_per_rank_gb",
        "1100 GB of memory per task leaves room for 1 task of 4 H100 per node (2048 GB): the largest zone, z1,"
        " holds 8 such tasks, the job needs 16; 1024 GB of memory or less per task fits 2 per node",
        1024,
    ),
    # A CPU job: its CPUs are its units; memory binds.
    (
        DEMO,
        cpu_job(8, cpus=48, mem=200),
        "resources.memory_per_rank_gb",
        "200 GB of memory per task leaves room for 1 task of 48 CPU per node (384 GB): the largest zone, z1, holds 4"
        " such tasks, the job needs 8; 192 GB of memory or less per task fits 2 per node",
        192,
    ),
    # Zone z1 holds none (its disks are too small), z2 holds 4 (too few GPUs): z1 is the one to fix.
    (
        SCRATCH,
        h100(16, scratch=20_000),
        "resources.scratch_disk_gb",
        "20000 GB of scratch disk leaves room for 0 tasks of 4 H100 per node (10000 GB): zone z1 holds 0 such tasks,"
        " the job needs 16; 10000 GB of scratch disk or less fits 2 per node",
        10_000,
    ),
    # Nodes of two sizes: no per-node story; both halves must take two tasks.
    (
        MIXED,
        h100(16, cpus=100),
        "resources.cpu_per_rank",
        "100 CPUs per task leaves the largest zone, z1, room for 4 tasks of 4 H100 (its GPUs alone hold 16), the job"
        " needs 16; 48 CPUs or fewer per task fits it",
        48,
    ),
    # The same zone fits 20 tasks at 2 per node, one rack of it only at 4 per node.
    (
        TWO_RACKS,
        h100(20, per_task=2, cpus=100),
        "resources.cpu_per_rank",
        "100 CPUs per task leaves room for 1 task of 2 H100 per node (192 CPUs): the largest zone, z1, holds 12 such"
        " tasks, the job needs 20; 96 CPUs or fewer per task fits 2 per node",
        96,
    ),
    (
        TWO_RACKS,
        h100(20, per_task=2, cpus=100, topology=Topology.REQUIRE_SAME_RACK),
        "resources.cpu_per_rank",
        "100 CPUs per task leaves room for 1 task of 2 H100 per node (192 CPUs): the largest zone, z1, holds 12 such"
        " tasks, the job needs 20; 48 CPUs or fewer per task fits 4 per node",
        48,
    ),
]


@pytest.mark.parametrize(("fleet", "job", "field", "message", "largest"), REFUSED)
def test_the_per_task_field_that_binds_is_named(fleet, job, field, message, largest):
    verdict = can_ever_run(job, fleet)
    assert (verdict.ok, verdict.field, verdict.message) == (False, field, message)


@pytest.mark.parametrize(("fleet", "job", "field", "message", "largest"), [r for r in REFUSED if r[4]])
def test_the_value_named_is_the_largest_that_fits(fleet, job, field, message, largest):
    need = {"resources.cpu_per_rank": "cpus_per_task", "resources.memory_per_rank_gb": "memory_gb_per_task"}
    attribute = need.get(field, "scratch_disk_gb")
    assert can_ever_run(replace(job, **{attribute: largest}), fleet).ok
    assert not can_ever_run(replace(job, **{attribute: largest + 1}), fleet).ok


@pytest.mark.parametrize(
    ("fleet", "job", "field", "message"),
    [
        # GPUs bind: the messages as they were.
        (
            DEMO,
            h100(24, per_task=4),
            "resources.gpu_count",
            "needs 24 tasks of 4 H100 in one zone (a gang never spans zones); the largest zone, z1, holds 16 such "
            "tasks (64 H100)",
        ),
        (
            DEMO,
            h100(40, per_task=3),
            "resources.gpu_count",
            "needs 40 tasks of 3 H100; the matching H100 nodes hold 32 at most",
        ),
        (
            DEMO,
            cpu_job(9, cpus=48, mem=100),
            "resources.tasks",
            "needs 9 tasks of 48 CPU in one zone (a gang never spans zones); the largest zone, z1, holds 8 such "
            "tasks (384 CPU)",
        ),
        # The zone holds it; CPUs cap the rack, and a looser hint fits it.
        (
            TWO_RACKS,
            h100(8, cpus=100, topology=Topology.REQUIRE_SAME_RACK),
            "topology_hint",
            "require_same_rack needs 8 tasks of 4 H100 in one rack; the largest rack, z1-r1, holds 6",
        ),
    ],
)
def test_messages_where_gpus_or_racks_bind_are_kept(fleet, job, field, message):
    verdict = can_ever_run(job, fleet)
    assert (verdict.ok, verdict.field, verdict.message) == (False, field, message)


@pytest.mark.parametrize(
    "job",
    [
        h100(16, cpus=96),  # 2 per node: z1's 8 nodes hold 16
        h100(16, mem=1024),
        h100(32, per_task=2, cpus=48),
        cpu_job(8, cpus=48, mem=192),
    ],
)
def test_the_largest_values_fit(job):
    assert can_ever_run(job, DEMO).ok
