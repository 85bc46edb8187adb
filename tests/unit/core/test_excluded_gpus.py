"""GPUs excluded for a fault (Node.excluded_gpus): placement never gives them out, the node's
other GPUs stay schedulable, and a job that does not fit for them is told so."""

from dataclasses import replace

from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from tests.unit.core.builders import cluster, job, rack, running, snapshot


def test_an_excluded_gpu_is_never_placed_and_its_siblings_are():
    (node,) = rack("z1-r1", 1)
    sick = replace(node, excluded_gpus=(2,))
    decisions = schedule(snapshot(cluster([sick]), pending=[job(1, gpus=4), job(2, gpus=2), job(3, gpus=1)]))
    given = sorted(i for p in decisions.placements for t in p.tasks for i in t.gpu_indices)
    assert (len(decisions.placements), given) == (3, [0, 1, 3, 4, 5, 6, 7])


def test_a_job_that_fits_only_with_the_excluded_gpu_waits_and_is_told_why():
    (node,) = rack("z1-r1", 1)
    sick = replace(node, excluded_gpus=(0, 5))
    decisions = schedule(snapshot(cluster([sick]), pending=[job(1, gpus=8)]))
    assert decisions.placements == ()
    reason = decisions.pending[1]
    assert reason.code == ReasonCode.INSUFFICIENT_CAPACITY
    assert reason.message.startswith("needs 8 H100; 6 of 6 free (")
    assert reason.message.endswith("; 2 H100 excluded as unhealthy (z1-r1-n1 GPU 0,5)")


def test_a_job_still_on_an_excluded_gpu_keeps_its_others_until_it_stops():
    (node,) = rack("z1-r1", 1)
    sick = replace(node, excluded_gpus=(3,))
    on_it = running(9, [sick.name], gpus_per_node=4)  # GPUs 0-3: being stopped and requeued
    decisions = schedule(snapshot(cluster([sick]), pending=[job(1, gpus=4)], running_jobs=[on_it]))
    assert {p.job_id: p.tasks[0].gpu_indices for p in decisions.placements} == {1: (4, 5, 6, 7)}
