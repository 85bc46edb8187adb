"""One scheduling pass: snapshot in, decisions out.

`schedule()` runs six steps:
1. Index the cluster: free room per node by class and amount, usage per team, who borrows.
   (A `Scheduler` kept between passes keeps the free-room index and only updates it.)
2. Screen: held jobs, jobs waiting on dependencies and jobs in retry back-off wait as such.
   A child of a job group already at its parallelism waits too (checked again in step 4, as
   the pass starts its siblings).
3. Order the rest (see `queue_order.QueueOrder`).
4. Take each job in order: check its quota; place it where it fits now without delaying a
   reservation; else evict victims for it if it may (pass_preemption.py, preemption.py; an
   owner reclaims in its turn, reclaim_turn.py), and hold the room they give back for it
   while they stop (held_room.py); else, if it is the
   highest blocked job of its class, reserve room for it (reservation.py). Never on a node
   whose maintenance window its time limit would run into (maintenance.py). A job equal to
   one already decided since anything changed in its class gets that decision without a
   try (see `Pass._decide`): the work follows the kinds of job waiting, not their number.
5. Explain every job left waiting, once per team, shape and reason (pass_reasons.py).
6. Count what the pass did.
"""

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from functools import partial

from scheduling.core import explain
from scheduling.core.decisions import Decisions, PassStats, Placement, Preemption
from scheduling.core.fairshare import Ledger, borrowed_jobs
from scheduling.core.group_slots import GroupSlots
from scheduling.core.held_room import HeldRoom, KeptHold
from scheduling.core.maintenance import Windows
from scheduling.core.model import ClusterSnapshot, JobShape, PendingJob, RunningJob
from scheduling.core.pass_preemption import PassPreemption
from scheduling.core.pass_reasons import PassReasons
from scheduling.core.placement import capacity, commit, plan
from scheduling.core.pruning import Pruning
from scheduling.core.queue_order import RANKS, KeptOrder, QueueOrder, overdue_age
from scheduling.core.reasons import PendingReason
from scheduling.core.reclaim_turn import ReclaimTurn
from scheduling.core.reservation import ReservationBook, ending_order, insert_ending, occupant, shadow_start
from scheduling.core.state import ClusterState


def schedule(snapshot: ClusterSnapshot, *, timer: Callable[[], float] | None = None) -> Decisions:
    return _timed(lambda: Pass(snapshot).run(), timer)


