"""Where a pass that reads only actions may stop trying a team's jobs (`Scheduler(actions_only=True)`).

A team's jobs left in a class are pruned once none of them can start, evict or reserve any
more in the pass: only those whose place in the order must stay (see `Pruning.pinned_jobs`)
are still considered. Read, for each resource class among them, from the least any of that
class asks of the pass (the fewest units in all, the highest priority, the longest wait; and
see 3): the tests below are each of one resource class, so a queue whose jobs span several
(a team's CPU and GPU jobs in one priority class) is pruned once every one of its classes
passes them all:
1. no reservation is left to give in their class (asked of the next job's first: it needs no
   look at the queue);
2. no reclaim or outranking any of them may try (the search budgets, the ledger's headroom,
   and with `reclaim_in_turn` a job left blocked before them that asks no more units than any
   of them), and none of them, left blocked, would keep a later owner from reclaiming;
3. no room on a ready node for one task of any of them, even past what others hold: asked
   of the least demanding only (`frontier`: those no other asks less of in units per task,
   units and runtime; room for one means room for every job that asks no less).
Room, the ledger's headroom, the book and the search budgets only shrink within a pass, so the
pruned stay out. What the least asks is kept per queue as running minima from its far end (a
queue is consumed from its near end, so its jobs left are a prefix); for a queue the kept
order built (`queue_order.TeamQueue`), kept between passes with that queue.
"""

from collections.abc import Iterable

from scheduling.core.model import PendingJob, priority_rank


class Pruning:
    """The pruning of one pass (`run`: the `scheduler.Pass`, read as it stands at each call)."""

    def __init__(self, run, bases: dict[int, object] | None = None):
        """`bases`: per queue (by id), the kept `TeamQueue` it was copied from, if any: its
        running minima serve for the queue as long as the queue keeps its jobs' order."""
        self.run = run
        self.bases = bases or {}
        self.remaining: dict[int, list] = {}  # see `least`: per queue, by id
        self.rooms: dict[tuple, bool] = {}  # see `room_for`
        self.pinned: set[int] | None = None  # see `pinned_jobs`

    def __call__(self, team: str, queue: list[PendingJob]) -> list[PendingJob] | None:
        """The jobs of `queue` (a team's jobs not yet considered in a class) to consider
        still, once none of the others can change anything: only the pinned. None while
        they might (see the module's docstring)."""
        if self.may_reserve(queue[-1].resource_class):
            return None  # the next job may reserve
        least = self.least(queue)
        if not least:
            return None
        for entry in least:  # a loop, not `any()` over a generator: asked for ~500 jobs a pass
            if self._may_act(team, *entry):
                return None
        pinned = self.pinned_jobs()
        return [job for job in queue if job.job_id in pinned]

    def _may_act(self, team: str, rclass: str, rank: int, submitted: float, units: int, frontier: tuple) -> bool:
        """Whether a job of `team` in `rclass` that asks no less than the least (see
        `running_least`) might still start, evict or reserve in the pass, or left blocked keep
        a later owner from reclaiming."""
        run = self.run
        config = run.config
        # Each test only reads the pass: any order gives the same answer. The cheapest that most
        # often holds first (over the bound forecast run, of ~28,000 asks: outranking ~9,400,
        # a lower turn ~6,000, a reservation ~3,500, a reclaim ~600, room alone or none ~8,500).
        if config.preemption and run.searches < config.max_preemption_searches and rank < run.lowest_running[rclass]:
            return True
        if self.may_reserve(rclass) or run._may_lower_turn(rclass, units):
            return True
        if (
            config.preemption
            and config.reclaim
            and not run._reclaim_spent()
            and not run._in_turn(rclass)  # else a job blocked before asks no more: they wait their turn
            and run.ledger.within_guarantee(team, rclass, units)
            and run.now - submitted >= config.reclaim_after_wait_s
        ):
            return True
        return any(self.room_for(rclass, per_task, need, run.now + runtime) for per_task, need, runtime in frontier)

    def may_reserve(self, rclass: str) -> bool:
        """Whether a job of `rclass` left blocked would still get a reservation."""
        config = self.run.config
        return config.backfill and self.run.book.count(rclass) < config.reservations_per_class

    def least(self, queue: list[PendingJob]) -> tuple | None:
        """What the least demanding of `queue`'s jobs of each resource class asks (see
        `running_least`), or None if there are none (the pinned count too: they only ever
        make the least less, so prune less, and the minima need not be made again each time
        a job starts or stops being pinned). For a queue copied from a kept `TeamQueue`, read off
        the kept queue's running minima at the place of the queue's last job: exact while the
        queue is a prefix of the kept one, and otherwise (a job taken out ahead of its turn,
        an overdue head) a least over more jobs, which only ever prunes less. Else built once
        per queue and pass."""
        if not queue:
            return None
        base = self.bases.get(id(queue))
        index = base.index_of(queue[-1]) if base is not None else None
        if index is not None:
            key, least = id(base), base.least
        else:
            key, least, index = id(queue), lambda: running_least(queue), len(queue) - 1
        kept = self.remaining.get(key)
        if kept is None:
            kept = self.remaining[key] = least()
        return kept[index]

    def pinned_jobs(self) -> set[int]:
        """Jobs whose place in the order must stay: those holding nodes (see `Pass.holders`),
        and a victim that waits for its preemptor and that preemptor (see
        `QueueOrder.__iter__`: when each is reached decides where the victims go; a victim
        left out would also move the others held at the end, which come by preemptor)."""
        if self.pinned is None:
            run = self.run
            waiting = {job.job_id for job in run.candidates}
            pinned = self.pinned = set(run.holders)
            for job in run.candidates:
                if job.yields_to in waiting:
                    pinned.update((job.job_id, job.yields_to))
        return self.pinned

    def room_for(self, rclass: str, per_task: int, units: int, end_at: float) -> bool:
        """Whether a ready node of `rclass` has room for `per_task` units that no hold,
        reservation or maintenance window keeps from a job ending at `end_at` (the room a plan
        may use: see `ReservationBook.limit_for`, `Windows.limit`), and the class `units` free in all. Kept per class
        generation; holds taken without one only ever shrink the room, so a kept answer errs
        towards room."""
        run = self.run
        key = (rclass, run.generation[rclass], per_task, units, end_at)
        found = self.rooms.get(key)
        if found is None:
            found = self.rooms[key] = units <= run.state.free_units.get(rclass, 0) and any(
                cap is None or cap >= per_task
                for cap in map(
                    run.windows.limit(end_at, run.book.limit_for(end_at)) or _no_limit,
                    run.state.slots_by_free(rclass, per_task),
                )
            )
        return found


