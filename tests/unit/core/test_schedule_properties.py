"""Properties over random clusters and queues (hypothesis): whatever the input, a pass never
over-allocates, keeps gangs whole and in one zone, is deterministic, and leaves no team that
is owed capacity without a way to get it back."""

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core.model import (
    ClusterSnapshot,
    JobShape,
    Node,
    NodeState,
    PendingJob,
    PolicyConfig,
    Quota,
    RunningJob,
    TaskPlacement,
    Team,
    Topology,
    labels_match,
)
from scheduling.core.scheduler import schedule

NOW = 1_794_000_000.0
TEAMS = ("vision", "ranking", "speech")
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def nodes(draw, racks: tuple[int, int] = (1, 3), per_rack: tuple[int, int] = (1, 4)) -> tuple[Node, ...]:
    found = []
    for zone in range(draw(st.integers(1, 2))):
        for rack in range(draw(st.integers(*racks))):
            for index in range(draw(st.integers(*per_rack))):
                gpu_type = draw(st.sampled_from(["H100", "H100", "A100", None]))
                state = draw(st.sampled_from([NodeState.READY] * 5 + [NodeState.CORDONED, NodeState.SUSPECT]))
                labels = {"ib": "ndr"} if draw(st.booleans()) else {}
                found.append(
                    Node(
                        f"z{zone}-r{rack}-n{index}",
                        f"z{zone}",
                        f"z{zone}-r{rack}",
                        gpu_type,
                        8 if gpu_type else 0,
                        64,
                        512,
                        labels,
                        state,
                    )
                )
    return tuple(found)


@st.composite
def shapes(draw, gpu_type=None) -> JobShape:
    gpu_type = gpu_type if gpu_type is not None else draw(st.sampled_from(["H100", "A100", None]))
    if gpu_type:
        per_task = draw(st.sampled_from([1, 2, 4, 8]))
        tasks = draw(st.integers(1, 6))
        cpus = draw(st.sampled_from([1, 4, 16]))
    else:
        per_task, tasks, cpus = 0, draw(st.integers(1, 4)), draw(st.sampled_from([4, 16, 32]))
    selector = {"ib": "ndr"} if draw(st.integers(0, 5)) == 0 else {}
    return JobShape(
        gpu_type, tasks, per_task, cpus, draw(st.sampled_from([8, 64])), selector, draw(st.sampled_from(list(Topology)))
    )


def fill(cluster: tuple[Node, ...], draw, count: int) -> tuple[RunningJob, ...]:
    """Running jobs on real free room: each a task or two on random READY-or-not nodes."""
    free = {n.name: [list(range(n.gpus)), n.cpus, n.memory_gb] for n in cluster}
    jobs = []
    for job_id in range(1, count + 1):
        node = draw(st.sampled_from(cluster))
        gpus = draw(st.integers(1, 8)) if node.gpu_type else 0
        cpus, memory = draw(st.integers(1, 16)), draw(st.integers(1, 128))
        room = free[node.name]
        if len(room[0]) < gpus or room[1] < cpus or room[2] < memory:
            continue
        indices = tuple(room[0][:gpus])
        room[0], room[1], room[2] = room[0][gpus:], room[1] - cpus, room[2] - memory
        jobs.append(
            RunningJob(
                job_id,
                draw(st.sampled_from(TEAMS)),
                draw(st.sampled_from(["P0", "P1", "P2", "P3"])),
                node.gpu_type,
                (TaskPlacement(0, node.name, indices, cpus, memory),),
                NOW - draw(st.floats(0, 20_000)),
                NOW + draw(st.floats(60, 50_000)),
                checkpointing=draw(st.booleans()),
            )
        )
    return tuple(jobs)


@st.composite
def snapshots(draw) -> ClusterSnapshot:
    cluster = draw(nodes())
    running = fill(cluster, draw, draw(st.integers(0, 25)))
    pending = tuple(
        PendingJob(
            1000 + i,
            draw(st.sampled_from(TEAMS)),
            draw(st.sampled_from(["P0", "P1", "P2", "P3"])),
            draw(shapes()),
            NOW - draw(st.floats(0, 30_000)),
            draw(st.floats(60, 100_000)),
            checkpointing=draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 20)))
    )
    quotas = {"gpu:H100": Quota(16, 16), "gpu:A100": Quota(8, 8), "cpu": Quota(64, 64)}
    teams = tuple(Team(name, None, quotas if draw(st.booleans()) else {}) for name in TEAMS)
    config = PolicyConfig(reservation_wait_bound_s=draw(st.sampled_from([600.0, 7200.0])))
    return ClusterSnapshot(cluster, running, pending, teams, NOW, config)


def occupancy(snapshot: ClusterSnapshot, decisions) -> dict[str, list]:
    used: dict[str, list] = defaultdict(lambda: [[], 0, 0])
    tasks = [t for job in snapshot.running for t in job.tasks] + [t for p in decisions.placements for t in p.tasks]
    for task in tasks:
        entry = used[task.node]
        entry[0] += list(task.gpu_indices)
        entry[1] += task.cpus
        entry[2] += task.memory_gb
    return used


