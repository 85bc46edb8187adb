"""Jobs that name an image run only on nodes whose agents run images (a container runtime or
hook): placement, victims, "can it ever run" and the pending reasons. A node whose agent did
not say (None) is taken to run them, as scratch disk 0 is "not known"."""

from dataclasses import replace

import pytest

from scheduling.core.feasibility import NO_NODE_RUNS_IMAGES, ONLY_NODES_RUNNING_IMAGES, can_ever_run
from scheduling.core.model import NodeState, Verdict
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import Scheduler, schedule
from scheduling.core.state import ClusterState
from scheduling.core.whatif import suggestions
from tests.unit.core.builders import HOUR, cluster, job, placed_nodes, rack, running, snapshot

# n1's agent runs no images, n2's does, n3's did not say.
RUNS = {"z1-r1-n1": False, "z1-r1-n2": True, "z1-r1-n3": None}
NODES = [replace(n, runs_images=RUNS[n.name]) for n in cluster(rack("z1-r1", 3))]
NO_IMAGES = [replace(n, runs_images=False) for n in NODES]


def test_a_job_naming_an_image_skips_the_nodes_that_run_none():
    """n3 is busy: the image job takes n2, not the idle n1; a job without an image takes n1."""
    busy = [running(1, ["z1-r1-n3"])]
    pending = [job(10, gpus=8, image=True, age=900), job(11, gpus=8)]
    decisions = schedule(snapshot(NODES, pending=pending, running_jobs=busy, preemption=False))
    assert (placed_nodes(decisions, 10), placed_nodes(decisions, 11)) == (["z1-r1-n2"], ["z1-r1-n1"])


def test_a_node_whose_agent_did_not_say_takes_image_jobs():
    busy = [running(1, ["z1-r1-n2"])]
    decisions = schedule(snapshot(NODES, pending=[job(10, gpus=8, image=True)], running_jobs=busy, preemption=False))
    assert placed_nodes(decisions, 10) == ["z1-r1-n3"]


def test_a_gang_naming_an_image_spans_only_nodes_that_run_images():
    decisions = schedule(snapshot(NODES, pending=[job(10, gpus=16, image=True)], preemption=False))
    assert sorted(placed_nodes(decisions, 10)) == ["z1-r1-n2", "z1-r1-n3"]


def test_an_image_job_that_does_not_fit_keeps_no_job_without_one_out():
    """The same shape but for the image, in one pass and in the next of a kept scheduler: the
    image job's failure (the memo of failed shapes, with no reservation between them) says
    nothing of the job without one."""
    busy = [running(1, ["z1-r1-n2"]), running(2, ["z1-r1-n3"])]
    pending = [job(10, gpus=8, image=True, age=900), job(11, gpus=8, age=600)]
    kept = Scheduler()
    for _ in range(2):
        decisions = kept.schedule(snapshot(NODES, pending=pending, running_jobs=busy, preemption=False, backfill=False))
        assert [p.job_id for p in decisions.placements] == [11]
        assert decisions.pending[10].code == ReasonCode.INSUFFICIENT_CAPACITY


def test_jobs_alike_but_for_the_image_are_explained_each_on_their_own():
    """n1 has 4 H100 free but runs no images: the job without an image counts them, the one
    with an image does not (the explainer's memos are kept per shape, the image part of it)."""
    busy = [running(1, ["z1-r1-n1"], gpus_per_node=4), running(2, ["z1-r1-n2"]), running(3, ["z1-r1-n3"])]
    pending = [job(10, gpus=8, image=True, age=900), job(11, gpus=8, age=600)]
    kept = Scheduler()
    for _ in range(2):
        reasons = kept.schedule(snapshot(NODES, pending=pending, running_jobs=busy, preemption=False)).pending
        assert [reasons[i].message.split(" (")[0] for i in (10, 11)] == [
            "needs 8 H100; 0 of 16 free",
            "needs 8 H100; 4 of 24 free",
        ]


