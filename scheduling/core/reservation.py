"""Reservations and EASY backfill.

The highest blocked job of a resource class gets a reservation at its *shadow start*: the
earliest time the running jobs' max runtimes say it will fit, and the nodes it will use then. Later jobs may still start
("backfill") if they cannot delay it: they end before that time, or they only use room on the
reserved nodes that the reservation will not need. Past the wait bound, nothing new goes on
the reserved nodes at all.
"""

import bisect
import operator
from collections import defaultdict
from dataclasses import dataclass, field

from scheduling.core.decisions import Reservation
from scheduling.core.model import PendingJob, RunningJob, TaskPlacement
from scheduling.core.placement import Extra, Plan, capacity
from scheduling.core.state import ClusterState, Slot
from scheduling.core.trial import Trial


def released_by(jobs: list[RunningJob]) -> dict[str, Extra]:
    """What `jobs` hold on each node, summed in plain numbers and made an `Extra` once per node
    (a gang's shadow start sums ~170 jobs' tasks: two tuples made per task cost ~1%)."""
    sums: dict[str, list[int]] = {}
    for job in jobs:
        for task in job.tasks:
            found = sums.get(task.node)
            if found is None:
                found = sums[task.node] = [0, 0, 0]
            found[0] += len(task.gpu_indices)
            found[1] += task.cpus
            found[2] += task.memory_gb
    extra: dict[str, Extra] = defaultdict(Extra)
    for node, (gpus, cpus, memory_gb) in sums.items():
        extra[node] = Extra(gpus, cpus, memory_gb)
    return extra


def ending_order(running: list[RunningJob], now: float) -> list[RunningJob]:
    """Running jobs soonest expected end first (the order `shadow_start` takes them away in):
    by (max(expected end, now), job id). Sorted on the fields themselves (a key the sort reads
    in C), then the jobs past their expected end, which all count as ending now and so come
    first, put in job id order."""
    ordered = sorted(running, key=_END_AND_ID)
    overdue = 0
    while overdue < len(ordered) and ordered[overdue].expected_end <= now:
        overdue += 1
    if overdue > 1:
        ordered[:overdue] = sorted(ordered[:overdue], key=_ID)
    return ordered


_END_AND_ID = operator.attrgetter("expected_end", "job_id")
_ID = operator.attrgetter("job_id")


def insert_ending(ordered: list[RunningJob], jobs: list[RunningJob], now: float) -> None:
    """Put `jobs` into `ordered` (in `ending_order` for `now`) where `ending_order` would: its
    order is by (max(expected end, now), job id), so each goes in by bisection, not by sorting
    every running job again (a pass adds a placement or a reservation at a time)."""
    for job in jobs:
        bisect.insort(ordered, job, key=lambda j: (max(j.expected_end, now), j.job_id))


def rooms_now(state: ClusterState, job: PendingJob) -> dict[Slot, int]:
    """Ready nodes with room for a task of `job` now, and how many tasks: read off the free-room
    index, so a shadow start does not weigh every node of the class. A node with less room (none
    for a task) enters the trial only when a job on it is taken away (`Trial`'s `joining`),
    which is exactly when its room can change."""
    shape = job.shape
    found = {}
    for slot in state.slots_by_free(job.resource_class, shape.units_per_task):
        tasks = capacity(slot, shape)
        if tasks:
            found[slot] = tasks
    return found


def room_now(slot: Slot, job: PendingJob) -> int:
    """The tasks of `job` that `rooms_now` gives `slot` (0: the slot is not among them)."""
    shape = job.shape
    return capacity(slot, shape) if slot.ready and slot.free_units >= shape.units_per_task else 0


def shadow_start(
    state: ClusterState,
    job: PendingJob,
    running: list[RunningJob],
    now: float,
    *,
    ending: list[RunningJob] | None = None,
    closed: frozenset[str] = frozenset(),
    rooms: dict[Slot, int] | None = None,
    occupants: list[RunningJob] = (),
) -> tuple[float, Plan, dict[str, Extra]] | None:
    """The shadow start (EASY backfill's name for it): when and where `job` fits if running
    jobs end at their expected ends, taken away soonest first until it fits. Returns (start,
    plan, room given back by then: negative where an occupant still holds it), or None if it
    never fits on the ready nodes. `ending`: `running` and `occupants` in `ending_order`, if the
    caller has it already; `closed`: nodes it must not use (maintenance.py); `rooms`:
    `rooms_now(state, job)`, if the caller has it already; `occupants`: reservations made before
    (`occupant`), which hold their room from now until they would end."""
    ending = ending if ending is not None else ending_order([*running, *occupants], now)
    rooms = rooms if rooms is not None else rooms_now(state, job)
    trial = Trial(job, rooms, joining=state.slots_named(job.resource_class), closed=closed)
    for held in occupants:
        trial.take_room(held)
    gone = trial.fit_by_removing(ending)
    if gone is None:
        return None
    # Room given back by the jobs gone by then, less what occupants still hold then. An
    # occupant gone by then gives back nothing: it never took room from the free room now.
    held = {id(o) for o in occupants}
    given_back = released_by([job for job in gone if id(job) not in held])
    if occupants:
        ended = {id(job) for job in gone}
        for node, extra in released_by([o for o in occupants if id(o) not in ended]).items():
            given_back[node] = given_back[node] + Extra(-extra.gpus, -extra.cpus, -extra.memory_gb)
    return max(gone[-1].expected_end, now), trial.plan(), given_back


