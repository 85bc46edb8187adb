"""One scheduling pass: snapshot in, decisions out.

`schedule()` runs six steps:
1. Index the cluster: free room per node by class and amount, usage per team, who borrows.
2. Screen: held jobs, jobs waiting on dependencies and jobs in retry back-off wait as such.
3. Order the rest (see `QueueOrder`).
4. Take each job in order: check its quota; place it where it fits now without delaying a
   reservation; else evict victims for it if it may (preemption.py); else, if it is the
   highest blocked job of its class, reserve room for it (reservation.py).
5. Explain every job left waiting.
6. Count what the pass did.
"""
import heapq
from collections import defaultdict
from typing import Callable

from scheduling.core import explain
from scheduling.core.decisions import Decisions, PassStats, Placement, Preemption, Reservation
from scheduling.core.fairshare import Ledger, borrowed_jobs, expected_units_seconds
from scheduling.core.model import ClusterSnapshot, PendingJob, RunningJob, priority_rank
from scheduling.core.placement import commit, plan
from scheduling.core.preemption import VictimPool, find_victims, units_freed, why
from scheduling.core.reasons import PendingReason
from scheduling.core.reservation import ReservationBook, forecast
from scheduling.core.state import ClusterState


def schedule(snapshot: ClusterSnapshot, *, timer: Callable[[], float] | None = None) -> Decisions:
    started = timer() if timer else None
    decisions = Pass(snapshot).run()
    if timer is None:
        return decisions
    stats = decisions.stats
    elapsed = (timer() - started) * 1000
    return Decisions(decisions.placements, decisions.preemptions, decisions.reservations, decisions.pending,
                     decisions.order, PassStats(**{**_fields(stats), "elapsed_ms": elapsed}))


def _fields(stats: PassStats) -> dict:
    return {name: getattr(stats, name) for name in stats.__slots__}


