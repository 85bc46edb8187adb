"""The order a pass considers waiting jobs in (see `QueueOrder`)."""

import heapq
from collections import defaultdict
from collections.abc import Callable
from operator import attrgetter

from scheduling.core.fairshare import Ledger, expected_units_seconds
from scheduling.core.model import PRIORITIES, ClusterSnapshot, PendingJob

RANKS = {priority: rank for rank, priority in enumerate(PRIORITIES)}


class QueueOrder:
    """The order jobs are considered in:
    1. effective priority class, P0 first; each `aging_interval_s` of waiting raises a job one
       class, never into P0, so nothing starves across classes;
    2. within a class, jobs waiting past `reservation_wait_bound_s` first, oldest first, so
       the head of that line gets the reservation whatever its team's share (with
       `overdue_first` = n, only the n oldest: the others take their team's turn in 3);
    3. then fair share: the team whose division's, then whose own dominant share (usage over
       entitlement) is lowest goes next; shares are updated as the pass places jobs; between
       equal shares, the team whose next job is older;
    4. within a team's turn, the least expected GPU-time (runtime x GPUs) first if
       `shortest_first_within_team`, else the oldest;
    5. job id, the deterministic tie-break (then team name between teams).
    A job preempted for another that still waits comes right after that one, wherever the
    rules above put it: the room it gave up is the preemptor's.
    With `prune`, once `prune(team, jobs)` says which of a team's jobs left in a class may
    still matter (see `Pass._prune`), only those are yielded: the others' order is the same
    without the rest (a team's standing reads the ledger, which only actions move, and each
    team's jobs stay in their order).
    With `order="weighted_shortest"`, steps 3 and 4 become one: the least expected GPU-time
    weighted by its team's standing, size x (1 + the team's dominant share), so short jobs go
    first across teams while a team using more than it is owed sees its jobs count as larger.
    """

    def __init__(
        self,
        jobs: list[PendingJob],
        ledger: Ledger,
        snapshot: ClusterSnapshot,
        changes: Callable[[], object] | None = None,
        prune: Callable[[str, list[PendingJob]], list[PendingJob] | None] | None = None,
    ):
        """`changes`: a value that changes whenever the ledger does (then shares are read once
        per change, not once per job). `prune(team, jobs)`: which of `jobs` (a team's jobs not
        yet yielded in a class, the next one last) to yield still, or None for all of them."""
        self.ledger, self.now, self.config = ledger, snapshot.now, snapshot.config
        self.changes, self.standings, self.prune, self.pruned = changes, {}, prune, set()
        self.waiting = {job.job_id for job in jobs}
        self.overdue: dict[int, list[PendingJob]] = defaultdict(list)
        self.classes: dict[int, dict[str, list[PendingJob]]] = defaultdict(lambda: defaultdict(list))
        bound = self.config.reservation_wait_bound_s
        for job in jobs:  # one line of work per job: this loop runs over the whole queue
            klass = self.effective_class(job)
            if self.now - job.submitted_at > bound:
                self.overdue[klass].append(job)
            else:
                self.classes[klass][job.team].append(job)
        heads = self.config.overdue_first
        if heads is not None:  # only the oldest overdue go first; the rest keep their turn
            for klass, line in self.overdue.items():
                line.sort(key=attrgetter("submitted_at", "job_id"))
                for job in line[heads:]:
                    self.classes[klass][job.team].append(job)
                del line[heads:]
        for teams in self.classes.values():
            for queue in teams.values():
                queue.sort(key=self.within_team, reverse=True)  # popped from the end

    def effective_class(self, job: PendingJob) -> int:
        rank = RANKS[job.priority]
        if rank == 0:
            return 0
        waited = self.now - job.submitted_at
        return max(1, rank - int(waited // self.config.aging_interval_s)) if waited > 0 else rank

    def within_team(self, job: PendingJob) -> tuple:
        shortest = self.config.shortest_first_within_team or self.config.order == "weighted_shortest"
        size = expected_units_seconds(job) if shortest else 0.0
        return (size, job.submitted_at, job.job_id)

    def __iter__(self):
        held: dict[int, list[PendingJob]] = defaultdict(list)  # preemptor -> its victims, waiting
        for job in self._ordered():
            if job.yields_to is not None and job.yields_to in self.waiting:
                held[job.yields_to].append(job)
                continue
            yield job
            if held:
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
            yield from sorted(self.overdue.get(klass, ()), key=attrgetter("submitted_at", "job_id"))
            yield from turns(self.classes.get(klass, {}))

    def _weighted_shortest(self, teams: dict[str, list[PendingJob]]):
        """Every job by its weighted size. A team's jobs share one weight, so each team's queue
        (sorted by size, see `within_team`) is taken from its head, and only the heads meet in
        a heap: a pop costs a look at a few teams, not at the whole queue."""
        heap = [self._weighted(team, queue) for team, queue in teams.items() if queue]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            team = key[3]
            if key[5] != self._version():  # the ledger changed since: weigh its head again
                fresh = self._weighted(team, teams[team], key[4])
                if fresh[:3] > key[:3]:  # its team placed work since: its jobs weigh more now
                    heapq.heappush(heap, fresh)
                    continue
            if self._pruned(team, teams[team]):
                if teams[team]:
                    heapq.heappush(heap, self._weighted(team, teams[team]))
                continue
            yield teams[team].pop()
            if teams[team]:
                heapq.heappush(heap, self._weighted(team, teams[team]))

    def _pruned(self, team: str, queue: list[PendingJob], *, whole: bool = False) -> bool:
        """Whether `prune` thinned the team's queue just now (then its head changed): once per
        queue, which it keeps in its order. `whole`: only if it keeps none of it (a fair turn
        breaks ties by the head's submit time, which is not in the order the queue is taken
        in, so a queue thinned to a later head could take a turn earlier)."""
        if self.prune is None or id(queue) in self.pruned:
            return False
        kept = self.prune(team, queue)
        if kept is None or (whole and kept):
            return False
        queue[:] = kept
        self.pruned.add(id(queue))
        return True

    def _weighted(self, team: str, queue: list[PendingJob], size: float | None = None) -> tuple:
        """(weighted size, submitted, job id, team, the head's own size, the ledger version it
        was weighed at): the ids are unique, so a heap never compares past them."""
        head = queue[-1]
        size = expected_units_seconds(head) if size is None else size
        version = self._version()
        return (
            size * (1.0 + self._standing(team, self.ledger.share)),
            head.submitted_at,
            head.job_id,
            team,
            size,
            version,
        )

    def _version(self) -> object:
        """What changes with the ledger (a fresh object each time without `changes`)."""
        return self.changes() if self.changes is not None else object()

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
            if self._pruned(team, teams[team], whole=True):
                continue
            yield teams[team].pop()
            if teams[team]:
                heapq.heappush(heap, self._key(team, teams[team]))

    def _key(self, team: str, queue: list[PendingJob]) -> tuple:
        head = queue[-1]
        return (self._standing(team, self.ledger.order_key), head.submitted_at, head.job_id, team)

    def _standing(self, team: str, read: Callable[[str], object]):
        """`read(team)`, again only once the ledger changed."""
        if self.changes is None:
            return read(team)
        version = self.changes()
        found = self.standings.get((team, read.__name__))
        if found is None or found[0] != version:
            found = self.standings[team, read.__name__] = (version, read(team))
        return found[1]
