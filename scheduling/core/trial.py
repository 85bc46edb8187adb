"""What if some jobs were gone? The room on each node, kept current as jobs are taken away
one at a time: the machinery of both preemption (which victims?) and shadow starts
(when will it fit?)."""

from collections.abc import Mapping

from scheduling.core.model import PendingJob, RunningJob, Topology
from scheduling.core.placement import NOTHING, Extra, Room, capacity, plan_on
from scheduling.core.state import Slot


class Trial:
    """Victims removed one at a time from one domain, keeping each node's room current: only
    a victim's own nodes are recomputed, and the layout is planned only once the total room
    could hold the job."""

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
        self.extra: dict[str, Extra] = {}
        self.total = sum(rooms_now.values())
        # Tasks that fit per zone (per rack of a zone for a gang that must share a rack): the
        # job has a layout exactly when one of them holds all its tasks (see `fits`).
        self.group = _group_of(self.shape.topology)
        self.groups: dict[tuple[str, str | None], int] = {}
        if not one_domain:
            for slot, tasks in rooms_now.items():
                key = self.group(slot)
                self.groups[key] = self.groups.get(key, 0) + tasks

    def _slot(self, name: str) -> Slot | None:
        slot = self.names.get(name)
        if slot is None and name in self.joining and self.joining[name].ready and name not in self.closed:
            slot = self.names[name] = self.joining[name]
            self.rooms[slot] = room = capacity(slot, self.shape)
            self.total += room
            if not self.one_domain:
                key = self.group(slot)
                self.groups[key] = self.groups.get(key, 0) + room
        return slot

    def _change(self, victim: RunningJob, sign: int) -> None:
        extra, rooms, names = self.extra, self.rooms, self.names
        for task in victim.tasks:
            slot = names.get(task.node) or self._slot(task.node)  # most are in already
            if slot is None:
                continue
            was = extra.get(task.node, NOTHING)
            now = extra[task.node] = Extra(
                was.gpus + sign * len(task.gpu_indices),
                was.cpus + sign * task.cpus,
                was.memory_gb + sign * task.memory_gb,
            )
            tasks = max(capacity(slot, self.shape, extra=now), 0)  # below 0 while an occupant holds room
            change = tasks - rooms[slot]
            if change:
                self.total += change
                rooms[slot] = tasks
                if not self.one_domain:
                    self.groups[self.group(slot)] += change

    def take_room(self, occupant: RunningJob) -> None:
        """Hold the room `occupant` will use (a reservation: see `reservation.occupant`), until
        it is taken away like a running job."""
        self._change(occupant, -1)

    def fits(self) -> bool:
        """Whether `plan` would find a layout, without making one: `placement.plan_on` finds one
        exactly when a zone (for `REQUIRE_SAME_RACK`, a rack of a zone) holds all the tasks (each
        topology's layout then places them all), so the totals kept per zone say it. A shadow
        start checked ~8 layouts for the one it kept (`plan`, once the trial is done)."""
        tasks = self.shape.tasks
        if self.total < tasks:
            return False
        if self.one_domain:
            return True
        for total in self.groups.values():
            if total >= tasks:
                return True
        return False

    def plan(self):
        """The job's layout on the rooms as they stand (None: none)."""
        rooms = sorted((Room(s, n) for s, n in self.rooms.items() if n > 0), key=lambda r: r.slot.name)
        return plan_on(rooms, self.shape)

    def fit_by_removing(self, ordered: list[RunningJob], read=None) -> list[RunningJob] | None:
        """Remove candidates in order until the job fits; None if even all of them do not do.
        Once the total room would do, the layout is checked at growing steps (1, 2, 4, ...)
        and the exact count found by putting victims back, halving the step. Every step back
        that does not fit is undone, so the trial ends as it was at the last check that held:
        `plan()` then gives its layout.
        `read`: for a list read as it is needed (`victim_search.Domain.read`), called with how
        many candidates the next step needs (with `joining`, the nodes they run on)."""
        count, step = 0, 1
        while True:
            if read is not None:
                read(count + step)
            if count >= len(ordered):
                return None
            for victim in ordered[count : count + step]:
                self._change(victim, +1)
            count = min(count + step, len(ordered))
            if self.total < self.shape.tasks:
                continue
            if self.fits():
                return ordered[: self._shrink(ordered, count, step)]
            step *= 2

    def _shrink(self, ordered: list[RunningJob], count: int, step: int) -> int:
        """Fits with `count` removed but not with `count - step`: find the least that fits."""
        low = count - step + 1
        while low < count:
            middle = (low + count) // 2
            for victim in ordered[middle:count]:
                self._change(victim, -1)
            if self.fits():
                count = middle
            else:
                for victim in ordered[middle:count]:
                    self._change(victim, +1)
                low = middle + 1
        return count

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


def _zone(slot: Slot) -> tuple[str, None]:
    return slot.node.zone, None


def _zone_and_rack(slot: Slot) -> tuple[str, str]:
    return slot.node.zone, slot.node.rack


def _group_of(topology: Topology):
    """What `Trial.fits` totals the rooms by: a zone, or a zone's rack for a gang that must
    share one (`placement._layout`: every other topology lays out any zone that holds it)."""
    return _zone_and_rack if topology == Topology.REQUIRE_SAME_RACK else _zone
