"""The shortcuts of a pass give exactly what trying every job on a fresh pass gives: equal
jobs repeat a decision (equivalence classes), reasons are computed once per kind, and a
`Scheduler` keeps the free-room index between passes. Compared whole: placements,
preemptions, reservations, the queue order and every pending reason."""

import copy
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core.model import (
    ClusterSnapshot,
    Group,
    JobShape,
    MaintenanceWindow,
    Node,
    NodeState,
    PendingJob,
    PolicyConfig,
    Quota,
    RunningJob,
    TaskPlacement,
    Team,
    Topology,
)
from scheduling.core.scheduler import Pass, Scheduler, schedule
from tests.unit.core.builders import cluster, job, placed_nodes, rack, running, snapshot, teams
from tests.unit.core.test_schedule_properties import nodes

NOW = 1_794_000_000.0
TEAMS = ("vision", "ranking", "speech")
PRIORITIES = ("P0", "P1", "P2", "P3")
GROUPS = (1, 2)  # job groups (arrays) some jobs belong to, each with a small parallelism
EQUIVALENCE_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class EveryJobTried(Pass):
    repeat_equal = False


def tried_alone(snapshot: ClusterSnapshot):
    """The reference: a fresh pass that tries every job and explains each on its own."""
    return EveryJobTried(snapshot).run()


def fleets():
    """Few racks of many nodes: many look-alike jobs meet the same room."""
    return nodes(racks=(1, 2), per_rack=(1, 6))


@st.composite
def shapes(draw) -> JobShape:
    gpu_type = draw(st.sampled_from(["H100", "A100", None]))
    if gpu_type:
        per_task, tasks = draw(st.sampled_from([1, 2, 4, 8])), draw(st.integers(1, 4))
        cpus = draw(st.sampled_from([1, 8]))
    else:
        per_task, tasks, cpus = 0, draw(st.integers(1, 3)), draw(st.sampled_from([8, 32]))
    selector = {"ib": "ndr"} if draw(st.integers(0, 4)) == 0 else {}
    return JobShape(
        gpu_type, tasks, per_task, cpus, draw(st.sampled_from([8, 64])), selector, draw(st.sampled_from(list(Topology)))
    )


def running_jobs(draw, cluster: tuple[Node, ...], count: int, pending_ids: list[int]) -> tuple[RunningJob, ...]:
    """Jobs on real free room, a task or two each; a few already stopping for a pending job."""
    free = {n.name: [list(range(n.gpus)), n.cpus, n.memory_gb] for n in cluster}
    jobs = []
    for job_id in range(1, count + 1):
        tasks = []
        first = draw(st.sampled_from(cluster))
        alike = [n for n in cluster if n.gpu_type == first.gpu_type and n.name != first.name]
        for node in [first] + ([draw(st.sampled_from(alike))] if alike and draw(st.booleans()) else []):
            room, gpus = free[node.name], (draw(st.sampled_from([1, 2, 4, 8])) if node.gpu_type else 0)
            cpus, memory = draw(st.sampled_from([1, 8, 16])), draw(st.sampled_from([8, 64, 128]))
            if len(room[0]) < gpus or room[1] < cpus or room[2] < memory:
                continue
            indices = tuple(room[0][:gpus])
            room[0], room[1], room[2] = room[0][gpus:], room[1] - cpus, room[2] - memory
            tasks.append(TaskPlacement(len(tasks), node.name, indices, cpus, memory))
        if not tasks:
            continue
        stopping_for = draw(st.sampled_from([None] * 8 + pending_ids[:2])) if pending_ids else None
        jobs.append(
            RunningJob(
                job_id,
                draw(st.sampled_from(TEAMS)),
                draw(st.sampled_from(PRIORITIES)),
                first.gpu_type,
                tuple(tasks),
                NOW - draw(st.sampled_from([60.0, 1200.0, 20_000.0])),
                NOW + draw(st.floats(60, 50_000)),
                checkpointing=draw(st.booleans()),
                preempting=stopping_for is not None,
                preempted_for=stopping_for,
                group=draw(st.sampled_from([None, None, None, *GROUPS])),
            )
        )
    return tuple(jobs)


