"""Free units enough for a job, and still no room: FRAGMENTED only where they are split so that
no node (or the gang's zone or rack) holds its tasks' units. Where one does but the CPUs or
memory beside them do not, the job waits for that room, and the reason says what is short.

QA walkthrough: a task of 1 A100 and 16 CPUs was told FRAGMENTED, "2 free but the largest
block is 2", on a node with 2 free A100 and 4 free CPUs (and `/metrics` counted it so)."""

from dataclasses import replace

import pytest

from scheduling.core.model import Topology
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from tests.unit.core.builders import cluster, job, rack, running, snapshot

# The walkthrough's fleet: one A100 node of 8 GPUs, 64 CPUs, 1,024 GB, and two H100 nodes.
A100 = replace(rack("qa3-a100", 1, gpu_type="A100", cpus=64)[0], name="qa3-a100-1")
QA3 = (A100, *rack("qa3-h100", 2))
# 6 of its A100, 60 of its CPUs and 960 GB of its memory taken: 2 A100, 4 CPUs, 64 GB left.
BUSY = running(1, ["qa3-a100-1"], gpus_per_node=6, gpu_type="A100", cpus=60, memory_gb=960)
# 2 zones of two 8-H100 nodes, each with 6 H100 taken, 4 CPUs and 64 GB left on it.
PAIRS = cluster(rack("z1-r1", 2), rack("z2-r1", 2))
HALF = [running(i + 1, [n.name], gpus_per_node=6, cpus=92, memory_gb=960, first_gpu=2) for i, n in enumerate(PAIRS)]
L40S = rack("z3-r1", 1, gpu_type="L40S")
A100_HISTOGRAM = "(0/3 nodes fit a task: 2 other resource class, 1 {why})"

CASES = {
    "CPU-short": (
        QA3,
        [BUSY],
        job(7, gpus=1, gpu_type="A100", cpus=16),
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 1 A100 and 16 CPUs on one node; the 2 free A100 on qa3-a100-1 have 4 free CPUs beside them "
        + A100_HISTOGRAM.format(why="too few free CPUs"),
    ),
    "memory-short": (
        QA3,
        [BUSY],
        job(7, gpus=1, gpu_type="A100", cpus=4, memory_gb=256),
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 1 A100 and 256 GB of memory on one node; the 2 free A100 on qa3-a100-1 have 64 GB of free memory "
        "beside them " + A100_HISTOGRAM.format(why="too little free memory"),
    ),
    "CPU- and memory-short": (
        QA3,
        [BUSY],
        job(7, gpus=2, gpu_type="A100", cpus=16, memory_gb=256),
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 2 A100, 16 CPUs and 256 GB of memory on one node; the 2 free A100 on qa3-a100-1 have 4 free CPUs "
        "and 64 GB of free memory beside them " + A100_HISTOGRAM.format(why="too few free CPUs"),
    ),
    "gang CPU-short in its zone": (
        PAIRS,
        HALF,
        job(7, gpus=4, per_task=2, cpus=8),
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 2 tasks of 2 H100 and 8 CPUs in one zone; the 4 free H100 in zone z1 hold its 2 tasks, but the free "
        "CPUs beside them hold 0 (0/4 nodes fit a task: 4 too few free CPUs)",
    ),
    # Genuine fragmentation stays FRAGMENTED, with the message it had.
    "split GPUs": (
        PAIRS,
        HALF,
        job(7, gpus=4, cpus=2),
        ReasonCode.FRAGMENTED,
        "needs 4 H100 in one node; 8 free but the largest block is 2 (node z1-r1-n1) "
        "(0/4 nodes fit a task: 4 fewer than 4 free H100)",
    ),
    "split GPUs, short of CPUs too": (
        PAIRS,
        HALF,
        job(7, gpus=4, cpus=8),
        ReasonCode.FRAGMENTED,
        "needs 4 H100 in one node; 8 free but the largest block is 2 (node z1-r1-n1) "
        "(0/4 nodes fit a task: 4 fewer than 4 free H100)",
    ),
    "gang split across zones": (
        (*PAIRS, *L40S),
        HALF,
        job(7, gpus=6, per_task=2, cpus=1, memory_gb=8),
        ReasonCode.FRAGMENTED,
        "needs 6 H100 in one zone; 8 free but the largest block is 4 (zone z1) "
        "(4/5 nodes fit a task: 1 other resource class)",
    ),
    "gang split across racks": (
        cluster(rack("z1-r1", 2), rack("z1-r2", 2), L40S),
        [running(i + 1, [f"z1-r{i // 2 + 1}-n{i % 2 + 1}"], gpus_per_node=6, first_gpu=2) for i in range(4)],
        job(7, gpus=6, per_task=2, topology=Topology.REQUIRE_SAME_RACK),
        ReasonCode.FRAGMENTED,
        "needs 6 H100 in one rack; 8 free but the largest block is 4 (rack z1-r1) "
        "(4/5 nodes fit a task: 1 other resource class)",
    ),
}


@pytest.mark.parametrize(("nodes", "busy", "pending", "code", "message"), CASES.values(), ids=CASES.keys())
def test_free_units_enough_are_fragmented_only_when_split(nodes, busy, pending, code, message):
    reason = schedule(snapshot(nodes, pending=[pending], running_jobs=busy, preemption=False, backfill=False))
    assert (reason.pending[7].code, reason.pending[7].message) == (code, message)