def occupant(job: PendingJob, reservation: Reservation) -> RunningJob:
    """A reservation as a job holding its nodes until `job` would end, had it started at the
    reservation's start: what a later reservation's shadow start must leave it (`shadow_start`).
    Its id is the job's, negated (no running job has it)."""
    shape = job.shape
    tasks = []
    for node in reservation.nodes:
        count = reservation.units[node] // shape.units_per_task if shape.units_per_task else 1
        tasks.append(
            TaskPlacement(
                len(tasks),
                node,
                tuple(range(count * shape.gpus_per_task)),
                count * shape.cpus_per_task,
                count * shape.memory_gb_per_task,
            )
        )
    return RunningJob(
        -job.job_id,
        job.team,
        job.priority,
        shape.gpu_type,
        tuple(tasks),
        started_at=reservation.start_at,
        expected_end=reservation.start_at + job.max_runtime_s,
        preemptible=False,
    )


@dataclass(slots=True)
class Held:
    """What a reservation holds on one node: the job, when, and the room it leaves spare.
    Slotted: a pass makes one per node of each preemptor in flight, and placement reads them
    for every node it weighs (`ReservationBook.limit_for`)."""

    job_id: int
    start_at: float
    spare: int
    strict: bool
    # A nominated job's hold (see `hold`): what others add on the node after it never limits it.
    first: bool = False


@dataclass
class ReservationBook:
    held: dict[str, list[Held]] = field(default_factory=lambda: defaultdict(list))
    reservations: list[Reservation] = field(default_factory=list)
    by_class: dict[str, list[Reservation]] = field(default_factory=lambda: defaultdict(list))
    # Per job, the nodes where it has a reservation or a hold of its own (see `Pass._try`).
    nodes_of: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))

    def count(self, rclass: str) -> int:
        return len(self.by_class.get(rclass, ()))

    def add(
        self, job: PendingJob, start_at: float, chosen: Plan, extra: dict[str, Extra], *, strict: bool
    ) -> Reservation:
        units = {slot.name: count * job.shape.units_per_task for slot, count in chosen}
        for slot, _ in chosen:
            back = extra.get(slot.name, Extra())
            free_then = slot.free_units + (back.gpus if job.shape.gpu_type else back.cpus)
            self.held[slot.name].append(Held(job.job_id, start_at, free_then - units[slot.name], strict))
            self.nodes_of[job.job_id].append(slot.name)
        reservation = Reservation(job.job_id, tuple(sorted(units)), start_at, units)
        self.reservations.append(reservation)
        self.by_class[job.resource_class].append(reservation)
        return reservation

    def hold(self, node: str, job_id: int, now: float, *, first: bool = False) -> None:
        """Keep a node whose tasks are being preempted for `job_id` for that job alone.
        `first`: a nominated job's hold, which no reservation made on top of it undoes."""
        self.held[node].append(Held(job_id, now, 0, strict=True, first=first))
        self.nodes_of[job_id].append(node)

    def limit_for(self, end_at: float, job_id: int | None = None):
        """The most units a job ending at `end_at` may take on each node (None: no limit).
        A job is never limited by its own reservation or hold, and a nominated job's hold
        (`first`), taken before any reservation of the pass, is not undone by a reservation a
        job earlier in the queue makes on top of it."""
        if not self.held:
            return None

        held = self.held

        def limit(slot: Slot) -> int | None:
            """The least of the caps others' holds set (`_cap`), inlined: placement asks it of
            every node it weighs. A strict hold caps at 0, the least any cap can be."""
            least = None
            for h in held.get(slot.name, ()):
                if h.job_id == job_id:
                    if h.first:
                        break
                    continue
                if h.strict:
                    return 0
                if end_at > h.start_at and (least is None or max(h.spare, 0) < least):
                    least = max(h.spare, 0)
            return least

        return limit

    @staticmethod
    def _cap(held: Held, end_at: float) -> int | None:
        if held.strict:
            return 0
        return None if end_at <= held.start_at else max(held.spare, 0)

    def variant(self, rclass: str, end_at: float) -> tuple:
        """What about the book matters to a job ending at `end_at` (for memoizing failures)."""
        reservations = self.by_class.get(rclass)
        return tuple([end_at <= r.start_at for r in reservations]) if reservations else ()

    def consume(self, placed: Plan, shape, end_at: float) -> None:
        """A backfilled job that outlives a reservation uses up the spare room it took."""
        for slot, count in placed:
            for held in self.held.get(slot.name, ()):
                if end_at > held.start_at:
                    held.spare -= count * shape.units_per_task

    def holder(self, node: str) -> int | None:
        return self.held[node][0].job_id if self.held.get(node) else None
