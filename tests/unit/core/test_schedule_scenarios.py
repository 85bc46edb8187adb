"""Table-driven scenarios of the policy core: exact placements and exact reasons."""

from dataclasses import replace

import pytest

from scheduling.core.model import NodeState, Quota, Team, Topology
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import Scheduler, schedule
from tests.unit.core.builders import HOUR, NOW, cluster, job, placed_nodes, rack, running, snapshot, teams

# 2 zones x 2 racks x 8 nodes x 8 H100 = 256 GPUs.
FLEET = cluster(rack("z1-r1", 8), rack("z1-r2", 8), rack("z2-r1", 8), rack("z2-r2", 8))


def test_seed_gang_of_64_is_packed_into_one_rack():
    # z1-r1 has one busy node, so the gang takes the first whole free rack: z1-r2.
    busy = running(1, ["z1-r1-n1"])
    seed = job(10, gpus=64, topology=Topology.PREFER_SAME_RACK)
    decisions = schedule(snapshot(FLEET, pending=[seed], running_jobs=[busy]))

    assert placed_nodes(decisions, 10) == [f"z1-r2-n{i}" for i in range(1, 9)]
    placement = decisions.placements[0]
    assert [t.rank for t in placement.tasks] == list(range(8))
    assert {t.gpu_indices for t in placement.tasks} == {tuple(range(8))}


def test_single_tasks_fill_used_racks_before_empty_ones():
    busy = running(1, ["z2-r2-n1"], gpus_per_node=4)
    decisions = schedule(snapshot(FLEET, pending=[job(11, gpus=4), job(12, gpus=8)], running_jobs=[busy]))
    assert placed_nodes(decisions, 11) == ["z2-r2-n1"]  # best fit: the half-used node
    assert placed_nodes(decisions, 12) == ["z2-r2-n2"]  # then the fullest rack


def test_two_half_cluster_gangs_do_not_deadlock():
    nodes = cluster(rack("z1-r1", 8), rack("z1-r2", 8))
    busy = running(1, [f"z1-r2-n{i}" for i in range(1, 5)], remaining=HOUR, team="other")
    first, second = job(21, gpus=64, age=120), job(22, gpus=64, team="ranking", age=60)
    decisions = schedule(snapshot(nodes, pending=[first, second], running_jobs=[busy]))

    assert [p.job_id for p in decisions.placements] == [21]
    assert len(decisions.placements[0].tasks) == 8  # whole, never a part of each
    [reservation] = decisions.reservations
    assert (reservation.job_id, reservation.start_at) == (22, NOW + HOUR)
    assert reservation.nodes == tuple(f"z1-r2-n{i}" for i in range(1, 9))
    assert decisions.pending[22].code == ReasonCode.INSUFFICIENT_CAPACITY
    assert decisions.pending[22].message == (
        "needs 64 H100; 32 of 128 free (4/16 nodes fit a task: 12 fewer than 8 free H100); "
        "reserved 8 node(s), estimated start 22:20 UTC"
    )
    # The histogram and the fit count behind the sentence survive the reservation's suffix.
    assert decisions.pending[22].histogram == (("fewer than 8 free H100", 12),)
    assert decisions.pending[22].fit_count == "4/16"


def test_gang_is_not_starved_by_a_stream_of_small_jobs():
    nodes = cluster(rack("z1-r1", 8))
    # Seven nodes busy until +1h; one free node.
    busy = [running(i, [f"z1-r1-n{i}"], remaining=HOUR, team="other") for i in range(1, 8)]
    gang = job(30, gpus=64, age=600)
    short = [job(40 + i, gpus=1, runtime=HOUR / 2, team="ranking") for i in range(4)]
    long = [job(50 + i, gpus=1, runtime=10 * HOUR, team="ranking") for i in range(4)]
    decisions = schedule(snapshot(nodes, pending=[gang, *short, *long], running_jobs=busy, order="fair_share"))

    assert decisions.reservations[0].job_id == 30
    assert decisions.reservations[0].start_at == NOW + HOUR
    assert sorted(p.job_id for p in decisions.placements) == [40, 41, 42, 43]  # they end before the gang starts
    assert {decisions.pending[j.job_id].code for j in long} == {ReasonCode.BEHIND_RESERVATION}
    assert decisions.pending[50].message == (
        "fits now, but would delay job 30, which holds 8 node(s) from 22:20 UTC; "
        "with max_runtime_hours <= 1.00 it could start now"
    )


def test_behind_reservations_names_the_one_that_starts_first():
    """Job 8 (P1, only n1 has its label) holds n1 from +3 h; job 9, the class's second
    reservation, n2 and n3 from +1 h. A 2-hour job that fits on n3 now would delay job 9, not 8:
    the reason named the book's first reservation and promised a start now with
    max_runtime_hours <= 3.00, which a 2-hour job has."""
    nodes = cluster(rack("z1-r1", 3))
    nodes = [replace(nodes[0], labels={"fast": "yes"}), *nodes[1:]]
    busy = [running(1, ["z1-r1-n1"], remaining=3 * HOUR), running(2, ["z1-r1-n2"], remaining=HOUR)]
    pending = [
        job(8, gpus=8, runtime=HOUR, age=900, priority="P1", selector={"fast": "yes"}),
        job(9, gpus=16, runtime=HOUR, age=600),
        job(10, gpus=8, runtime=2 * HOUR, age=300, priority="P3"),
    ]
    decisions = schedule(
        snapshot(nodes, pending=pending, running_jobs=busy, reservations_per_class=2, preemption=False)
    )
    assert [(r.job_id, r.start_at) for r in decisions.reservations] == [(8, NOW + 3 * HOUR), (9, NOW + HOUR)]
    assert decisions.pending[10].message == (
        "fits now, but would delay job 9, which holds 2 node(s) from 22:20 UTC (and 1 other reservation(s)); "
        "with max_runtime_hours <= 1.00 it could start now"
    )


def test_behind_reservations_names_the_one_on_the_nodes_it_would_take():
    """Job 8 (P1, only n1 has its label) holds n1 from +1 h, job 9 n2 and n3 from +3 h. A
    4-hour job fits only on n3 now: it would delay job 9, and with 3 hours it could start (the
    reason named job 8, the first to start, and 1 hour)."""
    nodes = cluster(rack("z1-r1", 3))
    nodes = [replace(nodes[0], labels={"fast": "yes"}), *nodes[1:]]
    busy = [running(1, ["z1-r1-n1"], remaining=HOUR), running(2, ["z1-r1-n2"], remaining=3 * HOUR)]
    pending = [
        job(8, gpus=8, runtime=5 * HOUR, age=900, priority="P1", selector={"fast": "yes"}),
        job(9, gpus=16, runtime=HOUR, age=600),
        job(10, gpus=8, runtime=4 * HOUR, age=300, priority="P3"),
    ]
    snap = snapshot(nodes, pending=pending, running_jobs=busy, reservations_per_class=2, preemption=False)
    decisions = schedule(snap)
    assert [(r.job_id, r.start_at) for r in decisions.reservations] == [(8, NOW + HOUR), (9, NOW + 3 * HOUR)]
    assert decisions.pending[10].message == (
        "fits now, but would delay job 9, which holds 2 node(s) from 2026-11-07 00:20 UTC "
        "(and 1 other reservation(s)); with max_runtime_hours <= 3.00 it could start now"
    )
    shorter = replace(pending[2], max_runtime_s=2.9 * HOUR)
    assert [p.job_id for p in schedule(replace(snap, pending=(*pending[:2], shorter))).placements] == [10]


