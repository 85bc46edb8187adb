"""The indexes that keep a pass's cost off the cluster's size read exactly what a scan of every
node or candidate reads: each is checked against that scan, written out here, on random clusters."""

import itertools
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.model import (
    PRIORITIES,
    JobShape,
    PendingJob,
    PolicyConfig,
    RunningJob,
    Topology,
    priority_rank,
    resource_class,
)
from scheduling.core.placement import Room, capacity, plan_on, plan_one
from scheduling.core.preemption import Candidate, VictimPool, candidate_order
from scheduling.core.reservation import ending_order, insert_ending, released_by, shadow_start
from scheduling.core.scheduler import schedule
from scheduling.core.state import ClusterState
from scheduling.core.trial import Trial
from scheduling.core.victim_search import find_victims
from tests.unit.core.builders import cluster, rack
from tests.unit.core.test_schedule_equivalence import (
    EQUIVALENCE_SETTINGS,
    NOW,
    TEAMS,
    EveryJobTried,
    fleets,
    running_jobs,
    shapes,
    snapshots,
)


def shadow_start_over_every_node(state: ClusterState, job: PendingJob, ending: list):
    """The reference: every ready node of the class enters the trial from the start."""
    rooms = {slot: capacity(slot, job.shape) for slot in state.ready_slots(job.resource_class)}
    trial = Trial(job, rooms)
    gone = trial.fit_by_removing(ending)
    if gone is None:
        return None
    # The layout made in full (`Trial.plan` lays out a single task without sorting rooms).
    return max(gone[-1].expected_end, NOW), full_layout(trial.rooms, job.shape), released_by(gone)


def full_layout(rooms: dict, shape: JobShape):
    return plan_on(sorted((Room(s, n) for s, n in rooms.items() if n > 0), key=lambda r: r.slot.name), shape)


@EQUIVALENCE_SETTINGS
@given(
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 3)), max_size=12, unique_by=lambda room: room[0]),
    st.sampled_from(list(Topology)),
)
def test_one_task_is_laid_out_where_the_full_layout_puts_it(rooms, topology):
    """`plan_one` (a single task, no sort) against `plan_on` over the rooms sorted by name:
    three zones of two racks of two nodes, ties in room, rack room and zone choice alike."""
    nodes = cluster(*(rack(f"z{z}-r{r}", 2) for z in (2, 1, 3) for r in (2, 1)))
    slots = ClusterState(nodes).slots_named("gpu:H100")
    names = sorted(slots)
    room_of = {slots[names[index]]: tasks for index, tasks in rooms}
    shape = JobShape("H100", tasks=1, gpus_per_task=1, cpus_per_task=1, memory_gb_per_task=1, topology=topology)
    assert plan_one(room_of, topology) == full_layout(room_of, shape)


def readable(found) -> tuple | None:
    if found is None:
        return None
    start, chosen, extra = found
    return start, [(slot.name, count) for slot, count in chosen], dict(extra)


@st.composite
def shadow_starts(draw):
    """A cluster, its running jobs, a job of one of its classes, and the jobs it waits on
    (all of the class's running jobs soonest end first, as for a reservation, or a few, as
    for a preemptor whose victims are stopping)."""
    cluster = draw(fleets())
    running = running_jobs(draw, cluster, draw(st.integers(0, 20)), [])
    shape = draw(shapes())
    job = PendingJob(1000, "vision", "P1", shape, NOW - 60.0, draw(st.sampled_from([600.0, 40_000.0])))
    of_class = [r for r in running if r.resource_class == resource_class(shape.gpu_type)]
    if draw(st.booleans()):
        ending = ending_order(of_class, NOW)
    else:
        ending = draw(st.lists(st.sampled_from(of_class), unique_by=lambda r: r.job_id)) if of_class else []
    return cluster, running, job, ending


@EQUIVALENCE_SETTINGS
@given(shadow_starts())
def test_a_shadow_start_reads_the_free_room_index_as_a_scan_of_every_node_would(case):
    cluster, running, job, ending = case
    state = ClusterState(cluster, running)
    assert readable(shadow_start(state, job, ending, NOW, ending=ending)) == readable(
        shadow_start_over_every_node(state, job, ending)
    )


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(-3, 3)), unique_by=lambda j: j[0], max_size=30),
    st.integers(0, 30),
)
def test_jobs_inserted_into_an_ending_order_land_where_sorting_all_would_put_them(ends, kept):
    """A pass sorts a class's running jobs soonest end first once, then puts each job it places
    and each reservation it makes into that order (`insert_ending`): overdue jobs (ending at or
    before now) first by id, then by end and id, exactly as `ending_order` sorts them all."""
    jobs = [RunningJob(job_id, "vision", "P2", "H100", (), NOW - 100, NOW + 10 * end) for job_id, end in ends]
    ordered = ending_order(jobs[:kept], NOW)
    insert_ending(ordered, jobs[kept:], NOW)
    assert [j.job_id for j in ordered] == [j.job_id for j in ending_order(jobs, NOW)]


def candidates_by_scan(running, borrowed, config, taken, job, claim, excess):
    """The reference: every running job put in candidate order, then filtered, at each search."""
    ordered = sorted(
        running,
        key=lambda j: candidate_order(
            j,
            borrowed,
            NOW,
            memory=config.eviction_memory,
            longest=config.reclaim_longest_first,
            checkpoint_step=config.reclaim_checkpoint_step_s,
        ),
    )
    found = []
    for victim in ordered:
        candidate = Candidate(victim, priority_rank(victim.priority))
        may_go = victim.preemptible and not victim.preempting and victim.priority != "P0"
        # Only what fits in its team's excess can be reclaimed (or, by a borrower, outranked;
        # a borrower reclaims nothing).
        within = victim.units <= excess.get(victim.team, 0)
        reclaimable = claim.guard is None and within and victim.team != job.team and claim.may_reclaim(candidate)
        outranked = claim.outranks(candidate) and (claim.guard is None or victim.team == job.team or within)
        if (
            may_go
            and victim.resource_class == job.resource_class
            and victim.job_id not in taken
            and (outranked or reclaimable)
        ):
            found.append(candidate)
    return found