def _no_limit(slot) -> None:
    return None


def running_least(queue: Iterable[PendingJob]) -> list[tuple]:
    """For each prefix of `queue`, what the least demanding of its jobs of each resource class
    asks: per class (in the order the prefix first meets them), (class, priority rank,
    submitted, units, frontier), the middle three the least over the class's jobs in the
    prefix, the frontier their (units per task, units, runtime) that no other job's are all
    at most (see `frontier_with`)."""
    found: list[tuple] = []
    extend_least(found, list(queue), 0)
    return found


def extend_least(found: list, queue: list[PendingJob], start: int) -> None:
    """Make `found` the running least of `queue` (see `running_least`) from `start` on,
    `found[:start]` being right."""
    del found[start:]
    least = found[start - 1] if start else ()
    append = found.append
    for index in range(start, len(queue)):
        job = queue[index]
        shape = job.shape
        rclass, units, per_task, runtime = shape.resource_class, shape.units, shape.units_per_task, job.max_runtime_s
        place = 0
        while place < len(least) and least[place][0] != rclass:
            place += 1
        if place == len(least):  # the first job of its class
            least = (
                *least,
                (rclass, priority_rank(job.priority), job.submitted_at, units, ((per_task, units, runtime),)),
            )
            append(least)
            continue
        # Most jobs change none of it (a queue is sorted by size): then the same tuple.
        entry = least[place]
        _, rank, submitted, fewest, frontier = entry
        for other in frontier:
            if other[0] <= per_task and other[1] <= units and other[2] <= runtime:
                break  # an ask no larger in any part is there already
        else:
            frontier = frontier_with(frontier, (per_task, units, runtime))
        job_rank = priority_rank(job.priority)
        if job_rank < rank or job.submitted_at < submitted or units < fewest or frontier is not entry[4]:
            entry = (rclass, min(rank, job_rank), min(submitted, job.submitted_at), min(fewest, units), frontier)
            least = (*least[:place], entry, *least[place + 1 :])
        append(least)


def frontier_with(frontier: tuple, ask: tuple) -> tuple:
    """`frontier` (asks none of which is at most another in every part) with `ask` added:
    the same tuple if one of them asks no more than `ask` in every part."""
    if any(_at_most(other, ask) for other in frontier):
        return frontier
    return (ask, *(other for other in frontier if not _at_most(ask, other)))


def _at_most(ask: tuple, other: tuple) -> bool:
    return ask[0] <= other[0] and ask[1] <= other[1] and ask[2] <= other[2]