def test_shortest_weighted_first_small_jobs_go_first_until_the_gang_is_past_the_bound():
    """The default order ranks jobs by expected GPU-time (weighted by their team's share): a
    fresh 64-GPU gang goes after 1-GPU jobs, even ten-hour ones. Past the wait bound it is the
    head of the overdue line: it goes first and holds its nodes."""
    nodes = cluster(rack("z1-r1", 8))
    busy = [running(i, [f"z1-r1-n{i}"], remaining=HOUR, team="other") for i in range(1, 8)]
    small = [job(50 + i, gpus=1, runtime=10 * HOUR, team="ranking") for i in range(4)]
    fresh = schedule(snapshot(nodes, pending=[job(30, gpus=64, age=600), *small], running_jobs=busy))
    assert fresh.order == (50, 51, 52, 53, 30)
    assert sorted(p.job_id for p in fresh.placements) == [50, 51, 52, 53]

    overdue = schedule(snapshot(nodes, pending=[job(30, gpus=64, age=3 * HOUR), *small], running_jobs=busy))
    assert overdue.order[0] == 30
    assert overdue.reservations[0].job_id == 30 and overdue.reservations[0].start_at == NOW + HOUR
    assert overdue.placements == ()


def test_past_the_wait_bound_nothing_new_lands_on_reserved_nodes():
    nodes = cluster(rack("z1-r1", 8))
    busy = [running(i, [f"z1-r1-n{i}"], remaining=HOUR, team="other") for i in range(1, 8)]
    gang = job(30, gpus=64, age=3 * HOUR)  # past the 2 h bound
    short = job(40, gpus=1, runtime=60, team="ranking")
    decisions = schedule(snapshot(nodes, pending=[gang, short], running_jobs=busy))
    assert decisions.placements == ()
    assert decisions.pending[40].code == ReasonCode.BEHIND_RESERVATION


def test_a_second_reservation_is_not_promised_the_room_of_the_first():
    """Two 8-GPU jobs wait for the one node, busy for an hour: the first reserves it from 22:20,
    for its 2 h; the second gets it when the first would end (it was promised 22:20 too)."""
    busy = [running(1, ["z1-r1-n1"], remaining=HOUR)]
    first, second = job(8, gpus=8, runtime=2 * HOUR, age=600), job(9, gpus=8, runtime=2 * HOUR, age=300)
    decisions = schedule(
        snapshot(cluster(rack("z1-r1", 1)), pending=[first, second], running_jobs=busy, reservations_per_class=2)
    )
    assert [(r.job_id, r.nodes, r.start_at) for r in decisions.reservations] == [
        (8, ("z1-r1-n1",), NOW + HOUR),
        (9, ("z1-r1-n1",), NOW + 3 * HOUR),
    ]
    assert decisions.pending[9].message.endswith("reserved 1 node(s), estimated start 2026-11-07 00:20 UTC")


def test_a_second_reservation_takes_what_the_first_leaves_on_a_node():
    """The first needs 4 of the node's 8 GPUs at 22:20: the second, 4 too, starts beside it."""
    busy = [running(1, ["z1-r1-n1"], remaining=HOUR)]
    first, second = job(8, gpus=4, runtime=2 * HOUR, age=600), job(9, gpus=4, runtime=2 * HOUR, age=300)
    decisions = schedule(
        snapshot(cluster(rack("z1-r1", 1)), pending=[first, second], running_jobs=busy, reservations_per_class=2)
    )
    assert [(r.job_id, r.start_at) for r in decisions.reservations] == [(8, NOW + HOUR), (9, NOW + HOUR)]


def test_scratch_disk_is_a_minimum_a_node_must_have_where_the_node_reports_it():
    """Ten one-GPU tasks asking 800 GB of scratch: a node with 2,000 GB takes as many as its GPUs
    hold (a minimum per node, as Slurm's --tmp), a node that reports none (0: not known) is not
    held to it, one with 500 GB takes none."""
    disks = {"z1-r1-n1": 2000, "z1-r1-n2": 500, "z1-r1-n3": 0}
    nodes = [replace(n, scratch_disk_gb=disks[n.name]) for n in cluster(rack("z1-r1", 3))]
    busy = [running(9, ["z1-r1-n3"], gpus_per_node=6)]  # n3 has room for two tasks
    gang = job(1, gpus=10, per_task=1, scratch_disk_gb=800)
    decisions = schedule(snapshot(nodes, pending=[gang], running_jobs=busy, preemption=False))
    assert sorted(placed_nodes(decisions, 1)) == ["z1-r1-n1"] * 8 + ["z1-r1-n3"] * 2
    alone = schedule(snapshot(nodes[1:2], pending=[job(2, gpus=1, scratch_disk_gb=800)], preemption=False))
    assert "too little scratch disk" in alone.pending[2].message


def test_a_job_that_would_outlive_a_second_reservation_does_not_backfill_under_it():
    """Job 8 reserves 4 GPUs from +1 h for 2 h; job 9 the whole node from +3 h. A 10-hour
    2-GPU job must not start now: it would still hold 2 GPUs at +3 h. (The first reservation,
    gone by then, was counted as room given back, so the second's spare was 4, not 0.)"""
    busy = [running(1, ["z1-r1-n1"], gpus_per_node=6, remaining=HOUR)]
    pending = [
        job(8, gpus=4, runtime=2 * HOUR, age=900),
        job(9, gpus=8, runtime=2 * HOUR, age=600),
        job(10, gpus=2, runtime=10 * HOUR, age=300),
    ]
    decisions = schedule(
        snapshot(
            cluster(rack("z1-r1", 1)), pending=pending, running_jobs=busy, reservations_per_class=2, preemption=False
        )
    )
    assert [(r.job_id, r.start_at) for r in decisions.reservations] == [(8, NOW + HOUR), (9, NOW + 3 * HOUR)]
    assert decisions.placements == ()
    assert decisions.pending[10].code == ReasonCode.BEHIND_RESERVATION