def test_a_preemptor_naming_an_image_evicts_only_where_it_could_then_run():
    """The P3 job on n1 is the cheapest to stop (youngest), but n1 runs no images: the victim
    is the one on n2, the youngest of those on nodes that do."""
    busy = [
        running(1, ["z1-r1-n1"], priority="P3", age=60),
        running(2, ["z1-r1-n2"], priority="P3", age=2 * HOUR),
        running(3, ["z1-r1-n3"], priority="P3", age=3 * HOUR),
    ]
    decisions = schedule(snapshot(NODES, pending=[job(10, gpus=8, image=True, priority="P0")], running_jobs=busy))
    assert [(p.victim_job_id, p.for_job_id) for p in decisions.preemptions] == [(2, 10)]
    without = schedule(snapshot(NODES, pending=[job(10, gpus=8, priority="P0")], running_jobs=busy))
    assert [p.victim_job_id for p in without.preemptions] == [1]


def test_it_waits_for_the_nodes_that_run_images_and_says_which_others_cannot_take_it():
    busy = [running(1, ["z1-r1-n2"]), running(2, ["z1-r1-n3"])]
    reason = schedule(snapshot(NODES, pending=[job(10, gpus=8, image=True)], running_jobs=busy, preemption=False))
    reason = reason.pending[10]
    assert (reason.code, reason.message.split("; reserved")[0]) == (
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 8 H100; 0 of 16 free (0/3 nodes fit a task: 2 fewer than 8 free H100, 1 without a container runtime)",
    )


def test_with_none_of_the_nodes_that_run_images_ready_no_node_matches():
    down = [NODES[0], replace(NODES[1], state=NodeState.CORDONED), replace(NODES[2], state=NodeState.LOST)]
    reason = schedule(snapshot(down, pending=[job(10, gpus=8, image=True)], preemption=False)).pending[10]
    assert (reason.code, reason.message) == (
        ReasonCode.NO_MATCHING_NODES,
        "no READY node has gpu_type=H100 and a container runtime for its image (matching nodes: 1 CORDONED, "
        "1 LOST) (0/3 nodes fit a task: 1 CORDONED, 1 LOST, 1 without a container runtime)",
    )


@pytest.mark.parametrize(
    "nodes, spec, verdict",
    [
        (
            NO_IMAGES,
            dict(gpus=8, image=True),
            Verdict(False, "image", NO_NODE_RUNS_IMAGES.format(kind="H100", labelled="", count=3)),
        ),
        (
            [replace(n, labels={"ib": "ndr"}) for n in NO_IMAGES[:2]] + NO_IMAGES[2:],
            dict(gpus=8, image=True, selector={"ib": "ndr"}),
            Verdict(
                False, "image", NO_NODE_RUNS_IMAGES.format(kind="H100", labelled=" with the labels ib=ndr", count=2)
            ),
        ),
        (
            [replace(n, runs_images=n.name != "z1-r1-n1") for n in NODES],
            dict(gpus=24, image=True),
            Verdict(
                False,
                "resources.gpu_count",
                "needs 3 tasks of 8 H100; the matching H100 nodes hold 2 at most"
                + ONLY_NODES_RUNNING_IMAGES.format(count=2, total=3),
            ),
        ),
        (NODES, dict(gpus=16, image=True), Verdict(True)),  # n3's agent did not say: taken to run them
        (NO_IMAGES, dict(gpus=24), Verdict(True)),  # no image: any node
    ],
    ids=["no node runs images", "none with its labels does", "too few that do", "not reported", "no image"],
)
def test_can_it_ever_run_with_an_image(nodes, spec, verdict):
    assert can_ever_run(job(1, **spec).shape, nodes) == verdict


def test_the_message_says_what_to_do():
    assert can_ever_run(job(1, gpus=8, image=True).shape, NO_IMAGES).message == (
        "no H100 node runs images (3 H100 nodes, their agents without a container runtime: mlqueue-agent "
        "--container-runtime podman or --container-hook); leave image out to run the command on the node itself"
    )


def test_what_would_help_a_waiting_image_job():
    state = ClusterState(tuple(NODES), (running(1, ["z1-r1-n2"]), running(2, ["z1-r1-n3"])))
    assert suggestions(state, job(10, gpus=8, image=True).shape, []) == [
        "fits now without its image (on the node itself)"
    ]