@st.composite
def queues(draw, first_id: int = 1000) -> tuple[PendingJob, ...]:
    """Jobs of a few kinds (team, priority, shape, runtime), many alike, as real queues are."""
    kinds = draw(
        st.lists(
            st.tuples(
                st.sampled_from(TEAMS),
                st.sampled_from(PRIORITIES),
                shapes(),
                st.sampled_from([600.0, 3600.0, 40_000.0]),
            ),
            min_size=1,
            max_size=5,
        )
    )
    jobs = []
    for index in range(draw(st.integers(1, 30))):
        team, priority, shape, runtime = draw(st.sampled_from(kinds))
        if draw(st.integers(0, 3)) == 0:  # now and then a job alike but for its time limit
            runtime *= 3
        submitted = NOW - draw(st.sampled_from([60.0, 3000.0, 9000.0, 30_000.0]))
        requeued = draw(st.sampled_from([None, None, None, 30.0, 8000.0]))  # it ran, and waits again since
        jobs.append(
            PendingJob(
                first_id + index,
                team,
                priority,
                shape,
                submitted,
                runtime,
                checkpointing=draw(st.booleans()),
                yields_to=draw(st.sampled_from([None] * 6 + [first_id, first_id + 1])),
                group=draw(st.sampled_from([None, None, *GROUPS])),
                queued_at=None if requeued is None else min(NOW, submitted + requeued),
            )
        )
    return tuple(jobs)


@st.composite
def snapshots(draw) -> ClusterSnapshot:
    cluster = draw(fleets())
    names = [n.name for n in cluster]
    # A few jobs nominated to a node or two when they evicted (PendingJob.nominated).
    pending = tuple(
        replace(j, nominated=tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))))
        if draw(st.integers(0, 4)) == 0
        else j
        for j in draw(queues())
    )
    running = running_jobs(draw, cluster, draw(st.integers(0, 20)), [j.job_id for j in pending])
    quota = st.sampled_from([None, Quota(4, 4), Quota(8, 0), Quota(16, 16)])
    teams = tuple(
        Team(name, None, {rc: q for rc in ("gpu:H100", "gpu:A100", "cpu") if (q := draw(quota))}) for name in TEAMS
    )
    backlog = draw(st.sampled_from([None, 0.25, 1.0]))
    config = PolicyConfig(
        reservation_wait_bound_s=draw(st.sampled_from([600.0, 7200.0])),
        reservations_per_class=draw(st.sampled_from([1, 2])),
        max_preemption_searches=draw(st.sampled_from([0, 1, 2, 64])),
        max_reclaim_searches=draw(st.sampled_from([None, 0, 1, 3])),
        reclaim_after_wait_s=draw(st.sampled_from([0.0, 300.0])),
        nominate_reclaimers=draw(st.booleans()),
        reclaim_in_turn=draw(st.booleans()),
        reclaim_in_turn_backlog=backlog,
        reclaim_in_turn_backlog_off=None if backlog is None else draw(st.sampled_from([None, 0.0, 0.25, backlog])),
        overdue_first=draw(st.sampled_from([None, 1, 2])),
        order=draw(st.sampled_from(["fair_share", "weighted_shortest"])),
        overdue_since_requeue=draw(st.booleans()),
    )
    groups = {group: Group("array", draw(st.integers(1, 4))) for group in GROUPS}
    # Where the backlog gate held in a pass before this one (None: not known).
    held = st.frozensets(st.sampled_from(["gpu:H100", "gpu:A100", "cpu"]))
    # Now and then a window or two on some nodes: jobs whose limits run into one stay off them.
    windows = tuple(
        MaintenanceWindow(
            index,
            f"window {index}",
            tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))),
            NOW + draw(st.sampled_from([1200.0, 3000.0, 20_000.0])),
            NOW + 50_000.0,
        )
        for index in range(draw(st.sampled_from([0, 0, 0, 1, 2])))
    )
    return ClusterSnapshot(
        cluster, running, pending, teams, NOW, config, groups, maintenance=windows, reclaim_turn=draw(st.none() | held)
    )


@EQUIVALENCE_SETTINGS
@given(snapshots())
def test_equal_jobs_get_what_each_would_get_if_tried_alone_in_order(snapshot):
    assert schedule(snapshot) == tried_alone(snapshot)