def test_a_spread_gang_takes_the_zone_it_spreads_widest_over_even_if_its_nodes_are_less_roomy():
    """Zone z1: one rack of four nodes with 2 free each; z2: two racks, each with a node of 8
    free and one of 1. Four one-GPU tasks go to z2 (two racks), a node each."""
    nodes = cluster(rack("z1-r1", 4), rack("z2-rA", 2), rack("z2-rB", 2))
    busy = [running(1 + i, [f"z1-r1-n{i + 1}"], gpus_per_node=6) for i in range(4)]
    busy += [running(10, ["z2-rA-n2"], gpus_per_node=7), running(11, ["z2-rB-n2"], gpus_per_node=7)]
    spread = job(9, gpus=4, per_task=1, topology=Topology.SPREAD)
    decisions = schedule(snapshot(nodes, pending=[spread], running_jobs=busy, preemption=False))
    assert sorted(placed_nodes(decisions, 9)) == ["z2-rA-n1", "z2-rA-n2", "z2-rB-n1", "z2-rB-n2"]


def test_jobs_alike_but_for_scratch_disk_are_explained_each_on_their_own():
    """A 16-GPU gang without scratch is explained first; a 4-GPU job that fits but for the
    nodes' scratch disk must still be told so (the nodes' histogram was kept per task shape
    without the scratch disk, so it got the gang's "2/2 nodes fit a task")."""
    nodes = [replace(n, scratch_disk_gb=500) for n in cluster(rack("z1-r1", 2))]
    busy = [running(1, ["z1-r1-n1"], gpus_per_node=4), running(2, ["z1-r1-n2"], gpus_per_node=4)]
    gang, disk = job(14, gpus=16, per_task=4, age=900), job(12, gpus=4, scratch_disk_gb=800, age=200)
    kept = Scheduler()  # its explainer, kept while the room stays as it is, explains the gang first
    kept.schedule(snapshot(nodes, pending=[gang], running_jobs=busy, preemption=False, backfill=False))
    alone = snapshot(nodes, pending=[disk], running_jobs=busy, preemption=False, backfill=False)
    assert kept.schedule(alone).pending[12] == schedule(alone).pending[12]
    assert "2 too little scratch disk" in schedule(alone).pending[12].message


def test_a_job_only_nodes_without_its_scratch_disk_have_room_for_waits_for_capacity_not_fragmentation():
    """n1 (500 GB of disk) is idle, n2 (2,000 GB) is full: a 4-GPU job asking 800 GB was told
    FRAGMENTED, "8 free but the largest block is 8", though no block at all could take it. It
    waits for capacity on the nodes that could; with those down, no node matches."""
    disks = {"z1-r1-n1": 500, "z1-r1-n2": 2000}
    nodes = [replace(n, scratch_disk_gb=disks[n.name]) for n in cluster(rack("z1-r1", 2))]
    busy = [running(1, ["z1-r1-n2"])]
    disk = job(12, gpus=4, scratch_disk_gb=800)
    reason = schedule(snapshot(nodes, pending=[disk], running_jobs=busy, preemption=False)).pending[12]
    assert (reason.code, reason.message.split(" (")[0]) == (
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 4 H100; 0 of 8 free",
    )
    assert "1 too little scratch disk" in reason.message
    down = [nodes[0], replace(nodes[1], state=NodeState.LOST)]
    reason = schedule(snapshot(down, pending=[disk], preemption=False)).pending[12]
    assert (reason.code, reason.message.split(" (")[0]) == (
        ReasonCode.NO_MATCHING_NODES,
        "no READY node has gpu_type=H100 and 800 GB of scratch disk",
    )
    assert "(matching nodes: 1 LOST)" in reason.message


def test_jobs_placed_on_nodes_it_could_not_use_did_not_take_its_room():
    """n2, the one node with the disk job 12 asks, is full; job 5 takes n1 this pass. Job 12 was
    told that jobs ahead of it took its room (8 H100): it never could have run on n1."""
    disks = {"z1-r1-n1": 500, "z1-r1-n2": 2000, "z1-r1-n3": 500}
    nodes = [replace(n, scratch_disk_gb=disks[n.name]) for n in cluster(rack("z1-r1", 3))]
    pending = [job(5, gpus=8, priority="P1", age=900), job(12, gpus=8, scratch_disk_gb=800)]
    busy = [running(1, ["z1-r1-n2"]), running(2, ["z1-r1-n3"])]
    decisions = schedule(snapshot(nodes, pending=pending, running_jobs=busy, preemption=False, backfill=False))
    assert [p.job_id for p in decisions.placements] == [5]
    assert decisions.pending[12].code == ReasonCode.INSUFFICIENT_CAPACITY
    # Where it could have run, it is told so.
    disks["z1-r1-n1"] = 2000
    nodes = [replace(n, scratch_disk_gb=disks[n.name]) for n in nodes]
    decisions = schedule(snapshot(nodes, pending=pending, running_jobs=busy, preemption=False, backfill=False))
    assert decisions.pending[12].message == (
        "fits the cluster, but jobs ahead of it in the queue (higher priority or lower fair share) "
        "took 8 H100 this pass"
    )


@pytest.mark.parametrize("small", [{"memory_gb": 256}, {"cpus": 2}])
def test_a_job_only_nodes_too_small_for_a_task_have_room_for_waits_for_capacity_not_fragmentation(small):
    """n2 is idle but too small for one task (memory, CPUs); n1, which could take it, is full."""
    nodes = cluster(rack("z1-r1", 2))
    nodes = (nodes[0], replace(nodes[1], **small))
    big = job(12, gpus=4, memory_gb=512, cpus=8)
    reason = schedule(snapshot(nodes, pending=[big], running_jobs=[running(1, ["z1-r1-n1"])], preemption=False))
    assert (reason.pending[12].code, reason.pending[12].message.split(" (")[0]) == (
        ReasonCode.INSUFFICIENT_CAPACITY,
        "needs 4 H100; 0 of 8 free",
    )
    down = (replace(nodes[0], state=NodeState.LOST), nodes[1])
    reason = schedule(snapshot(down, pending=[big], preemption=False)).pending[12]
    assert reason.code == ReasonCode.NO_MATCHING_NODES
    assert reason.message.startswith(
        "no READY node has gpu_type=H100 and room for one task (4 H100, 8 CPUs, 512 GB) (matching nodes: 1 LOST)"
    )


def test_reclaim_of_borrowed_gpus_even_at_the_same_priority():
    nodes = cluster(rack("z1-r1", 8))
    quotas = teams(vision={"gpu:H100": (32, 32)}, ranking={"gpu:H100": (32, 32)})
    # ranking runs 8 single-node jobs: 64 GPUs, 32 of them borrowed (its newest four).
    ranking = [running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i)) for i in range(1, 9)]
    claim = job(60, gpus=16, per_task=8, team="vision")
    decisions = schedule(snapshot(nodes, pending=[claim], running_jobs=ranking, team_list=quotas))

    victims = sorted(p.victim_job_id for p in decisions.preemptions)
    assert victims == [7, 8]  # the newest borrowed jobs, just enough for 16 GPUs
    assert {p.reason for p in decisions.preemptions} == {"RECLAIM"}
    assert decisions.pending[60].code == ReasonCode.PREEMPTING
    assert decisions.pending[60].message == (
        "stopping job(s) 7, 8 (16 H100 borrowed by other teams); it starts once they have stopped"
    )