class Scheduler:
    """Passes over one cluster's successive snapshots. Keeps between them what follows from
    the nodes and the running jobs alone (the free-room index), brought up to date by the
    jobs that started and ended since, so a pass does not re-index the whole cluster.
    Also keeps each waiting job's kind (see `Pass._kind`), which shapes fit the free room with
    no limit (`Pass._fits_unlimited`) and what searches for victims to await found
    (`PassPreemption._search_kept`), the nodes each preemptor in flight holds
    (`Pass._nodes_to_hold`), the domains each running job spans (for victim searches,
    `victim_search.index_by_domain`), the units each team runs (`_ledger_for`), the capacity
    explanations of the classes whose room has not changed (`CapacityExplainer`) and each
    team's waiting jobs sorted and split by class (`queue_order.KeptOrder`), and where the
    backlog gate held last pass (`Decisions.reclaim_turn`, for a snapshot that does not say).
    Decides exactly as `schedule()` on the same snapshot, given that memory. Pure, like the rest of the core: the caller
    (the worker, the simulator, the benchmark) keeps it.
    `actions_only`: for a caller that reads only what a pass starts, evicts, reserves and
    nominates (the simulator): a team's turns end once none of its jobs left can change
    anything (pruning.py), so the same actions cost what can still start, not the depth of
    the queue; `pending` and `order` then cover only the jobs the pass considered."""

    def __init__(self, *, actions_only: bool = False):
        self.actions_only = actions_only
        self.state: ClusterState | None = None
        self.known: dict[int, tuple] = {}
        self.holds: dict[int, KeptHold] = {}  # see `HeldRoom._nodes_to_hold`
        self.spans: dict[str, dict[int, tuple]] = {}  # see `victim_search.index_by_domain`
        self.usage: tuple | None = None  # see `_ledger_for`
        self.explainer: explain.CapacityExplainer | None = None
        self.order = KeptOrder()  # each team's queue, sorted and split by class
        self.reclaim_turn: frozenset[str] = frozenset()  # `Decisions.reclaim_turn` of the last pass
        self.last: tuple | None = None  # the last snapshot's nodes and jobs by id (see `_as_kept`)
        self.per_state: tuple[ClusterState, dict, dict] | None = None  # see `Pass._fits_unlimited`, `_search_kept`

    def schedule(
        self,
        snapshot: ClusterSnapshot,
        *,
        timer: Callable[[], float] | None = None,
        moved: Mapping[int, RunningJob | None] | None = None,
    ) -> Decisions:
        """`moved`: if the caller knows them, every job that may have started, ended or moved
        since the snapshot of the last pass, with what runs now under its id (None: nothing):
        the free-room index then compares those alone (see `ClusterState.refresh`)."""
        return _timed(lambda: self._run(snapshot, moved), timer)

    def _run(self, snapshot: ClusterSnapshot, moved: Mapping[int, RunningJob | None] | None = None) -> Decisions:
        if moved is None:  # a caller that knows what moved keeps its objects (the simulator)
            snapshot = self._as_kept(snapshot)
        kept, self.state = self.state, None  # kept again only once the pass has given its room back
        if snapshot.reclaim_turn is None and self.reclaim_turn:  # the backlog gate's memory
            snapshot = dataclasses.replace(snapshot, reclaim_turn=self.reclaim_turn)
        state = self._state_for(kept, snapshot, moved)
        if len(self.known) > 2 * len(snapshot.pending) + 1000:  # forget jobs long gone
            self.known = {}
        if state is not kept or len(self.holds) > 2 * len(snapshot.pending) + 1000:
            self.holds = {}  # what they hold was read off another state
        if sum(map(len, self.spans.values())) > 6 * len(snapshot.running) + 1000:  # forget jobs long gone
            self.spans = {}
        ledger = self._ledger_for(state, snapshot)
        kept = self.per_state
        if kept is None or kept[0] is not state or len(kept[1]) + len(kept[2]) > 20_000:
            kept = self.per_state = (state, {}, {})  # their keys count changes of this state alone
        run = Pass(snapshot, state, self.known, self.holds, self.explainer, self.spans, ledger, self.order)
        run.unlimited, run.kept_searches = kept[1], kept[2]
        run.actions_only = self.actions_only
        decisions = run.run()
        self.explainer = run.explainer
        self.reclaim_turn = decisions.reclaim_turn
        state.rollback()
        self.state = state
        return decisions

    def _as_kept(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """`snapshot` with its nodes, and each job equal to the last snapshot's of the same id
        (every field alike), replaced by the last snapshot's objects. A snapshot read afresh
        from the store has nothing in it that is the same object as before, so the free-room
        index would be built anew and every kept kind, hold, span and order worked out again
        (bench/cycle.py's steady seed-2500 pass: about 2.5 times the work). The worker's kept
        reads (scheduling/cluster.py `KeptReads`) give back the same objects for what did not
        change, which this finds at once by identity; a comparison field by field is left for
        the rest. Equal objects decide alike: the decisions are the snapshot's own."""
        if self.last is not None:
            nodes, running, pending = self.last
            snapshot = dataclasses.replace(
                snapshot,
                nodes=nodes if nodes is snapshot.nodes or nodes == snapshot.nodes else snapshot.nodes,
                running=_same_objects(snapshot.running, running),
                pending=_same_objects(snapshot.pending, pending),
            )
        self.last = (snapshot.nodes, _by_id(snapshot.running), _by_id(snapshot.pending))
        return snapshot

    def _ledger_for(self, state: ClusterState, snapshot: ClusterSnapshot) -> Ledger:
        """The units each team runs, as `Ledger.build` counts them from the running jobs: kept
        from the last pass and brought up to date by the jobs `state`'s refresh found had
        stopped or started (units, team and class follow from a job's id and tasks), else
        counted afresh. A copy: the pass adds what it places."""
        kept, moved = self.usage, state.last_moved
        state.last_moved = None
        if kept is not None and kept[0] is state and moved is not None and kept[1] == snapshot.teams:
            ledger = kept[2]
            stopped, started = moved
            for job in stopped:
                ledger.add(job.team, job.resource_class, -job.units)
            for job in started:
                ledger.add(job.team, job.resource_class, job.units)
        else:
            ledger = Ledger.build(snapshot.teams, snapshot.running, state.fleet.capacity)
        self.usage = (state, snapshot.teams, ledger)
        return ledger.copy()

    @staticmethod
    def _state_for(
        state: ClusterState | None, snapshot: ClusterSnapshot, moved: Mapping[int, RunningJob | None] | None
    ) -> ClusterState:
        same_nodes = state is not None and (state.fleet.nodes is snapshot.nodes or state.fleet.nodes == snapshot.nodes)
        if same_nodes and state.refresh(snapshot.running, moved):
            return state
        state = ClusterState(snapshot.nodes, snapshot.running)
        state.start_journal()
        return state


def _by_id(jobs: tuple) -> dict[int, RunningJob | PendingJob]:
    return {job.job_id: job for job in jobs}


def _same_objects(jobs: tuple, kept: dict[int, RunningJob | PendingJob]) -> tuple:
    """`jobs`, each equal to the kept job of its id replaced by that object (see `_as_kept`)."""
    found, same = [], True
    for job in jobs:
        old = kept.get(job.job_id)
        if old is not None and old is not job and old == job:
            job, same = old, False
        found.append(job)
    return jobs if same else tuple(found)


def _timed(run: Callable[[], Decisions], timer: Callable[[], float] | None) -> Decisions:
    started = timer() if timer else None
    decisions = run()
    if timer is None:
        return decisions
    stats = decisions.stats
    elapsed = (timer() - started) * 1000
    return dataclasses.replace(decisions, stats=PassStats(**{**_fields(stats), "elapsed_ms": elapsed}))


def _fields(stats: PassStats) -> dict:
    return {name: getattr(stats, name) for name in stats.__slots__}


class Pass(HeldRoom, PassPreemption, ReclaimTurn, PassReasons):
    # Repeat the decisions and explanations of equal jobs (tests turn it off to compare).
    repeat_equal = True
    # End a team's turns once its jobs left change nothing (see `Scheduler` and pruning.py).
    actions_only = False
    acted = 0  # placements, preemptions and reservations made in the pass (see `_changes`)

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        state: ClusterState | None = None,
        known: dict | None = None,
        holds: dict | None = None,
        explainer: explain.CapacityExplainer | None = None,
        spans: dict[str, dict[int, tuple]] | None = None,
        ledger: Ledger | None = None,
        kept_order: KeptOrder | None = None,
    ):
        """`state`: the free-room index of exactly this snapshot, if the caller keeps one;
        `known`: jobs' kinds from earlier passes (see `_kind`); `holds`: the nodes preemptors
        in flight held in earlier passes over `state` (see `_nodes_to_hold`); `explainer`: the
        last pass's, which serves again if it explained `state`; `spans`: the running jobs'
        domains from earlier passes (see `VictimPool`); `ledger`: the units each team runs in
        this snapshot, if the caller keeps them (see `Scheduler._ledger_for`); `kept_order`: the
        teams' sorted queues of earlier passes (see `queue_order.KeptOrder`)."""
        self.snap = snapshot
        self.now = snapshot.now
        self.config = snapshot.config
        # 1. Index.
        self.state = state or ClusterState(snapshot.nodes, snapshot.running)
        if ledger is None:
            ledger = Ledger.build(snapshot.teams, snapshot.running, self.state.fleet.capacity)
        self.ledger = ledger
        self.borrowed = borrowed_jobs(self.ledger, snapshot.running)
        self.active: dict[str, list[RunningJob]] = defaultdict(list)
        self.stopping_for: dict[int, list[RunningJob]] = defaultdict(list)
        self.preemptors: dict[str, list[int]] = {}  # see `_preemptors`
        self.preemptors_reason: dict[str, PendingReason] = {}  # see `_held_for_preemptors`
        self.lowest_running: dict[str, int] = defaultdict(lambda: -1)
        self.slots = GroupSlots(snapshot)  # job groups' parallelism (group_slots.py)
        self._index_running()
        self.book = ReservationBook()
        self.windows = Windows(snapshot.maintenance, self.now)
        self._start_holds(holds)  # held_room.py
        self._start_searches()  # pass_preemption.py
        self._start_turns()  # reclaim_turn.py
        self.failed: dict[tuple, int] = {}
        self.unlimited: dict[tuple, bool] = {}  # see `_fits_unlimited`
        self.placements: list[Placement] = []
        self.preemptions: list[Preemption] = []
        self.pending: dict[int, PendingReason] = {}
        self.blocked: dict[int, PendingJob] = {}
        self.placed_units: dict[str, int] = defaultdict(int)
        # Equivalence classes (see `_decide`): per resource class, a count of the decisions
        # that changed something; per job kind, the last outcome and the count it was made at.
        self.generation: dict[str, int] = defaultdict(int)
        self.outcomes: dict[tuple, tuple[int, PendingReason | None, bool]] = {}
        self.kinds: dict[int, tuple] = {}
        self.refusals: dict[tuple, tuple[int, PendingReason | None]] = {}
        self.variants: dict[tuple, tuple] = {}
        # Per class: running jobs and reservations' occupants, soonest end first (see `_reserve`).
        self.ending: dict[str, tuple[tuple[int, int], list[RunningJob]]] = {}
        self.reserved: dict[str, list[RunningJob]] = {}  # per class: its reservations as occupants
        self.known: dict[int, tuple] = known if known is not None else {}
        self.explainer = explainer
        self.spans = spans
        self.kept_order = kept_order

    def _index_running(self) -> None:
        """Per class, the running jobs (for shadow starts) and the lowest priority class anyone
        preemptible runs at: a job that ranks no higher cannot outrank anyone, so it needs no
        victim search (unless it reclaims). Per preemptor, the jobs stopping for it; per class
        and team, the units stopping (see `_excess`). One loop: it runs over every running job
        each pass."""
        active, stopping_for, lowest = self.active, self.stopping_for, self.lowest_running
        stopping: dict[tuple[str, str], int] = defaultdict(int)
        self.stopping_units = stopping
        for job in self.snap.running:
            rclass = job.resource_class
            active[rclass].append(job)
            if job.preempting:
                stopping[rclass, job.team] += job.units
                if job.preempted_for is not None:
                    stopping_for[job.preempted_for].append(job)
            elif job.preemptible and job.priority != "P0" and RANKS[job.priority] > lowest[rclass]:
                lowest[rclass] = RANKS[job.priority]
            if job.group is not None:
                self.slots.count_running(job.group)

    def run(self) -> Decisions:
        self.slots.count_starters(self.snap.pending, self.stopping_for)
        now = self.now
        candidates = [  # 2. Screen (most jobs are none of these: asked inline, as every pass asks it of every job).
            job
            for job in self.snap.pending
            if not (job.held or job.group is not None or job.waiting_on or (job.not_before or 0) > now)
            or not self._screened(job)
        ]
        self._hold_nominated(candidates)
        self._charge_in_flight(candidates)
        self.candidates = candidates
        if self.config.reclaim_in_turn_backlog is not None:
            self.deep = self._deep_classes()
        pruning = Pruning(self) if self.actions_only else None
        queue = QueueOrder(candidates, self.ledger, self.snap, self._changes, pruning, self.kept_order)  # 3.
        if pruning is not None:
            pruning.bases = queue.bases
        order = self._consider(queue)  # 4.
        if self.config.explain:
            self._explain_blocked()  # 5.
        return Decisions(
            tuple(self.placements),
            tuple(self.preemptions),
            tuple(self.book.reservations),
            dict(self.pending),
            tuple(order),
            self._stats(len(order)),  # 6.
            self.nominations,
            frozenset(self.deep or ()),
        )

    def _group_full(self, job: PendingJob) -> bool:
        """Its group has no slot left for it: it waits with the reason that says so."""
        reason = self.slots.full(job)
        if reason is not None:
            self.pending[job.job_id] = reason
        return reason is not None

    def _screened(self, job: PendingJob) -> bool:
        if job.held:
            self.pending[job.job_id] = explain.held()
        elif self._group_full(job):
            pass
        elif job.waiting_on:
            self.pending[job.job_id] = explain.dependency(job)
        elif job.not_before is not None and job.not_before > self.now:
            self.pending[job.job_id] = explain.backoff(job, self.now)
        else:
            return False
        return True

    def _consider(self, queue: QueueOrder) -> list[int]:
        order = []
        for job in queue:
            self._decide(job)
            order.append(job.job_id)
        return order

    def _decide(self, job: PendingJob) -> None:
        """Decide `job`, or repeat what an equal job (see `_equivalent`) got at the same
        `_epoch` of its class: a decision that changed nothing (a quota refusal, a job left
        blocked, with or without a reason) reads only what the epoch and the key pin down."""
        if job.group is not None and self._group_full(job):  # its siblings earlier in this pass took the last slots
            return
        kind, rclass = self._kind(job)
        key = self._equivalent(job, kind, rclass) if self.repeat_equal else None
        epoch = self._epoch(rclass)
        known = self.outcomes.get(key) if key is not None else None
        if known is not None and known[0] == epoch:
            if known[1] is not None:
                self.pending[job.job_id] = known[1]
            if known[2]:
                self._block(job)
            return
        before = self.acted  # `_changes()`, inline
        self._try(job)
        if self.acted != before:
            self.generation[rclass] += 1
        elif key is not None and job.job_id not in self.own_reasons:
            self.outcomes[key] = (epoch, self.pending.get(job.job_id), job.job_id in self.blocked)

    def _epoch(self, rclass: str) -> tuple[int, bool]:
        """What a decision in `rclass` reads besides the job: the class's room, victims, book
        and ledger (all change only with a placement, a preemption or a reservation there),
        and whether the search budget is spent (see `_preempt_for`)."""
        return self.generation[rclass], self.searches >= self.config.max_preemption_searches, self._reclaim_spent()

    def _reclaim_spent(self) -> bool:
        cap = self.config.max_reclaim_searches
        return cap is not None and self.reclaim_searches >= cap

    def _kind(self, job: PendingJob) -> tuple[tuple, str]:
        """The job's team, priority and shape, and its class: kept by job id (in `known`,
        which a `Scheduler` keeps between passes) for as long as the job is the same object."""
        kept = self.known.get(job.job_id)
        if kept is None or kept[0] is not job:
            kept = self.known[job.job_id] = (job, (job.team, job.priority, shape_key(job.shape)), job.resource_class)
        return kept[1], kept[2]

    def _equivalent(self, job: PendingJob, kind: tuple, rclass: str) -> tuple | None:
        """Every field of a job that `_try` reads, but its id: None for a job whose victims
        are stopping or that holds the nodes it was nominated to: the nodes held for it are
        its alone."""
        if job.job_id in self.holders:
            return None
        self.kinds[job.job_id] = kind
        return kind + (
            self._variant(rclass, job.max_runtime_s),
            self._reclaim_stage(job),
            self._may_reclaim_yet(job),
            self._turn(rclass),
        )

    def _variant(self, rclass: str, runtime: float) -> tuple:
        """`book.variant` for a job running `runtime`, again only once the book grew."""
        key = (rclass, runtime, len(self.book.reservations))
        found = self.variants.get(key)
        if found is None:
            end_at = self.now + runtime
            found = self.variants[key] = self.book.variant(rclass, end_at) + self.windows.variant(end_at, runtime)
        return found

    def _changes(self) -> int:
        """Placements, preemptions and reservations so far: each only grows within a pass, so
        their count changes whenever one of them does (asked ~84,000 times over the bound
        forecast run: counted as each is made, in `_place`, `_reserve` and `_evict`)."""
        return self.acted

    def _try(self, job: PendingJob) -> None:
        rclass = job.resource_class
        if self._refused(job, rclass):
            if job.job_id in self.stopping_for:
                self._preempt_for(job)  # its victims are stopping: it waits for them, holding their room
            else:
                self._preempt_within_limits(job)
            return
        end_at = self.now + job.max_runtime_s
        limit = self.windows.limit(end_at, self.book.limit_for(end_at, job.job_id))
        variant = self._variant(rclass, job.max_runtime_s)
        if job.job_id in self.holders and self._room_of_its_own(job):
            variant += (job.job_id,)
        chosen = self._plan(job, limit, variant)
        if chosen is not None:
            self._place(job, chosen, end_at)
            return
        if self._preempt_for(job):
            return
        self._block(job)
        if self.book.count(rclass) < self.config.reservations_per_class and self.config.backfill:
            self._reserve(job)

    def _room_of_its_own(self, job: PendingJob) -> bool:
        """Whether a node held for `job` (or reserved) has room for a task of it with no limit.
        Its limit differs from an equal job's that holds nothing only on those nodes, and a limit
        only takes room away: without room there its plan is theirs, so it shares their memo of
        failures (most preemptors in flight hold only their victims' nodes, still taken)."""
        slots, shape = self.state.slots, job.shape
        return any(
            (slot := slots.get(node)) is not None and slot.free_units >= shape.units_per_task and capacity(slot, shape)
            for node in set(self.book.nodes_of.get(job.job_id, ()))
        )

    def _block(self, job: PendingJob) -> None:
        self.blocked[job.job_id] = job
        least = self.least_blocked.get(job.resource_class)
        if least is None or job.shape.units < least.shape.units:
            self.least_blocked[job.resource_class] = job

    def _refused(self, job: PendingJob, rclass: str) -> bool:
        """The quota check: what the ledger says to `units` more for the team, asked once per
        (team, class, units) while the class's ledger stays as it is."""
        if job.job_id in self.charged:  # asked of the ledger without its own charge, not memoized
            over = self.ledger.over_limit(job.team, rclass, job.shape.units, less=self.charged[job.job_id])
            if over:
                self.pending[job.job_id] = explain.quota(job, over, self.config.parent_quota_figures)
            return over is not None
        key = (job.team, rclass, job.shape.units)
        known = self.refusals.get(key)
        if known is None or known[0] != self.generation[rclass] or not self.repeat_equal:
            over = self.ledger.over_limit(job.team, rclass, job.shape.units)
            known = self.refusals[key] = (
                self.generation[rclass],
                explain.quota(job, over, self.config.parent_quota_figures) if over else None,
            )
        if known[1] is not None:
            self.pending[job.job_id] = known[1]
        return known[1] is not None

    def _plan(self, job: PendingJob, limit, variant: tuple):
        """Plan with a memo of failures: within a pass room only shrinks, so a shape that did
        not fit with n tasks will not fit with n or more. A job holding nodes plans under a
        limit of its own (its variant is its alone), so no other job's failure tells it
        anything: it plans only if its shape fits the free room with no limit at all."""
        memo_key = (job.shape.key(), variant)
        if self.failed.get(memo_key, 1 << 30) <= job.shape.tasks:
            return None
        alone = limit is not None and self.repeat_equal and job.job_id in self.holders
        chosen = None if alone and not self._fits_unlimited(job.shape) else plan(self.state, job.shape, limit)
        if chosen is None:
            self.failed[memo_key] = min(self.failed.get(memo_key, 1 << 30), job.shape.tasks)
        return chosen

    def _fits_unlimited(self, shape: JobShape) -> bool:
        """Whether `shape` fits the free room with no limit at all. A limit (reservations,
        holds, windows) only takes room away, so a shape that does not fit without one fits
        under none. Asked once per shape while the class's room stays as it is: whether a plan
        exists follows from the class's slots alone (not from the order racks are tried in),
        and the state counts every change to them, never going back (a rollback counts too),
        so a `Scheduler` keeps the answers across passes over the same state (a steady
        seed-2500 pass asked ~210 plans of ~890 asks, ~20 of them new since the last pass)."""
        key = (shape.key(), shape.tasks, self.state.changes[shape.resource_class])
        found = self.unlimited.get(key)
        if found is None:
            found = self.unlimited[key] = plan(self.state, shape) is not None
        return found

    def _place(self, job: PendingJob, chosen, end_at: float) -> None:
        rclass, units = job.resource_class, job.shape.units
        self._uncharge(job)  # a preemptor in flight that found room: charged once, as placed
        borrowed = self.ledger.would_borrow(job.team, rclass, units)
        tasks = commit(self.state, chosen, job.shape)
        self.book.consume(chosen, job.shape, end_at)
        self.ledger.add(job.team, rclass, units)
        self.placed_units[rclass] += units
        self.slots.take(job)
        self.placements.append(Placement(job.job_id, tasks, borrowed))
        self.acted += 1
        self.active[rclass].append(
            RunningJob(
                job.job_id,
                job.team,
                job.priority,
                job.shape.gpu_type,
                tasks,
                started_at=self.now,
                expected_end=end_at,
                checkpointing=job.checkpointing,
                group=job.group,
            )
        )

    def _reserve(self, job: PendingJob) -> None:
        """Reserve the job's shadow start. The class's earlier reservations count as jobs that
        hold their nodes from now until they would end: a second reservation is never promised
        room the first one will use (its start may come later than it could, never earlier)."""
        rclass = job.resource_class
        active, occupants = self.active[rclass], self.reserved.get(rclass, [])
        sorted_at = self.ending.get(rclass)
        # Jobs only join `active` and reservations only join the book in a pass: the ones that
        # joined since the last sort go in where the sort would put them.
        if sorted_at is None:
            sorted_at = self.ending[rclass] = (
                (len(active), len(occupants)),
                ending_order([*active, *occupants], self.now),
            )
        elif sorted_at[0] != (len(active), len(occupants)):
            (in_active, in_book), ordered = sorted_at
            insert_ending(ordered, [*active[in_active:], *occupants[in_book:]], self.now)
            sorted_at = self.ending[rclass] = ((len(active), len(occupants)), ordered)
        at = partial(shadow_start, self.state, job, active, self.now, ending=sorted_at[1], occupants=occupants)
        found = self.windows.clear_start(at, self.now, job.max_runtime_s)
        if found is None:
            return
        start_at, chosen, extra = found
        waited = self.now - overdue_age(self.config)(job)[0]
        reservation = self.book.add(job, start_at, chosen, extra, strict=waited > self.config.reservation_wait_bound_s)
        self.acted += 1
        self.reserved.setdefault(rclass, []).append(occupant(job, reservation))

    def _closed(self, job: PendingJob) -> frozenset[str]:
        """The nodes `job` must not start on: a window there starts before its time limit ends."""
        return self.windows.closed(self.now + job.max_runtime_s)

    def _stats(self, considered: int) -> PassStats:
        return PassStats(
            pending=len(self.snap.pending),
            considered=considered,
            placed=len(self.placements),
            placed_tasks=sum(len(p.tasks) for p in self.placements),
            preempted=len(self.preemptions),
            reserved=len(self.book.reservations),
            fragmentation=fragmentation(self.state) if self.config.explain else {},
        )


def shape_key(shape: JobShape) -> tuple:
    """All of a shape, hashable (its node selector as sorted pairs)."""
    selector = shape.node_selector
    return (
        shape.gpu_type,
        shape.tasks,
        shape.gpus_per_task,
        shape.cpus_per_task,
        shape.memory_gb_per_task,
        shape.topology,
        tuple(sorted(selector.items())) if selector else (),
        shape.scratch_disk_gb,
        shape.image,
    )


def fragmentation(state: ClusterState) -> dict[str, float]:
    """Per class: the part of free units that sit on partly used nodes (no whole node free)."""
    result = {}
    for rclass, slots in state.by_class.items():
        free = [s for s in slots if s.ready]
        total = sum(s.free_units for s in free)
        whole = sum(s.free_units for s in free if s.free_units == s.total_units)
        result[rclass] = round(1 - whole / total, 4) if total else 0.0
    return result