def as_given(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    return snapshot


@pytest.mark.parametrize("read", [as_given, copy.deepcopy], ids=["same objects", "read afresh"])
@EQUIVALENCE_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_a_kept_scheduler_decides_as_a_fresh_pass_over_changing_snapshots(read, snapshot, rng):
    """`read`: each snapshot as the caller hands it over: the objects it keeps (the simulator),
    or new objects with equal fields, as the worker reads them from the store every pass."""
    scheduler = Scheduler()
    for _ in range(4):
        remembered = as_remembered(snapshot, scheduler)
        decisions = scheduler.schedule(read(snapshot))
        assert decisions == tried_alone(remembered)
        snapshot = next_snapshot(snapshot, decisions, rng)


def test_a_snapshot_read_afresh_meets_the_kept_free_room_index():
    # 120 one-GPU jobs on 16 nodes, read again as new objects with equal fields: the kept
    # index is brought up to date, not built anew (a refresh refuses a snapshot whose running
    # jobs are mostly new objects, so without the swap for the kept ones this would rebuild).
    nodes = cluster(rack("z1-r1", 16))
    busy = [running(i, [f"z1-r1-n{1 + i // 8}"], gpus_per_node=1, first_gpu=i % 8) for i in range(120)]
    first = snapshot(nodes, pending=[job(500, gpus=16), job(501, gpus=8)], running_jobs=busy)
    kept = Scheduler()
    kept.schedule(first)
    state = kept.state
    again = copy.deepcopy(replace(first, now=first.now + 1))
    assert kept.schedule(again) == tried_alone(again)
    assert kept.state is state


def as_remembered(snapshot: ClusterSnapshot, scheduler: Scheduler) -> ClusterSnapshot:
    """What a fresh pass needs to decide as `scheduler` will on `snapshot`: where the backlog
    gate held in the scheduler's last pass, unless the snapshot says."""
    if snapshot.reclaim_turn is not None:
        return snapshot
    return replace(snapshot, reclaim_turn=scheduler.reclaim_turn)


def actions(decisions) -> tuple:
    """What a pass starts, evicts, reserves and nominates: all the simulator reads."""
    return decisions.placements, decisions.preemptions, decisions.reservations, decisions.nominations


@EQUIVALENCE_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_a_pass_that_stops_at_what_can_still_start_acts_as_one_that_tries_every_job(snapshot, rng):
    """`Scheduler(actions_only=True)` leaves out each team's jobs once none of them can change
    anything: what it starts, evicts, reserves and nominates is what trying every job gives,
    and the jobs it considers keep their order."""
    scheduler = Scheduler(actions_only=True)
    for _ in range(4):
        snapshot = next_snapshot(snapshot, acts_as_every_job_tried(scheduler, snapshot), rng)


def acts_as_every_job_tried(scheduler: Scheduler, snapshot: ClusterSnapshot):
    """Assert that a pass of `scheduler`, which prunes, acts as a fresh pass that tries every
    job and considers its jobs in that pass's order; returns that pass's decisions."""
    reference = tried_alone(as_remembered(snapshot, scheduler))
    decisions = scheduler.schedule(snapshot)
    assert actions(decisions) == actions(reference)
    considered = set(decisions.order)
    assert decisions.order == tuple(job_id for job_id in reference.order if job_id in considered)
    return reference


def test_a_pass_that_stops_at_what_can_still_start_leaves_out_a_team_with_no_room_left():
    """Two teams' one-GPU jobs and a full node, no preemption: once the first job blocked has
    the one reservation, nothing of either team can start, evict or reserve, so the pass
    considers that job alone; trying every job acts the same."""
    nodes = rack("r1", 1)
    busy = running(1, [nodes[0].name], gpus_per_node=8)
    queue = tuple(job(2 + i, gpus=1, team=("vision", "ranking")[i % 2]) for i in range(6))
    state = snapshot(nodes, pending=queue, running_jobs=(busy,), reservations_per_class=1, preemption=False)
    decisions = Scheduler(actions_only=True).schedule(state)
    reference = tried_alone(state)
    assert actions(decisions) == actions(reference)
    assert len(decisions.reservations) == 1
    assert len(decisions.order) == 1
    assert len(reference.order) == 6


def next_snapshot(snapshot: ClusterSnapshot, decisions, rng: random.Random) -> ClusterSnapshot:
    """What the worker sees next (the backlog gate's memory left to the kept `Scheduler`):
    placed jobs run (most: a lost race leaves one pending),
    nominations are kept and victims stop; some jobs end, a node may change state, a pending job may be edited (same
    id, new object) and new ones arrive."""
    placed = {p.job_id: p for p in decisions.placements if rng.random() < 0.7}
    stopping = {p.victim_job_id: p.for_job_id for p in decisions.preemptions}
    running = [
        replace(job, preempting=True, preempted_for=stopping[job.job_id]) if job.job_id in stopping else job
        for job in snapshot.running
        if rng.random() > 0.3
    ]
    running += [
        RunningJob(
            job.job_id,
            job.team,
            job.priority,
            job.shape.gpu_type,
            placed[job.job_id].tasks,
            snapshot.now,
            snapshot.now + job.max_runtime_s,
            group=job.group,
        )
        for job in snapshot.pending
        if job.job_id in placed
    ]
    nominated = decisions.nominations  # stored with the reasons, as the leader does
    pending = [
        replace(job, nominated=nominated.get(job.job_id, ())) for job in snapshot.pending if job.job_id not in placed
    ]
    if pending and rng.random() < 0.3:
        index = rng.randrange(len(pending))
        pending[index] = replace(pending[index], priority=rng.choice(PRIORITIES))
    first_id = 1 + max((j.job_id for j in (*running, *pending)), default=2000)
    arrivals = rng.randint(0, 3) if snapshot.pending else 0
    pending += [replace(rng.choice(snapshot.pending), job_id=first_id + i, yields_to=None) for i in range(arrivals)]
    nodes = snapshot.nodes
    if rng.random() < 0.2:
        index = rng.randrange(len(nodes))
        flipped = NodeState.CORDONED if nodes[index].state == NodeState.READY else NodeState.READY
        nodes = nodes[:index] + (replace(nodes[index], state=flipped),) + nodes[index + 1 :]
    return replace(
        snapshot,
        nodes=nodes,
        running=tuple(running),
        pending=tuple(pending),
        now=snapshot.now + rng.choice([1.0, 600.0]),
        reclaim_turn=None,  # a kept `Scheduler` remembers its last pass's (see `as_remembered`)
    )


def test_a_node_freed_since_the_last_pass_is_chosen_as_a_fresh_pass_would():
    # n1's job ended: n1 goes back among the free nodes in name order, first for best fit.
    nodes = cluster(rack("z1-r1", 4))
    before = snapshot(nodes, running_jobs=[running(1, ["z1-r1-n1"])])
    after = replace(before, running=(), pending=(job(5, gpus=8),))
    kept = Scheduler()
    kept.schedule(before)
    decisions = kept.schedule(after)
    assert decisions == tried_alone(after)
    assert placed_nodes(decisions, 5) == ["z1-r1-n1"]


def test_a_placement_that_never_started_leaves_the_kept_room_free():
    nodes = cluster(rack("z1-r1", 2))
    first = snapshot(nodes, pending=[job(5, gpus=8)])
    kept = Scheduler()
    assert placed_nodes(kept.schedule(first), 5) == ["z1-r1-n1"]
    again = replace(first, now=first.now + 1)  # the worker lost the race: job 5 still pending
    assert kept.schedule(again) == tried_alone(again)
    assert placed_nodes(kept.schedule(again), 5) == ["z1-r1-n1"]


def test_a_preemptor_in_flight_holds_the_room_of_this_pass_not_the_last():
    # P0 job 5 needs two whole nodes and its victim still stops on n1. First n2 is free: it
    # holds n1 and n2. Then a job runs on n2 and n3 is free: it holds n3, and job 6 waits.
    nodes = cluster(rack("z1-r1", 3))
    victim, preemptor = running(1, ["z1-r1-n1"], preempting=True, preempted_for=5), job(5, gpus=16, priority="P0")
    first = snapshot(nodes, pending=[preemptor], running_jobs=[victim, running(2, ["z1-r1-n3"])])
    kept = Scheduler()
    assert kept.schedule(first) == tried_alone(first)
    second = replace(
        first, running=(victim, running(3, ["z1-r1-n2"])), pending=(preemptor, job(6, gpus=8)), now=first.now + 1
    )
    decisions = kept.schedule(second)
    assert decisions == tried_alone(second)
    assert decisions.placements == ()
    assert decisions.pending[6].message == (
        "fits the free room, but it is held for job 5, which preempted jobs "
        "to start there; reserved 1 node(s), estimated start 22:20 UTC"
    )


def _counting_shadow_starts(monkeypatch) -> list:
    """Every shadow start a preemptor in flight works out (`Pass._nodes_to_hold`) is logged."""
    import scheduling.core.scheduler as scheduler_module

    calls, real = [], scheduler_module.shadow_start
    monkeypatch.setattr(scheduler_module, "shadow_start", lambda *a, **k: calls.append(a[1].job_id) or real(*a, **k))
    return calls


def test_a_preemptor_in_flight_keeps_its_hold_while_jobs_start_where_it_has_no_room(monkeypatch):
    # P0 job 5 needs two whole nodes; its victim still stops on n1 and n2 is free: it holds
    # n1 and n2. Then a 4-GPU job starts on n3, where job 5 had no room for a task before
    # nor has now: the hold is the same, and it is not worked out again.
    nodes = cluster(rack("z1-r1", 3))
    victim, preemptor = running(1, ["z1-r1-n1"], preempting=True, preempted_for=5), job(5, gpus=16, priority="P0")
    half = running(2, ["z1-r1-n3"], gpus_per_node=4)
    first = snapshot(nodes, pending=[preemptor], running_jobs=[victim, half])
    kept = Scheduler()
    assert kept.schedule(first) == tried_alone(first)
    calls = _counting_shadow_starts(monkeypatch)
    second = replace(first, running=(victim, half, running(3, ["z1-r1-n3"], gpus_per_node=2, first_gpu=4)))
    second = replace(second, pending=(preemptor, job(6, gpus=8)), now=first.now + 1)
    decisions = kept.schedule(second)
    assert 5 not in calls  # job 6's own reservation is a shadow start too
    assert decisions == tried_alone(second)
    assert decisions.placements == ()
    assert decisions.pending[6].message.startswith("fits the free room, but it is held for job 5")


def test_a_preemptor_in_flight_works_its_hold_out_again_when_its_victims_node_gains_room():
    # Job 5 needs two whole nodes; its victim stops on n1, which job 2 shares: even once the
    # victim is gone n1 has only 4 GPUs, so job 5 holds nothing beyond n1. Then job 2 ends:
    # n1 still has no room for a task of job 5 now, but will once the victim is gone, so job
    # 5 holds n1 and n2 and job 6 waits (a hold kept from the last pass would let it start).
    nodes = cluster(rack("z1-r1", 2))
    victim = running(1, ["z1-r1-n1"], gpus_per_node=4, preempting=True, preempted_for=5)
    shared = running(2, ["z1-r1-n1"], gpus_per_node=4, first_gpu=4)
    preemptor = job(5, gpus=16, priority="P0")
    first = snapshot(nodes, pending=[preemptor], running_jobs=[victim, shared])
    kept = Scheduler()
    assert kept.schedule(first) == tried_alone(first)
    second = replace(first, running=(victim,), pending=(preemptor, job(6, gpus=8)), now=first.now + 1)
    decisions = kept.schedule(second)
    assert decisions == tried_alone(second)
    assert decisions.placements == ()


def test_equal_jobs_whose_search_within_their_limits_failed_spend_the_search_budget_once():
    """Three equal P0s over their team's borrowing limit, whose own victims would make no room
    they could use (a selector no node has): the first one's search fails, and an equal job
    neither tries nor spends it again, as a victim search that failed (`no_victims`); the
    budget of two is left for a P0 of another team that can evict. Trying every job acts the
    same (it spent the budget on the repeats, and reserved instead)."""
    nodes = rack("r1", 2)
    own = running(1, [nodes[0].name], team="ranking", priority="P2")
    low = running(2, [nodes[1].name], priority="P1", age=60.0)
    refused = tuple(job(10 + i, team="ranking", priority="P0", age=600.0, selector={"ib": "ndr"}) for i in range(3))
    incident = job(20, priority="P0")
    state = snapshot(
        nodes,
        pending=(*refused, incident),
        running_jobs=(own, low),
        team_list=teams(ranking={"gpu:H100": (4, 4)}, vision={}),
        max_preemption_searches=2,
    )
    reference = tried_alone(state)
    assert [p.victim_job_id for p in reference.preemptions] == [2]
    assert reference.order.index(20) > reference.order.index(12)
    assert actions(Scheduler(actions_only=True).schedule(state)) == actions(reference)