def test_while_reclaimed_jobs_stop_the_reason_still_says_they_were_borrowed():
    """The next pass, with the victims stopping, said "of lower priority" of jobs of the same
    class that the eviction had reclaimed (found by QA)."""
    nodes = cluster(rack("z1-r1", 8))
    quotas = teams(vision={"gpu:H100": (32, 32)}, ranking={"gpu:H100": (32, 32)})
    ranking = [
        running(
            i,
            [f"z1-r1-n{i}"],
            team="ranking",
            age=HOUR * (10 - i),
            preempting=i > 6,
            preempted_for=60 if i > 6 else None,
        )
        for i in range(1, 9)
    ]
    claim = job(60, gpus=16, per_task=8, team="vision")
    decisions = schedule(snapshot(nodes, pending=[claim], running_jobs=ranking, team_list=quotas))
    assert decisions.pending[60].message == (
        "stopping job(s) 7, 8 (16 H100 borrowed by other teams); it starts once they have stopped"
    )
    lower = [replace(r, priority="P3") if r.preempting else r for r in ranking]
    decisions = schedule(snapshot(nodes, pending=[claim], running_jobs=lower, team_list=quotas))
    assert decisions.pending[60].message == (
        "stopping job(s) 7, 8 (16 H100 of lower priority); it starts once they have stopped"
    )
    # When each victim's stop is forced is known (the store's kill_at): the reason gives the last.
    forced = [replace(r, stop_by=NOW + 30 + r.job_id) if r.preempting else r for r in lower]
    decisions = schedule(snapshot(nodes, pending=[claim], running_jobs=forced, team_list=quotas))
    assert decisions.pending[60].message == (
        "stopping job(s) 7, 8 (16 H100 of lower priority); it starts once they have stopped"
        " (SIGKILL at 21:20:38 UTC if not sooner)"
    )


@pytest.mark.parametrize("figures", [True, False])
def test_a_parent_teams_quota_figures_are_named_only_where_they_may_be_read(figures):
    """With quotas private, a child team's member read the division's use, guarantee and
    limit in their job's reason (found by QA)."""
    nodes = cluster(rack("z1-r1", 4))
    tree = (
        Team("research", None, {"gpu:H100": Quota(8, 8)}),
        Team("vision", "research", {"gpu:H100": Quota(8, 24)}),
        Team("nlp", "research", {"gpu:H100": Quota(8, 24)}),
    )
    busy = [running(1, ["z1-r1-n1"], team="nlp"), running(2, ["z1-r1-n2"], team="nlp")]
    pending = [job(10, gpus=8, team="vision"), job(11, gpus=24, per_task=8, team="vision")]
    decisions = schedule(
        snapshot(nodes, pending=pending, running_jobs=busy, team_list=tree, parent_quota_figures=figures)
    )
    reasons = [decisions.pending[10].message, decisions.pending[11].message]
    assert reasons == (
        [
            "parent team research uses 16 H100 (at most 16: 8 guaranteed + 8 borrowing limit); this job needs 8 more",
            "this job asks 24 H100, more than parent team research may ever hold (at most 16: 8 guaranteed + 8 "
            "borrowing limit): it can start only once that quota is raised",
        ]
        if figures
        else [
            "parent team research has reached its borrowing limit of H100; this job needs 8 more",
            "this job asks 24 H100, more than parent team research may ever hold: it can start only once that quota"
            " is raised",
        ]
    )


def test_p0_preempts_p2_checkpointing_jobs_in_one_rack():
    nodes = cluster(rack("z1-r1", 4), rack("z1-r2", 4))
    checkpointing = [running(i, [f"z1-r1-n{i}"], checkpointing=True, last_checkpoint_at=NOW - 600) for i in range(1, 5)]
    plain = [running(10 + i, [f"z1-r2-n{i}"]) for i in range(1, 5)]
    incident = job(70, gpus=32, priority="P0", topology=Topology.PREFER_SAME_RACK, team="ranking")
    decisions = schedule(snapshot(nodes, pending=[incident], running_jobs=[*checkpointing, *plain]))

    assert sorted(p.victim_job_id for p in decisions.preemptions) == [1, 2, 3, 4]
    assert {p.reason for p in decisions.preemptions} == {"PRIORITY"}
    assert decisions.preemptions[0].message == "preempted for job 70 (P0, team ranking): P2 yields to P0"


def test_fewest_gpu_hours_lost_when_both_checkpoint():
    nodes = cluster(rack("z1-r1", 2))
    fresh = running(1, ["z1-r1-n1"], checkpointing=True, last_checkpoint_at=NOW - 60)
    stale = running(2, ["z1-r1-n2"], checkpointing=True, last_checkpoint_at=NOW - 3000)
    decisions = schedule(snapshot(nodes, pending=[job(3, gpus=8, priority="P1")], running_jobs=[fresh, stale]))
    assert [p.victim_job_id for p in decisions.preemptions] == [1]


def test_no_preemption_for_a_job_that_would_still_not_fit():
    nodes = cluster(rack("z1-r1", 2))
    low = running(1, ["z1-r1-n1"], priority="P3")
    high = running(2, ["z1-r1-n2"], priority="P0")
    decisions = schedule(snapshot(nodes, pending=[job(3, gpus=16, priority="P1")], running_jobs=[low, high]))
    assert decisions.preemptions == ()


def test_young_tasks_and_p0_are_never_evicted_for_priority():
    nodes = cluster(rack("z1-r1", 2))
    young = running(1, ["z1-r1-n1"], priority="P3", age=60)
    incident = running(2, ["z1-r1-n2"], priority="P0", age=HOUR)
    decisions = schedule(snapshot(nodes, pending=[job(3, gpus=8, priority="P1")], running_jobs=[young, incident]))
    assert decisions.preemptions == ()


def test_victims_already_stopping_are_not_chosen_twice():
    nodes = cluster(rack("z1-r1", 1))
    stopping = running(1, ["z1-r1-n1"], priority="P3", preempting=True, preempted_for=5)
    decisions = schedule(
        snapshot(nodes, pending=[job(5, gpus=8, priority="P1"), job(6, gpus=8, priority="P1")], running_jobs=[stopping])
    )
    assert decisions.preemptions == ()
    assert decisions.pending[5].code == ReasonCode.PREEMPTING