@st.composite
def searches(draw):
    """Running jobs (some borrowed, some not preemptible), a policy, and a run of searches by
    jobs of a few kinds, with a victim taken now and then between them."""
    cluster = draw(fleets())
    running = [
        r if draw(st.integers(0, 5)) else replace(r, preemptible=False)
        for r in running_jobs(draw, cluster, draw(st.integers(0, 20)), [1000])
    ]
    borrowed = {r.job_id for r in running if draw(st.booleans())}
    config = PolicyConfig(
        eviction_memory=draw(st.booleans()),
        reclaim_longest_first=draw(st.booleans()),
        reclaim_checkpoint_step_s=draw(st.sampled_from([0.0, 900.0])),
        reclaim_max_evictions=draw(st.sampled_from([None, 1])),
        reclaim_min_runtime_s=draw(st.sampled_from([0.0, 900.0])),
    )
    steps = []
    for index in range(draw(st.integers(1, 12))):
        shape = draw(shapes())
        job = PendingJob(
            2000 + index,
            draw(st.sampled_from(TEAMS)),
            draw(st.sampled_from(PRIORITIES)),
            shape,
            NOW - draw(st.sampled_from([60.0, 30_000.0])),
            3600.0,
        )
        excess = {team: 8 for team in TEAMS if draw(st.booleans())}
        steps.append((job, excess, draw(st.booleans()), draw(st.integers(0, 3))))
    return cluster, tuple(running), borrowed, config, steps


@EQUIVALENCE_SETTINGS
@given(searches())
def test_the_victim_pool_gives_the_candidates_a_scan_of_every_running_job_gives(case):
    _, running, borrowed, config, steps = case
    pool, taken = VictimPool(running, borrowed, NOW, config), set()
    for (job, excess, ignore_age, take), borrowing in zip(steps, itertools.cycle([False, True]), strict=False):
        claim = pool.claim(job, ignore_age=ignore_age, borrowing=borrowing)
        found = pool.candidates(job, claim, excess=excess)
        assert found == candidates_by_scan(running, borrowed, config, taken, job, claim, excess)
        for candidate in found[:take]:  # victims chosen: they leave the pool
            pool.take(candidate.job)
            taken.add(candidate.job.job_id)


class EveryPreemptorShadowStart(EveryJobTried):
    """The reference for `_room_beyond`: a preemptor whose victims are stopping always computes
    its shadow start, even with no room beyond their nodes."""

    def _room_beyond(self, rooms, theirs) -> bool:
        return True


@EQUIVALENCE_SETTINGS
@given(snapshots())
def test_a_preemptor_with_no_room_beyond_its_victims_holds_what_its_shadow_start_would_hold(snapshot):
    assert schedule(snapshot) == EveryPreemptorShadowStart(snapshot).run()


@EQUIVALENCE_SETTINGS
@given(searches())
def test_victims_found_through_the_pools_index_by_domain_are_those_found_from_the_candidates_alone(case):
    """The pool indexes every candidate of the class once a pass, taken or not, outranked or
    not: a search counts only its own, as if it had indexed them alone."""
    cluster, running, borrowed, config, steps = case
    state = ClusterState(cluster, running)
    pool = VictimPool(running, borrowed, NOW, config)
    for job, excess, ignore_age, take in steps:
        claim = pool.claim(job, ignore_age=ignore_age)
        found = pool.candidates(job, claim, excess=excess)
        alone = find_victims(state, job, found, claim, excess=excess, borrowed=borrowed, now=NOW)
        assert find_victims(state, job, found, claim, excess=excess, borrowed=borrowed, now=NOW, pool=pool) == alone
        for candidate in found[:take]:
            pool.take(candidate.job)


def test_a_state_names_the_slots_that_changed_since_a_count_until_it_has_forgotten_them(monkeypatch):
    monkeypatch.setattr("scheduling.core.state.CHANGES_KEPT", 8)
    nodes = cluster(rack("z1-r1", 3))
    state = ClusterState(nodes)
    slots = state.slots_named("gpu:H100")
    start = state.changes["gpu:H100"]
    state.start_journal()
    state.allocate(slots["z1-r1-n2"], rank=0, gpus=1, cpus=1, memory_gb=1)
    state.allocate(slots["z1-r1-n1"], rank=1, gpus=1, cpus=1, memory_gb=1)
    assert state.changed_since("gpu:H100", start) == ["z1-r1-n2", "z1-r1-n1"]
    middle = state.changes["gpu:H100"]
    state.rollback()  # given back: each slot changed again
    assert sorted(state.changed_since("gpu:H100", middle)) == ["z1-r1-n1", "z1-r1-n2"]
    assert state.changed_since("gpu:H100", state.changes["gpu:H100"]) == []
    for rank in range(8):
        state.allocate(slots["z1-r1-n3"], rank=rank, gpus=0, cpus=1, memory_gb=1)
    assert state.changed_since("gpu:H100", start) is None  # too long ago: the caller works it out again
    assert state.changed_since("gpu:H100", state.changes["gpu:H100"] - 2) == ["z1-r1-n3", "z1-r1-n3"]