@PROPERTY_SETTINGS
@given(snapshots())
def test_no_node_is_ever_over_allocated(snapshot):
    decisions = schedule(snapshot)
    nodes_by_name = {n.name: n for n in snapshot.nodes}
    for name, (gpus, cpus, memory) in occupancy(snapshot, decisions).items():
        node = nodes_by_name[name]
        assert len(gpus) == len(set(gpus)), f"{name}: a GPU given twice"
        assert all(0 <= g < node.gpus for g in gpus)
        assert cpus <= node.cpus and memory <= node.memory_gb


@PROPERTY_SETTINGS
@given(snapshots())
def test_gangs_are_whole_in_one_zone_on_ready_matching_nodes(snapshot):
    decisions = schedule(snapshot)
    jobs = {j.job_id: j for j in snapshot.pending}
    nodes_by_name = {n.name: n for n in snapshot.nodes}
    for placement in decisions.placements:
        shape = jobs[placement.job_id].shape
        assert sorted(t.rank for t in placement.tasks) == list(range(shape.tasks))
        assert all(len(t.gpu_indices) == shape.gpus_per_task for t in placement.tasks)
        placed_on = [nodes_by_name[t.node] for t in placement.tasks]
        assert len({n.zone for n in placed_on}) == 1
        assert all(n.state == NodeState.READY and n.gpu_type == shape.gpu_type for n in placed_on)
        assert all(labels_match(shape.node_selector, n.labels) for n in placed_on)
        if shape.topology == Topology.REQUIRE_SAME_RACK:
            assert len({n.rack for n in placed_on}) == 1


@PROPERTY_SETTINGS
@given(snapshots())
def test_every_job_is_placed_or_has_a_reason_and_victims_are_never_p0(snapshot):
    decisions = schedule(snapshot)
    placed = {p.job_id for p in decisions.placements}
    assert placed.isdisjoint(decisions.pending)
    assert placed | set(decisions.pending) == {j.job_id for j in snapshot.pending}
    assert all(reason.message for reason in decisions.pending.values())
    running = {j.job_id: j for j in snapshot.running}
    for preemption in decisions.preemptions:
        assert running[preemption.victim_job_id].priority != "P0"
        assert preemption.for_job_id not in placed
    assert len({p.victim_job_id for p in decisions.preemptions}) == len(decisions.preemptions)


@PROPERTY_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_decisions_are_deterministic_whatever_the_input_order(snapshot, rng):
    shuffled = replace(
        snapshot,
        nodes=tuple(rng.sample(snapshot.nodes, len(snapshot.nodes))),
        running=tuple(rng.sample(snapshot.running, len(snapshot.running))),
        pending=tuple(rng.sample(snapshot.pending, len(snapshot.pending))),
    )
    first, again, other_order = schedule(snapshot), schedule(snapshot), schedule(shuffled)
    assert first == again
    assert first == other_order


@st.composite
def reclaim_cases(draw):
    """One rack of H100 nodes, full: `ranking` far past its guarantee, `vision` under its own
    and asking for no more than it is owed."""
    count = draw(st.integers(2, 6))
    cluster = tuple(Node(f"z1-r1-n{i}", "z1", "z1-r1", "H100", 8, 64, 512) for i in range(count))
    per_job = draw(st.sampled_from([1, 2, 4, 8]))
    running = tuple(
        RunningJob(
            100 + i * 8 + k,
            "ranking",
            draw(st.sampled_from(["P1", "P2", "P3"])),
            "H100",
            (TaskPlacement(0, node.name, tuple(range(k * per_job, (k + 1) * per_job)), 1, 8),),
            NOW - draw(st.floats(0, 5000)),
            NOW + 3600,
            checkpointing=draw(st.booleans()),
        )
        for i, node in enumerate(cluster)
        for k in range(8 // per_job)
    )
    guarantee = 8 * count // 2
    ask = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= guarantee]))
    teams = (
        Team("vision", None, {"gpu:H100": Quota(guarantee, 0)}),
        Team("ranking", None, {"gpu:H100": Quota(8 * count - guarantee, guarantee)}),
    )
    job = PendingJob(1, "vision", draw(st.sampled_from(["P2", "P3"])), JobShape("H100", 1, ask, 1, 8), NOW - 60, 3600)
    return ClusterSnapshot(cluster, running, (job,), teams, NOW)


@PROPERTY_SETTINGS
@given(reclaim_cases())
def test_a_team_under_its_guarantee_always_has_a_reclaim_path(snapshot):
    decisions = schedule(snapshot)
    assert decisions.pending[1].code == "PREEMPTING"
    freed = sum(
        len(t.gpu_indices)
        for p in decisions.preemptions
        for j in snapshot.running
        if j.job_id == p.victim_job_id
        for t in j.tasks
    )
    assert freed >= snapshot.pending[0].shape.units
    # What is reclaimed (not outranked) never takes ranking below its own guarantee.
    reclaimed = sum(
        len(t.gpu_indices)
        for p in decisions.preemptions
        if p.reason == "RECLAIM"
        for j in snapshot.running
        if j.job_id == p.victim_job_id
        for t in j.tasks
    )
    ranking = next(t for t in snapshot.teams if t.name == "ranking").quota("gpu:H100").guaranteed
    assert sum(len(t.gpu_indices) for j in snapshot.running for t in j.tasks) - reclaimed >= ranking