def test_fragmentation_is_fragmented_not_insufficient_capacity():
    nodes = cluster(rack("z1-r1", 4))
    halves = [running(i, [f"z1-r1-n{i}"], gpus_per_node=4) for i in range(1, 5)]
    decisions = schedule(snapshot(nodes, pending=[job(80, gpus=8)], running_jobs=halves, preemption=False))
    reason = decisions.pending[80]
    assert reason.code == ReasonCode.FRAGMENTED
    assert reason.message.startswith("needs 8 H100 in one node; 16 free but the largest block is 4 (node z1-r1-n1)")


def test_rack_fragmentation_names_the_rack():
    nodes = cluster(rack("z1-r1", 4), rack("z1-r2", 4))
    busy = [running(1, ["z1-r1-n1"]), running(2, ["z1-r2-n1", "z1-r2-n2"])]
    gang = job(81, gpus=32, topology=Topology.REQUIRE_SAME_RACK)
    decisions = schedule(snapshot(nodes, pending=[gang], running_jobs=busy, preemption=False, backfill=False))
    assert decisions.pending[81].message.startswith(
        "needs 32 H100 in one rack; 40 free but the largest block is 24 (rack z1-r1)"
    )


def test_quota_limit_is_explained_with_numbers():
    nodes = cluster(rack("z1-r1", 8))
    quotas = teams(vision={"gpu:H100": (16, 16)})
    used = [running(i, [f"z1-r1-n{i}"]) for i in range(1, 5)]
    decisions = schedule(snapshot(nodes, pending=[job(90, gpus=8)], running_jobs=used, team_list=quotas))
    assert decisions.pending[90].code == ReasonCode.QUOTA
    assert decisions.pending[90].message == (
        "team vision uses 32 H100 (at most 32: 16 guaranteed + 16 borrowing limit); this job needs 8 more"
    )


def test_a_job_larger_than_its_team_may_ever_hold_says_only_a_larger_quota_lets_it_start():
    nodes = cluster(rack("z1-r1", 8))
    quotas = teams(vision={"gpu:H100": (16, 16)})
    decisions = schedule(snapshot(nodes, pending=[job(91, gpus=40)], team_list=quotas))
    assert decisions.pending[91].code == ReasonCode.QUOTA
    assert decisions.pending[91].message == (
        "this job asks 40 H100, more than team vision may ever hold (at most 32: 16 guaranteed + 16 borrowing limit):"
        " it can start only once that quota is raised"
    )


def test_at_guarantee_with_nothing_idle_is_quota():
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (8, 8)}, ranking={"gpu:H100": (8, 8)})
    used = [running(1, ["z1-r1-n1"]), running(2, ["z1-r1-n2"], team="ranking")]
    decisions = schedule(snapshot(nodes, pending=[job(91, gpus=8)], running_jobs=used, team_list=quotas))
    assert decisions.pending[91].message == (
        "team vision at 8/8 guaranteed H100, nothing idle to borrow (needs 8, 0 free); "
        "reserved 1 node(s), estimated start 22:20 UTC"
    )


def test_placement_past_the_guarantee_is_marked_borrowed():
    nodes = cluster(rack("z1-r1", 4))
    quotas = teams(vision={"gpu:H100": (8, 24)})
    decisions = schedule(snapshot(nodes, pending=[job(1, gpus=8, age=120), job(2, gpus=8, age=60)], team_list=quotas))
    assert {p.job_id: p.borrowed for p in decisions.placements} == {1: False, 2: True}


def test_no_matching_nodes_lists_their_states():
    nodes = cluster(rack("z1-r1", 2), rack("z1-r2", 2, gpu_type="L40S", state=NodeState.CORDONED))
    decisions = schedule(snapshot(nodes, pending=[job(1, gpus=8, gpu_type="L40S")]))
    reason = decisions.pending[1]
    assert reason.code == ReasonCode.NO_MATCHING_NODES
    assert reason.message == (
        "no READY node has gpu_type=L40S (matching nodes: 2 CORDONED) "
        "(0/4 nodes fit a task: 2 CORDONED, 2 other resource class)"
    )
    assert reason.histogram == (("CORDONED", 2), ("other resource class", 2))
    assert reason.fit_count == "0/4"


def test_held_dependency_and_backoff_wait_with_their_reason():
    nodes = cluster(rack("z1-r1", 2))
    pending = [job(1, held=True), job(2, waiting_on=(7, 9)), job(3, not_before=NOW + 250)]
    decisions = schedule(snapshot(nodes, pending=pending))
    assert decisions.placements == ()
    assert {k: (r.code, r.message) for k, r in decisions.pending.items()} == {
        1: (ReasonCode.HELD, "held: it will not start until it is released"),
        2: (ReasonCode.DEPENDENCY, "waiting for jobs 7, 9 to succeed"),
        3: (ReasonCode.BACKOFF, "retry back-off until 21:24 UTC (250 s from now)"),
    }
    # Not a story about room on the nodes: no node count.
    assert {(r.histogram, r.fit_count) for r in decisions.pending.values()} == {((), "")}


def test_priority_class_goes_first_then_fair_share_then_age():
    nodes = cluster(rack("z1-r1", 1))
    quotas = teams(vision={"gpu:H100": (8, 8)}, ranking={"gpu:H100": (8, 8)})
    ranking_busy = running(9, ["z1-r1-n1"], team="ranking", gpus_per_node=4)
    pending = [
        job(1, gpus=1, priority="P3", age=500),
        job(2, gpus=1, team="ranking", age=400),
        job(3, gpus=1, age=100),
        job(4, gpus=1, age=200),
        job(5, gpus=1, priority="P1", age=10),
    ]
    decisions = schedule(snapshot(nodes, pending=pending, running_jobs=[ranking_busy], team_list=quotas))
    # P1 first; then vision (share lower than ranking's) twice, oldest first; ranking; then P3.
    assert decisions.order == (5, 4, 3, 2, 1)


def test_aging_raises_a_job_one_class_per_interval_but_never_into_p0():
    nodes = cluster(rack("z1-r1", 1))
    pending = [
        job(1, gpus=1, priority="P3", age=9 * HOUR),
        job(2, gpus=1, priority="P2", age=60),
        job(3, gpus=1, priority="P0", age=60),
        job(4, gpus=1, priority="P1", age=60),
    ]
    decisions = schedule(snapshot(nodes, pending=pending, aging_interval_s=4 * HOUR))
    assert decisions.order == (3, 1, 4, 2)  # P3 aged two classes sits with P1, and is older


def test_shortest_expected_gpu_time_first_within_a_team():
    nodes = cluster(rack("z1-r1", 1))
    pending = [job(1, gpus=8, runtime=10 * HOUR, age=300), job(2, gpus=1, runtime=HOUR, age=100)]
    decisions = schedule(snapshot(nodes, pending=pending))
    assert decisions.order == (2, 1)


