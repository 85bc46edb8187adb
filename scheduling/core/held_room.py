"""The room a pass holds for preemptors (part of `scheduler.Pass`).

A job that evicted victims waits for them to stop, and the room they give back, with any free
room its start counts on, is held for it alone: nobody takes it while they stop (its own
requeued victims least of all), so it need not evict again. A kept `Scheduler` remembers each
such hold from pass to pass and works it out again only when what its shadow start reads has
changed (`_nodes_to_hold`).
"""

from typing import NamedTuple

from scheduling.core.model import PendingJob, RunningJob
from scheduling.core.reservation import room_now, rooms_now, shadow_start
from scheduling.core.state import Slot


class KeptHold(NamedTuple):
    """What `HeldRoom._nodes_to_hold` keeps of a preemptor in flight from pass to pass."""

    key: tuple  # the state, the job's shape, its victims and the nodes closed to it
    count: int  # the class's count of changes when last checked (ClusterState.changes)
    nodes: list[str]  # what it holds beyond its victims' nodes
    rooms: dict[str, int]  # the tasks of it each node with room held then (`rooms_now`)
    theirs: set[str]  # its victims' nodes


class HeldRoom:
    """`Pass`'s holds for preemptors, kept in its book (`ReservationBook.hold`) and read off
    its own state (see `Pass.__init__`)."""

    def _start_holds(self, holds: dict | None) -> None:
        """The nodes of each preemptor's victims, held for it while they stop; `holds`: the
        holds kept from earlier passes (see `_nodes_to_hold`)."""
        self.holds: dict[int, KeptHold] = holds if holds is not None else {}
        for job_id, victims in self.stopping_for.items():
            for node in {t.node for victim in victims for t in victim.tasks}:
                self.book.hold(node, job_id, self.now)
        # Jobs with nodes held for them alone (see `_hold_nominated`), by class, and the
        # nominations that stand after the pass (`Decisions.nominations`).
        self.holders: dict[int, str] = {p: victims[0].resource_class for p, victims in self.stopping_for.items()}
        self.nominations: dict[int, tuple[str, ...]] = {}

    def _hold_nominated(self, candidates: list[PendingJob]) -> None:
        """Hold for each job whose victims have stopped the nodes it was nominated to when it
        evicted, for this one pass: whatever goes before it in the queue (a job waiting past
        the bound, a team now lower in share) must not take the room it freed, or it evicts
        again for them, over and over. It starts there in its turn, or its nomination lapses.
        Preemptors still in flight hold their victims' nodes already (see `__init__`)."""
        for job in candidates:
            if job.nominated and job.job_id not in self.stopping_for:
                self._hold(job, job.nominated, first=True)
                if any(self.book.holder(node) == job.job_id for node in job.nominated):
                    self.holders[job.job_id] = job.resource_class

    def _hold_room(self, job: PendingJob, stopping: list[RunningJob], *, nominate: bool) -> None:
        """Hold, for `job` alone, every node it will start on once `stopping` (its victims)
        are gone: free room it counts on as well as theirs, so nobody (its own requeued victims
        least of all) takes that room while they stop, and it need not evict again.
        A hold leaves the class's generation as it is (see `_decide`): it only takes room from
        jobs placed after it, and nothing else a decision reads (the free-room index that
        victim searches and shadow starts read, the ledger, the reservations) changes with it, so
        a job that neither started, evicted nor reserved before it would not after it.
        `nominate`: keep them for it until the pass after its victims have stopped (see
        `_hold_nominated`)."""
        nodes = self._start_nodes(job, stopping)
        self._hold(job, nodes)
        if nominate:
            self.nominations[job.job_id] = tuple(nodes)

    def _start_nodes(
        self, job: PendingJob, stopping: list[RunningJob], rooms: dict[Slot, int] | None = None
    ) -> list[str]:
        """The nodes `job` will start on once `stopping` are gone (none if it never fits).
        `rooms`: `rooms_now` for it, if the caller has it already."""
        closed = self._closed(job)
        found = shadow_start(self.state, job, stopping, self.now, ending=stopping, closed=closed, rooms=rooms)
        return [slot.name for slot, _ in found[1]] if found else []

    def _hold(self, job: PendingJob, nodes, *, first: bool = False) -> None:
        """Hold `nodes` for `job`, but none another job holds or has reserved: its shadow
        start does not see those, and holding them too would only keep backfill off them."""
        for node in nodes:
            if not self.book.held.get(node):
                self.book.hold(node, job.job_id, self.now, first=first)

    def _nodes_to_hold(self, job: PendingJob, stopping: list[RunningJob]) -> list[str]:
        """The nodes `_hold_room` holds for a preemptor in flight (none to add without room
        beyond its victims' nodes). It is asked every pass until they have stopped, and its
        shadow start reads only the room on the nodes with room for a task, its victims' nodes,
        its shape and the nodes closed to it: worked out again only when one of those changed,
        not whenever anything in its class did (a placement elsewhere, say)."""
        rclass, state = job.resource_class, self.state
        key = (state, job.shape, tuple(stopping), self._closed(job))
        count = state.changes[rclass]
        kept = self.holds.get(job.job_id)
        if kept is None or kept.key != key or (kept.count != count and not self._same_room(job, kept)):
            kept = self.holds[job.job_id] = self._work_out_hold(job, stopping, key, count)
        elif kept.count != count:
            kept = self.holds[job.job_id] = kept._replace(count=count)
        return kept.nodes

    def _work_out_hold(self, job: PendingJob, stopping: list[RunningJob], key: tuple, count: int) -> KeptHold:
        found = rooms_now(self.state, job)
        theirs = {task.node for victim in stopping for task in victim.tasks}
        nodes = self._start_nodes(job, stopping, found) if self._room_beyond(found, theirs | key[3]) else []
        return KeptHold(key, count, nodes, {slot.name: tasks for slot, tasks in found.items()}, theirs)

    def _same_room(self, job: PendingJob, kept: KeptHold) -> bool:
        """Whether every node of the class that changed since `kept` was checked gives `job`
        the room it gave then, and none is a victim's node: the shadow start is then the same."""
        changed = self.state.changed_since(job.resource_class, kept.count)
        if changed is None:
            return False
        slots = self.state.slots_named(job.resource_class)
        return not any(
            name in kept.theirs or room_now(slots[name], job) != kept.rooms.get(name, 0) for name in set(changed)
        )

    def _room_beyond(self, rooms: dict, theirs: set[str]) -> bool:
        """Whether the job has room for a task on a node none of its victims runs on (nor
        closed to it). If not, it will start on their nodes alone, which the pass has held
        for it from the start: a shadow start would hold nothing more, and one per
        preemption in flight is what a pass would spend most on."""
        return any(slot.name not in theirs for slot in rooms)