class QueueOrder:
    """The order jobs are considered in:
    1. effective priority class, P0 first; each `aging_interval_s` of waiting raises a job one
       class, never into P0, so nothing starves across classes;
    2. within a class, jobs waiting past `reservation_wait_bound_s` first, oldest first, so
       the head of that line gets the reservation whatever its team's share;
    3. then fair share: the team whose division's, then whose own dominant share (usage over
       entitlement) is lowest goes next; shares are updated as the pass places jobs; between
       equal shares, the team whose next job is older;
    4. within a team's turn, the least expected GPU-time (runtime x GPUs) first if
       `shortest_first_within_team`, else the oldest;
    5. job id, the deterministic tie-break (then team name between teams).
    A job preempted for another that still waits comes right after that one, wherever the
    rules above put it: the room it gave up is the preemptor's.
    With `order="weighted_shortest"`, steps 3 and 4 become one: the least expected GPU-time
    weighted by its team's standing, size x (1 + the team's dominant share), so short jobs go
    first across teams while a team using more than it is owed sees its jobs count as larger.
    """

    def __init__(self, jobs: list[PendingJob], ledger: Ledger, snapshot: ClusterSnapshot):
        self.ledger, self.now, self.config = ledger, snapshot.now, snapshot.config
        self.waiting = {job.job_id for job in jobs}
        self.overdue: dict[int, list[PendingJob]] = defaultdict(list)
        self.classes: dict[int, dict[str, list[PendingJob]]] = defaultdict(lambda: defaultdict(list))
        for job in jobs:
            if self.now - job.submitted_at > self.config.reservation_wait_bound_s:
                self.overdue[self.effective_class(job)].append(job)
            else:
                self.classes[self.effective_class(job)][job.team].append(job)
        for teams in self.classes.values():
            for queue in teams.values():
                queue.sort(key=self.within_team, reverse=True)  # popped from the end

    def effective_class(self, job: PendingJob) -> int:
        rank = priority_rank(job.priority)
        raised = int(max(0.0, self.now - job.submitted_at) // self.config.aging_interval_s)
        return rank if rank == 0 else max(1, rank - raised)

    def within_team(self, job: PendingJob) -> tuple:
        size = expected_units_seconds(job) if self.config.shortest_first_within_team else 0.0
        return (size, job.submitted_at, job.job_id)

    def __iter__(self):
        held: dict[int, list[PendingJob]] = defaultdict(list)  # preemptor -> its victims, waiting
        for job in self._ordered():
            if job.yields_to in self.waiting:
                held[job.yields_to].append(job)
                continue
            yield job
            yield from self._released(job.job_id, held)
        for jobs in held.values():
            yield from jobs

    def _released(self, job_id: int, held: dict[int, list[PendingJob]]):
        for job in held.pop(job_id, ()):
            yield job
            yield from self._released(job.job_id, held)

    def _ordered(self):
        turns = self._weighted_shortest if self.config.order == "weighted_shortest" else self._fair_turns
        for klass in sorted(set(self.classes) | set(self.overdue)):
            yield from sorted(self.overdue.get(klass, ()), key=lambda j: (j.submitted_at, j.job_id))
            yield from turns(self.classes.get(klass, {}))

    def _weighted_shortest(self, teams: dict[str, list[PendingJob]]):
        heap = [self._weighted(job) for queue in teams.values() for job in queue]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            fresh = self._weighted(key[-1])
            if fresh > key:  # its team placed work since: its jobs weigh more now
                heapq.heappush(heap, fresh)
                continue
            yield key[-1]

    def _weighted(self, job: PendingJob) -> tuple:
        size = expected_units_seconds(job) * (1.0 + self.ledger.share(job.team))
        return (size, job.submitted_at, job.job_id, job)

    def _fair_turns(self, teams: dict[str, list[PendingJob]]):
        heap = [self._key(team, queue) for team, queue in teams.items()]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            team = key[-1]
            fresh = self._key(team, teams[team])
            if fresh > key:  # its share grew since it was pushed: wait for its real turn
                heapq.heappush(heap, fresh)
                continue
            yield teams[team].pop()
            if teams[team]:
                heapq.heappush(heap, self._key(team, teams[team]))

    def _key(self, team: str, queue: list[PendingJob]) -> tuple:
        head = queue[-1]
        return (self.ledger.order_key(team), head.submitted_at, head.job_id, team)


class Pass:
    def __init__(self, snapshot: ClusterSnapshot):
        self.snap = snapshot
        self.now = snapshot.now
        self.config = snapshot.config
        # 1. Index.
        self.state = ClusterState(snapshot.nodes, snapshot.running)
        self.ledger = Ledger.build(snapshot.teams, snapshot.running, self.state.fleet.capacity)
        self.borrowed = borrowed_jobs(self.ledger, snapshot.running)
        self.active: dict[str, list[RunningJob]] = defaultdict(list)
        for job in snapshot.running:
            self.active[job.resource_class].append(job)
        self.stopping_for: dict[int, list[RunningJob]] = defaultdict(list)
        for job in snapshot.running:
            if job.preempting and job.preempted_for is not None:
                self.stopping_for[job.preempted_for].append(job)
        self._victims: VictimPool | None = None
        # Per class, the lowest priority class anyone preemptible runs at: a job that ranks no
        # higher cannot outrank anyone, so it needs no victim search (unless it reclaims).
        self.lowest_running = defaultdict(lambda: -1)
        for job in snapshot.running:
            if job.preemptible and not job.preempting and job.priority != "P0":
                self.lowest_running[job.resource_class] = max(self.lowest_running[job.resource_class],
                                                              priority_rank(job.priority))
        self.no_victims: dict[tuple, int] = {}
        self.book = ReservationBook()
        for job_id, victims in self.stopping_for.items():
            for node in {t.node for victim in victims for t in victim.tasks}:
                self.book.hold(node, job_id, self.now)
        self.failed: dict[tuple, int] = {}
        self.placements: list[Placement] = []
        self.preemptions: list[Preemption] = []
        self.pending: dict[int, PendingReason] = {}
        self.blocked: dict[int, PendingJob] = {}
        self.placed_units: dict[str, int] = defaultdict(int)
        self.searches = 0

    def run(self) -> Decisions:
        candidates = [job for job in self.snap.pending if not self._screened(job)]   # 2. Screen.
        order = [job.job_id for job in self._consider(QueueOrder(candidates, self.ledger, self.snap))]  # 3, 4.
        if self.config.explain:
            self._explain_blocked()                                                   # 5.
        return Decisions(tuple(self.placements), tuple(self.preemptions), tuple(self.book.reservations),
                         dict(self.pending), tuple(order), self._stats(len(order)))   # 6.

    def _screened(self, job: PendingJob) -> bool:
        if job.held:
            self.pending[job.job_id] = explain.held()
        elif job.waiting_on:
            self.pending[job.job_id] = explain.dependency(job)
        elif job.not_before is not None and job.not_before > self.now:
            self.pending[job.job_id] = explain.backoff(job, self.now)
        else:
            return False
        return True

    def _consider(self, order: QueueOrder):
        for job in order:
            self._decide(job)
            yield job

    def _decide(self, job: PendingJob) -> None:
        rclass, units = job.resource_class, job.shape.units
        over = self.ledger.over_limit(job.team, rclass, units)
        if over is not None:
            self.pending[job.job_id] = explain.quota(job, over)
            return
        end_at = self.now + job.max_runtime_s
        limit = self.book.limit_for(end_at, job.job_id)
        variant = self.book.variant(rclass, end_at) + ((job.job_id,) if job.job_id in self.stopping_for else ())
        chosen = self._plan(job, limit, variant)
        if chosen is not None:
            self._place(job, chosen, end_at)
            return
        if self._preempt_for(job):
            return
        self.blocked[job.job_id] = job
        if self.book.count(rclass) < self.config.reservations_per_class and self.config.backfill:
            self._reserve(job)

    def _plan(self, job: PendingJob, limit, variant: tuple):
        """Plan with a memo of failures: within a pass room only shrinks, so a shape that did
        not fit with n tasks will not fit with n or more."""
        memo_key = (job.shape.key(), variant)
        if self.failed.get(memo_key, 1 << 30) <= job.shape.tasks:
            return None
        chosen = plan(self.state, job.shape, limit)
        if chosen is None:
            self.failed[memo_key] = min(self.failed.get(memo_key, 1 << 30), job.shape.tasks)
        return chosen

    def _fits_at_start(self, job: PendingJob) -> bool:
        return self.state.free_units.get(job.resource_class, 0) + self.placed_units[job.resource_class] >= job.shape.units

    def _place(self, job: PendingJob, chosen, end_at: float) -> None:
        rclass, units = job.resource_class, job.shape.units
        borrowed = self.ledger.would_borrow(job.team, rclass, units)
        tasks = commit(self.state, chosen, job.shape)
        self.book.consume(chosen, job.shape, end_at)
        self.ledger.add(job.team, rclass, units)
        self.placed_units[rclass] += units
        self.placements.append(Placement(job.job_id, tasks, borrowed))
        self.active[rclass].append(RunningJob(job.job_id, job.team, job.priority, job.shape.gpu_type, tasks,
                                      started_at=self.now, expected_end=end_at, checkpointing=job.checkpointing))

    @property
    def victims(self) -> VictimPool:
        """Built on the first search: most passes never need one."""
        if self._victims is None:
            self._victims = VictimPool(self.snap.running, self.borrowed, self.now, self.config)
        return self._victims

    def _preempt_for(self, job: PendingJob) -> bool:
        """Evict victims for `job` if it may; True when it waits for victims to stop."""
        in_flight = self.stopping_for.get(job.job_id)
        if in_flight:
            self.pending[job.job_id] = explain.preempting(job, [v.job_id for v in in_flight],
                                                          sum(v.units for v in in_flight), reclaim=False)
            return True
        if not self.config.preemption:
            return False
        reclaim = self.ledger.within_guarantee(job.team, job.resource_class, job.shape.units)
        outranks = priority_rank(job.priority) < self.lowest_running[job.resource_class]
        if not reclaim and (self.searches >= self.config.max_preemption_searches or not outranks):
            return False  # out of search budget, or nobody running ranks below it
        # Victims only ever leave the pool during a pass, so what failed once fails again.
        memo_key = (job.shape.key(), priority_rank(job.priority), reclaim, job.team if reclaim else None)
        if self.no_victims.get(memo_key, 1 << 30) <= job.shape.tasks:
            return False
        excess = self.ledger.excess(job.resource_class) if reclaim else {}
        candidates = self.victims.candidates(job, excess=excess)
        found = None
        if candidates:
            self.searches += 1
            found = find_victims(self.state, job, candidates, excess=excess, borrowed=self.borrowed, now=self.now)
        if found is None:
            self.no_victims[memo_key] = min(self.no_victims.get(memo_key, 1 << 30), job.shape.tasks)
            return False
        self._evict(job, found, {c.job.job_id: c for c in candidates})
        return True

    def _evict(self, job: PendingJob, found, candidates: dict) -> None:
        reasons = {v.job_id: why(candidates[v.job_id], job) for v in found.victims}
        for victim in found.victims:
            self.victims.take(victim)
            self.preemptions.append(Preemption(victim.job_id, job.job_id, reasons[victim.job_id], (
                f"preempted for job {job.job_id} ({job.priority}, team {job.team}): "
                + ("reclaiming capacity its team is guaranteed" if reasons[victim.job_id] == "RECLAIM"
                   else f"{victim.priority} yields to {job.priority}"))))
        reclaim = "RECLAIM" in reasons.values()
        self.pending[job.job_id] = explain.preempting(job, [v.job_id for v in found.victims],
                                                      units_freed(found.victims), reclaim)
        # The room is spoken for: the team's share and guarantee count it from now on, so
        # its next job does not reclaim (or outrank) the same capacity again.
        self.ledger.add(job.team, job.resource_class, job.shape.units)

    def _reserve(self, job: PendingJob) -> None:
        found = forecast(self.state, job, self.active[job.resource_class], self.now)
        if found is None:
            return
        start_at, chosen, extra = found
        waited = self.now - job.submitted_at
        self.book.add(job, start_at, chosen, extra, strict=waited > self.config.reservation_wait_bound_s)

    def _explain_blocked(self) -> None:
        explainer = explain.CapacityExplainer(self.state, self.snap.nodes)
        reserved: dict[int, Reservation] = {r.job_id: r for r in self.book.reservations}
        for job_id, job in self.blocked.items():
            self.pending[job_id] = self._why_blocked(job, reserved.get(job_id), explainer)

    def _why_blocked(self, job: PendingJob, reservation: Reservation | None, explainer) -> PendingReason:
        """In order: it would fit but for a reservation; others took the room this pass; its team
        is already at its guarantee with nothing idle to borrow; or the capacity story with the
        histogram."""
        rclass = job.resource_class
        held = [r for r in self.book.by_class.get(rclass, ()) if r.job_id != job.job_id]
        if held and self._plan(job, None, ("free",)) is not None:
            return explain.behind_reservation(job, held[0], self.now)
        if reservation is None and self.placed_units[rclass] and self._fits_at_start(job):
            return explain.behind_others(job, self.placed_units[rclass])
        used, guaranteed = self.ledger.usage[job.team][rclass], self.ledger.guaranteed(job.team, rclass)
        spec = self.ledger.teams.get(job.team)
        if spec and spec.quota(rclass) and used >= guaranteed:
            reason = explain.nothing_to_borrow(job, used, guaranteed, self.state.free_units.get(rclass, 0))
        else:
            reason = explainer.explain(job)
        return explain.with_reservation(reason, reservation)

    def _stats(self, considered: int) -> PassStats:
        return PassStats(
            pending=len(self.snap.pending), considered=considered, placed=len(self.placements),
            placed_tasks=sum(len(p.tasks) for p in self.placements), preempted=len(self.preemptions),
            reserved=len(self.book.reservations),
            fragmentation=fragmentation(self.state) if self.config.explain else {},
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