def test_require_same_rack_refuses_to_split_and_spread_spreads():
    nodes = cluster(rack("z1-r1", 4), rack("z1-r2", 4))
    busy = [running(1, ["z1-r1-n1"]), running(2, ["z1-r2-n1"])]
    packed = job(1, gpus=32, topology=Topology.REQUIRE_SAME_RACK)
    spread = job(2, gpus=16, topology=Topology.SPREAD, team="ranking")
    decisions = schedule(snapshot(nodes, pending=[packed, spread], running_jobs=busy))
    assert [p.job_id for p in decisions.placements] == [2]
    assert sorted({n.split("-n")[0] for n in placed_nodes(decisions, 2)}) == ["z1-r1", "z1-r2"]


def test_a_spread_gang_takes_the_room_left_on_a_node_once_another_in_its_rack_is_full():
    # Five one-GPU tasks, 1 GPU free on n1 and 4 on n2: one on n1, then n1 is full and n2
    # takes the other four (the spread used to stop at a full node and leave the job waiting).
    nodes = cluster(rack("z1-r1", 2))
    busy = [running(1, ["z1-r1-n1"], gpus_per_node=7), running(2, ["z1-r1-n2"], gpus_per_node=4)]
    spread = job(5, gpus=5, per_task=1, topology=Topology.SPREAD)
    decisions = schedule(snapshot(nodes, pending=[spread], running_jobs=busy, preemption=False))
    assert placed_nodes(decisions, 5) == ["z1-r1-n1"] + ["z1-r1-n2"] * 4


def test_a_spread_gang_keeps_taking_racks_in_turn_past_a_full_node():
    # Nine one-GPU tasks; r1-n1 has room for one, r1-n2 and r2-n1 for four each: the racks
    # take tasks in turn, r1-n1 fills after its one, and r1-n2 goes on taking r1's share.
    nodes = cluster(rack("z1-r1", 2), rack("z1-r2", 1))
    busy = [
        running(1, ["z1-r1-n1"], gpus_per_node=7),
        running(2, ["z1-r1-n2"], gpus_per_node=4),
        running(3, ["z1-r2-n1"], gpus_per_node=4),
    ]
    spread = job(5, gpus=9, per_task=1, topology=Topology.SPREAD)
    decisions = schedule(snapshot(nodes, pending=[spread], running_jobs=busy, preemption=False))
    assert sorted(placed_nodes(decisions, 5)) == ["z1-r1-n1"] + ["z1-r1-n2"] * 4 + ["z1-r2-n1"] * 4


def test_a_spread_gang_takes_a_node_each_before_any_node_takes_two():
    # Four one-GPU tasks: rack A's one node has room for four, rack B's three nodes for one
    # each. Every node takes one (the gathering used to stop at the roomy node, which then took
    # all four; and with every node seen, the racks' turns gave it two while a node of B had none).
    nodes = cluster(rack("z1-rA", 1), rack("z1-rB", 3))
    busy = [running(1, ["z1-rA-n1"], gpus_per_node=4)] + [
        running(2 + i, [f"z1-rB-n{i + 1}"], gpus_per_node=7) for i in range(3)
    ]
    spread = job(9, gpus=4, per_task=1, topology=Topology.SPREAD)
    decisions = schedule(snapshot(nodes, pending=[spread], running_jobs=busy, preemption=False))
    assert sorted(placed_nodes(decisions, 9)) == ["z1-rA-n1", "z1-rB-n1", "z1-rB-n2", "z1-rB-n3"]


def test_a_spread_gang_doubles_up_only_where_nodes_run_out():
    # Six one-GPU tasks on two racks of two nodes, each with room for two: every node takes
    # one, then the racks take turns again for the two left.
    nodes = cluster(rack("z1-r1", 2), rack("z1-r2", 2))
    busy = [running(1 + i, [name], gpus_per_node=6) for i, name in enumerate(n.name for n in nodes)]
    spread = job(9, gpus=6, per_task=1, topology=Topology.SPREAD)
    decisions = schedule(snapshot(nodes, pending=[spread], running_jobs=busy, preemption=False))
    assert sorted(placed_nodes(decisions, 9)) == [
        "z1-r1-n1",
        "z1-r1-n1",
        "z1-r1-n2",
        "z1-r2-n1",
        "z1-r2-n1",
        "z1-r2-n2",
    ]


def test_a_gang_never_spans_zones():
    nodes = cluster(rack("z1-r1", 2), rack("z2-r1", 2))
    decisions = schedule(snapshot(nodes, pending=[job(1, gpus=24)], preemption=False))
    assert decisions.placements == ()
    assert decisions.pending[1].code == ReasonCode.FRAGMENTED


def test_cpu_jobs_go_to_cpu_nodes():
    nodes = cluster(rack("z1-r1", 2), rack("z1-r9", 2, gpu_type=None, cpus=64))
    etl = job(1, gpus=0, gpu_type=None, per_task=0, cpus=32, tasks=3)
    decisions = schedule(snapshot(nodes, pending=[etl]))
    assert placed_nodes(decisions, 1) == ["z1-r9-n1", "z1-r9-n1", "z1-r9-n2"]


def test_nodes_being_emptied_for_a_job_are_kept_for_it():
    nodes = cluster(rack("z1-r1", 2))
    # Job 5's victim stops on n1, which has 4 GPUs free meanwhile; job 6 must not take them.
    stopping = running(1, ["z1-r1-n1"], gpus_per_node=4, priority="P3", preempting=True, preempted_for=5)
    busy = running(2, ["z1-r1-n2"], priority="P1")
    decisions = schedule(
        snapshot(
            nodes,
            pending=[job(5, gpus=8, priority="P1"), job(6, gpus=4, team="ranking")],
            running_jobs=[stopping, busy],
        )
    )
    assert decisions.placements == ()
    assert decisions.pending[5].code == ReasonCode.PREEMPTING


