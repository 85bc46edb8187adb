"""The order a pass considers waiting jobs in (see `QueueOrder`)."""

import bisect
import heapq
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Callable

from scheduling.core.fairshare import Ledger, expected_units_seconds
from scheduling.core.model import PRIORITIES, ClusterSnapshot, PendingJob, PolicyConfig
from scheduling.core.pruning import extend_least

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
        kept: "KeptOrder | None" = None,
    ):
        """`changes`: a value that changes whenever the ledger does (then shares are read once
        per change, not once per job). `prune(team, jobs)`: which of `jobs` (a team's jobs not
        yet yielded in a class, the next one last) to yield still, or None for all of them.
        `kept`: the teams' splits of earlier passes, if the caller keeps them (`KeptOrder`)."""
        self.ledger, self.now, self.config = ledger, snapshot.now, snapshot.config
        self.changes, self.standings, self.prune, self.pruned = changes, {}, prune, set()
        self.waiting = {job.job_id for job in jobs}
        self.overdue: dict[int, list[PendingJob]] = {}
        self.classes: dict[int, dict[str, list[PendingJob]]] = defaultdict(dict)
        self.bases: dict[int, TeamQueue] = {}  # per queue (by id), the kept queue it copies
        kept = kept if kept is not None else KeptOrder()
        by_team: dict[str, list[PendingJob]] = defaultdict(list)
        for job in jobs:
            by_team[job.team].append(job)
        splits = kept.split(by_team, self.now, self.config)
        heads = self.config.overdue_first
        late: dict[int, list[list[PendingJob]]] = defaultdict(list)
        for split in splits.values():
            for klass, line in split.late.items():
                if line.jobs:
                    late[klass].append(line.jobs)
        first: dict[tuple[str, int], list[PendingJob]] = defaultdict(list)  # (team, class) -> its heads
        for klass, lines in late.items():  # the oldest overdue go first; the rest keep their turn
            merged = heapq.merge(*lines, key=overdue_age(self.config)) if len(lines) > 1 else iter(lines[0])
            line = self.overdue[klass] = list(merged if heads is None else itertools.islice(merged, heads))
            if heads is not None:
                for job in line:
                    first[job.team, klass].append(job)
        for team, split in splits.items():
            for klass, base in split.queues.items():
                queue = base.without(first.get((team, klass), ()))
                if queue:
                    self.classes[klass][team] = queue
                    self.bases[id(queue)] = base

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
            yield from self.overdue.get(klass, ())
            yield from turns(self.classes.get(klass, {}))

    def _weighted_shortest(self, teams: dict[str, list[PendingJob]]):
        """Every job by its weighted size. A team's jobs share one weight, so each team's queue
        (sorted by size, see `within_team`) is taken from its head, and only the heads meet in
        a heap: a pop costs a look at a few teams, not at the whole queue. The ledger's version
        is read once per pop, and again once the job popped was decided."""
        heap = [self._weighted(team, queue, self._version()) for team, queue in teams.items() if queue]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            team, version = key[3], self._version()
            if key[5] != version:  # the ledger changed since: weigh its head again
                fresh = self._weighted(team, teams[team], version, key[4])
                if fresh[:3] > key[:3]:  # its team placed work since: its jobs weigh more now
                    heapq.heappush(heap, fresh)
                    continue
            if self._pruned(team, teams[team]):
                if teams[team]:
                    heapq.heappush(heap, self._weighted(team, teams[team], self._version()))
                continue
            yield teams[team].pop()
            if teams[team]:
                heapq.heappush(heap, self._weighted(team, teams[team], self._version()))

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

    def _weighted(self, team: str, queue: list[PendingJob], version: object, size: float | None = None) -> tuple:
        """(weighted size, submitted, job id, team, the head's own size, the ledger version it
        was weighed at: `version`, `_version()` now): the ids are unique, so a heap never
        compares past them."""
        head = queue[-1]
        size = expected_units_seconds(head) if size is None else size
        return (
            size * (1.0 + self._standing(team, self.ledger.share, version)),
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
        return (self._standing(team, self.ledger.order_key, self._version()), head.submitted_at, head.job_id, team)

    def _standing(self, team: str, read: Callable[[str], object], version: object):
        """`read(team)`, again only once the ledger changed (`version`: `_version()` now)."""
        if self.changes is None:
            return read(team)
        found = self.standings.get((team, read.__name__))
        if found is None or found[0] != version:
            found = self.standings[team, read.__name__] = (version, read(team))
        return found[1]


def effective_class(job: PendingJob, now: float, config: PolicyConfig) -> int:
    """Rule 1: each `aging_interval_s` waited raises a job one class, never into P0."""
    rank = RANKS[job.priority]
    if rank == 0:
        return 0
    waited = now - job.submitted_at
    return max(1, rank - int(waited // config.aging_interval_s)) if waited > 0 else rank


def within_team(job: PendingJob, config: PolicyConfig) -> tuple:
    """Rule 4's key (the least first once sorted)."""
    shortest = config.shortest_first_within_team or config.order == "weighted_shortest"
    return (expected_units_seconds(job) if shortest else 0.0, job.submitted_at, job.job_id)


def _age(job: PendingJob) -> tuple:
    return job.submitted_at, job.job_id


def _age_since_queued(job: PendingJob) -> tuple:
    return (job.submitted_at if job.queued_at is None else job.queued_at), job.job_id


def overdue_age(config: PolicyConfig) -> Callable[[PendingJob], tuple]:
    """Rule 2's key: (when the job's wait for it began, its id); see `overdue_since_requeue`."""
    return _age_since_queued if config.overdue_since_requeue else _age


# A job is looked at again this long before it crosses a time that moves it: float rounding
# in `effective_class` can never move it earlier than that.
MARGIN_S = 1e-3


def next_move(job: PendingJob, now: float, config: PolicyConfig) -> float:
    """The earliest time after `now` at which `job` may change effective class or become
    overdue (a little early: see `MARGIN_S`); infinity if never."""
    submitted, found = job.submitted_at, math.inf
    since = overdue_age(config)(job)[0]
    if now - since <= config.reservation_wait_bound_s:
        found = since + config.reservation_wait_bound_s
    rank = RANKS[job.priority]
    aging = config.aging_interval_s
    steps = int(max(now - submitted, 0.0) // aging) + 1  # the next step of aging
    if rank and steps <= rank - 1:
        found = min(found, submitted + steps * aging)
    return found - MARGIN_S


class TeamQueue:
    """One team's jobs in one effective class, in the order a pass takes them (popped from
    the end: the least expected GPU-time last), kept between passes with its team's split and
    brought up to date job by job (`add`, `remove`: a binary search on the negated keys). A
    pass takes a copy (`without`); the pruning reads the running minima (`least`), made again
    only from the first place that changed: new and leaving jobs are mostly the least, last."""

    __slots__ = ("jobs", "keys", "where", "minima", "stale")

    def __init__(self, jobs: list[PendingJob], keys: list[tuple]):
        """`jobs` in order, with their keys negated (ascending)."""
        self.jobs, self.keys = jobs, keys
        self.where = {job.job_id: key for job, key in zip(jobs, keys, strict=True)}
        self.minima: list = []  # `pruning.running_least` over the jobs, right below `stale`
        self.stale = 0

    def add(self, job: PendingJob, key: tuple) -> None:
        index = bisect.bisect_left(self.keys, key)
        self.keys.insert(index, key)
        self.jobs.insert(index, job)
        self.where[job.job_id] = key
        self.stale = min(self.stale, index)

    def remove(self, job_id: int) -> None:
        index = bisect.bisect_left(self.keys, self.where.pop(job_id))
        del self.keys[index], self.jobs[index]
        self.stale = min(self.stale, index)

    def without(self, taken: list[PendingJob]) -> list[PendingJob]:
        """A copy for a pass to consume, less `taken` (the overdue heads that go first)."""
        queue = list(self.jobs)
        for index in sorted((self.index_of(job) for job in taken), reverse=True):
            del queue[index]
        return queue

    def index_of(self, job: PendingJob) -> int | None:
        key = self.where.get(job.job_id)
        index = bisect.bisect_left(self.keys, key) if key is not None else None
        return index if index is not None and self.jobs[index] is job else None

    def least(self) -> list:
        """`pruning.running_least` over the jobs, made again from the first place where a job
        changed since it was last read."""
        if self.stale < len(self.jobs) or len(self.minima) != len(self.jobs):
            extend_least(self.minima, self.jobs, self.stale)
            self.stale = len(self.jobs)
        return self.minima


class AgeLine:
    """One team's overdue jobs in one effective class, oldest first, kept like `TeamQueue`."""

    __slots__ = ("jobs", "keys", "age")

    def __init__(self, jobs: list[PendingJob], age: Callable[[PendingJob], tuple]):
        self.age = age
        self.jobs = sorted(jobs, key=age)
        self.keys = [age(job) for job in self.jobs]

    def add(self, job: PendingJob) -> None:
        key = self.age(job)
        index = bisect.bisect_left(self.keys, key)
        self.keys.insert(index, key)
        self.jobs.insert(index, job)

    def remove(self, job: PendingJob) -> None:
        index = bisect.bisect_left(self.keys, self.age(job))
        del self.keys[index], self.jobs[index]


class TeamSplit:
    """One team's waiting jobs split by effective class: per class its queue (`TeamQueue`:
    with `overdue_first` the overdue too, whose heads a pass takes out; else only those not
    overdue) and its overdue jobs oldest first (`AgeLine`). Kept between passes (see
    `KeptOrder`) and brought up to date by what changed: jobs that arrived or left (or were
    edited: a new object under the id), and jobs whose time to move has come (`next_move`:
    a class gained by aging, the wait bound passed), each moved alone."""

    def __init__(self, jobs: list[PendingJob], now: float, config: PolicyConfig):
        self.config, self.at, self.all_kept = config, now, config.overdue_first is not None
        self.shortest = config.shortest_first_within_team or config.order == "weighted_shortest"
        self.age = overdue_age(config)
        self.members: dict[int, tuple[PendingJob, tuple, int, bool]] = {}  # id -> job, key, class, overdue
        # A heap of (when a job may move, its id), built on the first update (the leader's
        # passes, whose jobs are all new objects, make a split afresh each pass and never need it).
        self.moves: list[tuple[float, int]] | None = None
        keyed = sorted(((self.key(job), job) for job in jobs), key=operator.itemgetter(0))
        lines: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
        late: dict[int, list[PendingJob]] = defaultdict(list)
        for key, job in keyed:
            klass, overdue = self.place(job, now)
            self.members[job.job_id] = (job, key, klass, overdue)
            if overdue:
                late[klass].append(job)
            if self.all_kept or not overdue:
                line = lines[klass]
                line[0].append(job)
                line[1].append(key)
        self.queues = {klass: TeamQueue(*line) for klass, line in lines.items()}
        self.late: dict[int, AgeLine] = defaultdict(
            lambda: AgeLine([], self.age), {klass: AgeLine(line, self.age) for klass, line in late.items()}
        )
        self.jobs = jobs
        self.objects = _by_object(jobs)  # the members' jobs by id() (see `update`)

    def key(self, job: PendingJob) -> tuple:
        """`within_team`, negated: ascending keys give the order a pass pops from the end."""
        return (-expected_units_seconds(job) if self.shortest else -0.0, -job.submitted_at, -job.job_id)

    def place(self, job: PendingJob, now: float) -> tuple[int, bool]:
        return effective_class(job, now, self.config), now - self.age(job)[0] > self.config.reservation_wait_bound_s

    def update(self, jobs: list[PendingJob], now: float) -> bool:
        """Bring the split up to date with `jobs` at `now`; False (and nothing done) when
        most of them are new objects, as from a snapshot built afresh (the leader's): one
        sort then costs less than moving them one by one."""
        if not (len(jobs) == len(self.jobs) and all(map(operator.is_, jobs, self.jobs))):
            # By object (set operations, not a loop here): a job edited is a new object under
            # its id, so it leaves and joins again. The old objects are alive (`members` holds
            # them), so no new one shares an id() with one of them.
            now_objects = _by_object(jobs)
            gone = self.objects.keys() - now_objects.keys()
            arriving = now_objects.keys() - self.objects.keys()
            changes = 2 * len(gone) + len(jobs) - len(self.members)  # those leaving, and arriving
            if 2 * changes > len(jobs) + 32:
                return False
            for key in gone:
                self._leave(self.objects[key].job_id)
            for key in arriving:
                self._join(now_objects[key], now)
            self.jobs, self.objects = jobs, now_objects
        self._age(now)
        self.at = now
        return True

    def _join(self, job: PendingJob, now: float) -> None:
        klass, overdue = self.place(job, now)
        key = self.key(job)
        self.members[job.job_id] = (job, key, klass, overdue)
        if overdue:
            self.late[klass].add(job)
        if self.all_kept or not overdue:
            queue = self.queues.get(klass)
            if queue is None:
                queue = self.queues[klass] = TeamQueue([], [])
            queue.add(job, key)
        if self.moves is not None:
            heapq.heappush(self.moves, (next_move(job, now, self.config), job.job_id))

    def _leave(self, job_id: int) -> None:
        job, _, klass, overdue = self.members.pop(job_id)
        if overdue:
            self.late[klass].remove(job)
        if self.all_kept or not overdue:
            self.queues[klass].remove(job_id)

    def _age(self, now: float) -> None:
        """Move the jobs whose time to move has come (those due are taken first: a job a hair
        short of its time is due again, but only next pass). The heap, made at the first
        update, counts from the time of the last: a job joined since is due no later than
        from its own time, so it is looked at no later."""
        if self.moves is None:
            self.moves = [(next_move(entry[0], self.at, self.config), j) for j, entry in self.members.items()]
            heapq.heapify(self.moves)
        moves, due = self.moves, []
        while moves and moves[0][0] <= now:
            due.append(heapq.heappop(moves)[1])
        for job_id in due:
            entry = self.members.get(job_id)
            if entry is None:
                continue  # it left
            job = entry[0]
            if self.place(job, now) != entry[2:]:
                self._leave(job_id)
                self._join(job, now)
            else:
                heapq.heappush(moves, (next_move(job, now, self.config), job_id))
        if len(moves) > 2 * len(self.members) + 100:  # forget the moves of jobs gone
            self.moves = [(when, j) for when, j in moves if j in self.members]
            heapq.heapify(self.moves)


def _by_object(jobs: list[PendingJob]) -> dict[int, PendingJob]:
    return dict(zip(map(id, jobs), jobs, strict=True))


class KeptOrder:
    """Each team's split (`TeamSplit`), kept between passes (a `Scheduler` keeps one) and
    brought up to date by what changed. A fresh one each pass gives the same order: the kept
    one saves the sorts, which grow with the queue."""

    def __init__(self):
        self.config: PolicyConfig | None = None
        self.teams: dict[str, TeamSplit] = {}

    def split(self, by_team: dict[str, list[PendingJob]], now: float, config: PolicyConfig) -> dict[str, TeamSplit]:
        if config is not self.config and config != self.config:
            self.config, self.teams = config, {}
        kept, splits = self.teams, {}
        for team, jobs in by_team.items():
            found = kept.get(team)
            if found is None or now < found.at or not found.update(jobs, now):
                found = TeamSplit(jobs, now, config)
            splits[team] = found
        self.teams = splits  # a team with no job waiting is forgotten
        return splits
