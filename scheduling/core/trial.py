"""What if some jobs were gone? The room on each node, kept current as jobs are taken away
one at a time: the machinery of both preemption (which victims?) and shadow starts
(when will it fit?)."""

from collections.abc import Mapping

from scheduling.core.model import PendingJob, RunningJob, Topology
from scheduling.core.placement import Room, capacity, plan_on, plan_one
from scheduling.core.state import Slot


class Trial:
    """Victims removed one at a time from one domain, keeping each node's room current: only
    a victim's own nodes are recomputed, and whether the job fits is read off totals kept as
    they go: the layout is made once the trial is done (`plan`)."""

    def __init__(
        self,
        job: PendingJob,
        rooms_now: dict[Slot, int],
        *,
        one_domain: bool = False,
        joining: Mapping[str, Slot] | None = None,
        closed: frozenset[str] = frozenset(),
    ):
        """`one_domain`: the rooms are one node, one rack for a rack-bound gang, or one zone,
        so the job fits exactly when the total room holds all its tasks. `joining`: nodes of
        the domain that enter the trial only when a victim on them is taken away (so the cost
        follows the victims tried, not all the candidates). `closed`: nodes the job must not
        start on (a maintenance window it would run into), whatever is taken away there."""
        self.job, self.shape, self.one_domain = job, job.shape, one_domain
        self.closed = closed
        rooms_now = {slot: tasks for slot, tasks in rooms_now.items() if slot.name not in closed}
        self.rooms = dict(rooms_now)
        self.names = {slot.name: slot for slot in rooms_now}
        self.joining = joining if joining is not None else {}  # it may grow as the trial goes on
        self.extra: dict[str, Given] = {}  # per node, what the jobs taken away so far give back
        self.total = sum(rooms_now.values())
        # Tasks that fit per zone (per rack of a zone for a gang that must share a rack), and
        # how many of them hold all the job's tasks: the job has a layout exactly when one does
        # (see `fits`).
        self.group = _group_of(self.shape.topology)
        self.groups: dict[tuple[str, str | None], int] = {}
        self.holding = 0
        if not one_domain:
            for slot, tasks in rooms_now.items():
                self._grow(slot, max(tasks, 0))  # a zone holds only rooms above 0 (placement.plan_on's)

    def _slot(self, name: str) -> Slot | None:
        slot = self.names.get(name)
        if slot is None and name in self.joining and self.joining[name].ready and name not in self.closed:
            slot = self.names[name] = self.joining[name]
            self.rooms[slot] = room = capacity(slot, self.shape)
            self.total += room
            if not self.one_domain:
                self._grow(slot, max(room, 0))
        return slot

    def _grow(self, slot: Slot, change: int) -> None:
        """Count `change` more tasks in the slot's zone (or rack): see `groups`."""
        key, tasks = self.group(slot), self.shape.tasks
        was = self.groups.get(key, 0)
        self.groups[key] = now = was + change
        if (now >= tasks) != (was >= tasks):
            self.holding += 1 if now >= tasks else -1

    def _change(self, victim: RunningJob, sign: int) -> None:
        extra, rooms, names = self.extra, self.rooms, self.names
        for task in victim.tasks:
            slot = names.get(task.node) or self._slot(task.node)  # most are in already
            if slot is None:
                continue
            given = extra.get(task.node)
            if given is None:
                given = extra[task.node] = Given()
            given.gpus += sign * len(task.gpu_indices)
            given.cpus += sign * task.cpus
            given.memory_gb += sign * task.memory_gb
            tasks = max(capacity(slot, self.shape, extra=given), 0)  # below 0 while an occupant holds room
            change = tasks - rooms[slot]
            if change:
                self.total += change
                if not self.one_domain:
                    self._grow(slot, max(tasks, 0) - max(rooms[slot], 0))
                rooms[slot] = tasks

    def take_room(self, occupant: RunningJob) -> None:
        """Hold the room `occupant` will use (a reservation: see `reservation.occupant`), until
        it is taken away like a running job."""
        self._change(occupant, -1)

    def fits(self) -> bool:
        """Whether `plan` would find a layout, without making one: `placement.plan_on` finds one
        exactly when a zone (for `REQUIRE_SAME_RACK`, a rack of a zone) holds all the tasks (each
        topology's layout then places them all), so the totals kept per zone say it. A gang's
        shadow start made ~7 layouts for the one it kept (`plan`, once the trial is done)."""
        return self.total >= self.shape.tasks and (self.one_domain or self.holding > 0)

    def plan(self):
        """The job's layout on the rooms as they stand (None: none)."""
        if self.shape.tasks == 1:
            return plan_one(self.rooms, self.shape.topology)
        rooms = sorted((Room(s, n) for s, n in self.rooms.items() if n > 0), key=lambda r: r.slot.name)
        return plan_on(rooms, self.shape)

    def fit_by_removing(self, ordered: list[RunningJob], read=None) -> list[RunningJob] | None:
        """Remove candidates in order until the job fits; None if even all of them do not do.
        One at a time (`fits` reads kept totals: no layout is made), so the trial ends with
        exactly the fewest that fit removed, and `plan()` gives their layout. (Room only grows
        as jobs go, so this is the count the layout checks at growing steps, 1, 2, 4, ..., and
        halving back found while each check made a layout.)
        `read`: for a list read as it is needed (`victim_search.Domain.read`), called with how
        many candidates the next step needs (with `joining`, the nodes they run on)."""
        tasks, count = self.shape.tasks, 0
        while True:
            if read is not None:
                read(count + 1)
            if count >= len(ordered):
                return None
            self._change(ordered[count], +1)
            count += 1
            if self.total >= tasks and (self.one_domain or self.holding > 0):  # `fits`, inlined
                return ordered[:count]

    def put_back_unneeded(self, victims: list[RunningJob]) -> list[RunningJob]:
        """Walk back from the last victim added: spare any whose removal was not needed."""
        kept = list(victims)
        for victim in reversed(victims[:-1]):
            self._change(victim, -1)
            if self.fits():
                kept = [v for v in kept if v is not victim]
            else:
                self._change(victim, +1)
        return kept


class Given:
    """What a node has back in a trial (`placement.Extra`'s fields, which `capacity` reads),
    changed in place as jobs are taken away or put back: an `Extra` made per task changed cost
    ~0.7% of a forecast."""

    __slots__ = ("gpus", "cpus", "memory_gb")

    def __init__(self):
        self.gpus = self.cpus = self.memory_gb = 0


def _zone(slot: Slot) -> tuple[str, None]:
    return slot.node.zone, None


def _zone_and_rack(slot: Slot) -> tuple[str, str]:
    return slot.node.zone, slot.node.rack


def _group_of(topology: Topology):
    """What `Trial.fits` totals the rooms by: a zone, or a zone's rack for a gang that must
    share one (`placement._layout`: every other topology lays out any zone that holds it)."""
    return _zone_and_rack if topology == Topology.REQUIRE_SAME_RACK else _zone