def test_reclaim_picks_the_block_not_just_the_newest_jobs():
    # ranking holds 16 over its guarantee, as four 2-GPU jobs spread over two nodes plus older
    # whole-node jobs; vision needs one whole node: the search evicts what frees one node.
    nodes = cluster(rack("z1-r1", 4))
    quotas = teams(vision={"gpu:H100": (16, 0)}, ranking={"gpu:H100": (16, 16)})
    spread = [
        running(
            10 + i, [f"z1-r1-n{1 + i % 2}"], gpus_per_node=2, first_gpu=2 * (i // 2) + 4, team="ranking", age=60 + i
        )
        for i in range(4)
    ]
    halves = [running(20 + i, [f"z1-r1-n{1 + i}"], gpus_per_node=4, team="ranking", age=HOUR) for i in range(2)]
    whole = [running(30 + i, [f"z1-r1-n{3 + i}"], team="ranking", age=2 * HOUR) for i in range(2)]
    decisions = schedule(
        snapshot(nodes, pending=[job(1, gpus=8)], running_jobs=[*spread, *halves, *whole], team_list=quotas)
    )
    victims = sorted(p.victim_job_id for p in decisions.preemptions)
    freed_nodes = {t.node for j in [*spread, *halves, *whole] if j.job_id in victims for t in j.tasks}
    assert len(freed_nodes) == 1
    assert sum(j.units for j in [*spread, *halves, *whole] if j.job_id in victims) == 8


def test_a_requeued_victim_goes_after_the_job_it_was_preempted_for():
    """Without this, an overdue victim (older than its preemptor) retakes the room it just
    gave up, and the preemptor evicts it again: ping-pong. Found by a random replay."""
    nodes = cluster(rack("z1-r1", 4))
    quotas = teams(vision={"gpu:H100": (16, 32)}, ranking={"gpu:H100": (16, 32)})
    other_vision = running(9, ["z1-r1-n1", "z1-r1-n2"], team="vision", age=60)
    victim = job(1, gpus=16, team="vision", age=5 * HOUR, yields_to=2)  # overdue, older
    preemptor = job(2, gpus=16, team="ranking", age=3 * 60)
    decisions = schedule(snapshot(nodes, pending=[victim, preemptor], running_jobs=[other_vision], team_list=quotas))
    assert decisions.order == (2, 1)
    assert placed_nodes(decisions, 2) == ["z1-r1-n3", "z1-r1-n4"] and not decisions.preemptions
    # Once the preemptor has started (it is no longer pending), the victim's place is its own.
    alone = schedule(snapshot(nodes, pending=[victim], team_list=quotas))
    assert alone.order == (1,)


def test_room_a_stopped_victim_left_is_kept_for_its_preemptor():
    """Of a P0's two victims, one has stopped (its node n2 is free, it waits again) and one
    still stops on n1: the P0 needs both nodes, so neither its requeued victim nor anyone
    else may take n2 meanwhile. Without the hold the victim retook n2 and was evicted again
    (seen in the e2e test on real agents)."""
    nodes = cluster(rack("z1-r1", 2))
    stopping = running(1, ["z1-r1-n1"], priority="P2", preempting=True, preempted_for=5)
    stopped = job(2, gpus=8, priority="P2", yields_to=5)
    other = job(3, gpus=4, priority="P1", team="ranking")
    decisions = schedule(
        snapshot(nodes, pending=[job(5, gpus=16, priority="P0"), stopped, other], running_jobs=[stopping])
    )
    assert decisions.placements == ()
    assert decisions.pending[5].code == ReasonCode.PREEMPTING
    assert decisions.pending[2].message == (
        "fits the free room, but it is held for job 5, which preempted jobs to start there; "
        "reserved 1 node(s), estimated start 22:20 UTC"
    )
    assert decisions.pending[3].code == ReasonCode.BEHIND_RESERVATION


def test_room_freed_by_reclaim_goes_to_the_owner_not_to_an_overdue_borrower():
    """Found by logging every preemption of a replay: an owner reclaimed one GPU from a
    borrower; when the victim had stopped, a job of the borrowing team that had waited past
    the bound came first in the queue and took the freed GPU, so the owner evicted it in turn,
    every 120 s, 109 times over. With `nominate_reclaimers` the owner is nominated to the node
    it evicted on; in the pass after its victim stopped that node is held for it, and its
    nomination then lapses."""
    nodes = cluster(rack("z1-r1", 1))
    quotas = teams(vision={"gpu:H100": (1, 8)}, ranking={"gpu:H100": (0, 8)})
    borrowers = [running(10 + i, ["z1-r1-n1"], gpus_per_node=1, first_gpu=i, team="ranking") for i in range(7)]
    owner = job(2, gpus=1, team="vision", age=120)
    overdue = job(3, gpus=1, team="ranking", age=5 * HOUR)

    young = running(17, ["z1-r1-n1"], gpus_per_node=1, first_gpu=7, team="ranking", age=30)
    evicted = schedule(
        snapshot(
            nodes,
            pending=[owner, overdue],
            running_jobs=borrowers + [young],
            team_list=quotas,
            nominate_reclaimers=True,
            reclaim_in_turn_backlog=None,  # always, not only under a deep backlog (the default)
            reclaim_in_turn_backlog_off=None,
        )
    )
    assert [(p.victim_job_id, p.for_job_id) for p in evicted.preemptions] == [(17, 2)]
    assert evicted.nominations == {2: ("z1-r1-n1",)}
    # Off, or under the default's gate with 2 of the class's 8 GPUs asked, a job that only
    # reclaimed is not nominated.
    for off in (
        {"nominate_reclaimers": False, "reclaim_in_turn_backlog": None, "reclaim_in_turn_backlog_off": None},
        {},
    ):
        assert (
            schedule(
                snapshot(nodes, pending=[owner, overdue], running_jobs=borrowers + [young], team_list=quotas, **off)
            ).nominations
            == {}
        )

    # The victim has stopped: GPU 7 is free, the overdue borrower goes first in the queue.
    nominated = replace(owner, nominated=evicted.nominations[2])
    after = schedule(
        snapshot(
            nodes,
            pending=[nominated, overdue],
            running_jobs=borrowers,
            team_list=quotas,
            nominate_reclaimers=True,
            reclaim_in_turn_backlog=None,
            reclaim_in_turn_backlog_off=None,
        )
    )
    assert after.order == (3, 2)
    assert placed_nodes(after, 2) == ["z1-r1-n1"] and after.preemptions == ()
    assert after.pending[3].message == (
        "team ranking at 7/0 guaranteed H100, nothing idle to borrow (needs 1, 0 free); "
        "reserved 1 node(s), estimated start 22:20 UTC"
    )
    assert after.nominations == {}

    # Without the nomination, the old behaviour: the borrower takes it and the owner evicts again.
    again = schedule(snapshot(nodes, pending=[owner, overdue], running_jobs=borrowers, team_list=quotas))
    assert placed_nodes(again, 3) == ["z1-r1-n1"]


def test_a_job_that_evicted_for_priority_is_nominated_and_keeps_the_room_after_its_victim_stopped():
    """The same loop with an incident: a P0 evicted a P3; a P0 submitted later but waiting past
    the bound (its submit time was set back) goes first once the victim has stopped."""
    nodes = cluster(rack("z1-r1", 1))
    incident = job(2, gpus=8, priority="P0", age=60)
    evicted = schedule(snapshot(nodes, pending=[incident], running_jobs=[running(1, ["z1-r1-n1"], priority="P3")]))
    assert evicted.nominations == {2: ("z1-r1-n1",)}
    overdue = job(3, gpus=8, priority="P0", team="ranking", age=5 * HOUR)
    after = schedule(snapshot(nodes, pending=[replace(incident, nominated=evicted.nominations[2]), overdue]))
    assert after.order == (3, 2)
    assert placed_nodes(after, 2) == ["z1-r1-n1"] and after.preemptions == ()


def test_a_nomination_lapses_when_its_job_does_not_start_in_the_pass_after_its_victims_stopped():
    """A nominated job that cannot start (here: held by its user) holds nothing, and leaves
    the pass without a nomination: room is never kept for it beyond that one pass."""
    nodes = cluster(rack("z1-r1", 1))
    held = job(2, gpus=8, held=True, nominated=("z1-r1-n1",))
    other = job(3, gpus=8, team="ranking")
    decisions = schedule(snapshot(nodes, pending=[held, other]))
    assert placed_nodes(decisions, 3) == ["z1-r1-n1"]
    assert decisions.nominations == {}


def test_a_preemptor_in_flight_keeps_its_nomination():
    nodes = cluster(rack("z1-r1", 2))
    stopping = running(1, ["z1-r1-n1"], preempting=True, preempted_for=5)
    preemptor = job(5, gpus=16, priority="P0", nominated=("z1-r1-n1", "z1-r1-n2"))
    decisions = schedule(snapshot(nodes, pending=[preemptor, job(6, gpus=8, team="ranking")], running_jobs=[stopping]))
    assert decisions.placements == ()
    assert decisions.nominations == {5: ("z1-r1-n1", "z1-r1-n2")}
    # One in flight without a nomination (it only reclaimed) gets none.
    alone = schedule(snapshot(nodes, pending=[replace(preemptor, nominated=())], running_jobs=[stopping]))
    assert alone.nominations == {}


def test_a_team_past_its_guarantee_blocked_by_fragmentation_is_told_so_not_that_nothing_is_idle():
    """Seen in a replay: "team b436b2 at 296/99 guaranteed H100, nothing idle to borrow (needs
    8, 16 free)". With as much free as it needs, what blocks it is the shape of the free room."""
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (8, 16)}, ranking={"gpu:H100": (8, 16)})
    halves = [running(1, ["z1-r1-n1"], gpus_per_node=4), running(2, ["z1-r1-n2"], gpus_per_node=4)]
    decisions = schedule(snapshot(nodes, pending=[job(3, gpus=8)], running_jobs=halves, team_list=quotas))
    assert decisions.pending[3].code == ReasonCode.FRAGMENTED
    assert decisions.pending[3].message == (
        "needs 8 H100 in one node; 8 free but the largest block is 4 (node z1-r1-n1) (0/2 nodes fit a task: "
        "2 fewer than 8 free H100); reserved 1 node(s), estimated start 22:20 UTC"
    )


def test_with_overdue_first_only_the_oldest_jobs_past_the_bound_jump_the_fair_share_order():
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (8, 16)}, ranking={"gpu:H100": (8, 16)})
    oldest, older = job(1, team="ranking", age=3 * HOUR), job(2, team="ranking", age=2.5 * HOUR)
    fresh = job(3, team="vision", age=600)
    pending = [oldest, older, fresh]
    every_overdue = schedule(snapshot(nodes, pending=pending, team_list=quotas))
    assert every_overdue.order == (1, 2, 3)
    assert [p.job_id for p in every_overdue.placements] == [1, 2]
    # Only the head of the overdue line goes first (it would get the reservation); the other
    # overdue job takes its team's turn, after a team now lower in share.
    head_only = schedule(snapshot(nodes, pending=pending, team_list=quotas, overdue_first=1))
    assert head_only.order == (1, 3, 2)
    assert [p.job_id for p in head_only.placements] == [1, 3]
    assert head_only.pending[2].code == ReasonCode.QUOTA  # ranking is at its guarantee, nothing idle


def test_a_victim_requeued_after_running_does_not_take_the_overdue_head_from_a_job_that_never_ran():
    nodes = cluster(rack("z1-r1", 1))
    quotas = teams(vision={"gpu:H100": (8, 16)})
    busy = running(1, ["z1-r1-n1"], remaining=HOUR)
    # Submitted 3.5 hours ago, ran, was evicted and waits again since 10 minutes (its class,
    # which ages from its submit, is the other job's).
    requeued = job(2, age=3.5 * HOUR, queued_at=NOW - 600)
    never_ran = job(3, age=2.5 * HOUR)

    def decide(since_requeue: bool):
        return schedule(
            snapshot(
                nodes,
                pending=[requeued, never_ran],
                running_jobs=[busy],
                team_list=quotas,
                reservations_per_class=1,
                overdue_since_requeue=since_requeue,
            )
        )

    from_submit = decide(False)
    assert from_submit.order == (2, 3)
    assert [r.job_id for r in from_submit.reservations] == [2]
    # Counted from its requeue it is not overdue: the job waiting 2.5 hours heads the line and
    # holds the reservation; the victim takes its team's turn after it.
    from_requeue = decide(True)
    assert from_requeue.order == (3, 2)
    assert [r.job_id for r in from_requeue.reservations] == [3]


def test_reclaim_searches_are_bounded_per_pass():
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (8, 0)}, ranking={"gpu:H100": (8, 0)}, other={"gpu:H100": (0, 16)})
    borrowers = [running(1, ["z1-r1-n1"], team="other"), running(2, ["z1-r1-n2"], team="other")]
    owners = [job(3, gpus=8, team="vision"), job(4, gpus=8, team="ranking")]
    unbounded = schedule(snapshot(nodes, pending=owners, running_jobs=borrowers, team_list=quotas))
    assert sorted(p.victim_job_id for p in unbounded.preemptions) == [1, 2]
    bounded = schedule(
        snapshot(nodes, pending=owners, running_jobs=borrowers, team_list=quotas, max_reclaim_searches=1)
    )
    assert len(bounded.preemptions) == 1
    tried = bounded.preemptions[0].for_job_id
    assert bounded.pending[tried].code == ReasonCode.PREEMPTING
    # The other owner is tried again next pass; meanwhile it waits with a capacity reason.
    assert bounded.pending[7 - tried].code == ReasonCode.INSUFFICIENT_CAPACITY


def test_an_owner_reclaims_only_after_the_reclaim_delay():
    nodes = cluster(rack("z1-r1", 1))
    quotas = teams(vision={"gpu:H100": (8, 0)}, ranking={"gpu:H100": (0, 8)})
    borrower = running(1, ["z1-r1-n1"], team="ranking")

    def decide(waited: float):
        return schedule(
            snapshot(
                nodes,
                pending=[job(2, team="vision", age=waited)],
                running_jobs=[borrower],
                team_list=quotas,
                reclaim_after_wait_s=600,
            )
        )

    waiting = decide(599)
    assert waiting.preemptions == ()
    assert waiting.pending[2].code == ReasonCode.PREEMPTION_PENDING
    assert waiting.pending[2].message.startswith(
        "within team vision's guarantee: it reclaims borrowed H100 once it has waited 10 minutes, "
        "if no room frees up before"
    )
    assert [p.victim_job_id for p in decide(600).preemptions] == [1]
