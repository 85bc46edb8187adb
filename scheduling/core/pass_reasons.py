"""Why each job left waiting waits, worded against the pass's final state (part of
`scheduler.Pass`, its step 5): computed once per team, shape and reason."""

from collections import defaultdict

from scheduling.core import explain
from scheduling.core.decisions import Reservation
from scheduling.core.model import MaintenanceWindow, PendingJob
from scheduling.core.reasons import PendingReason, ReasonCode


class PassReasons:
    """`Pass`'s explanations of the jobs it left blocked, read off the pass's own state (see
    `Pass.__init__`) and asked through its placement checks (`_plan`, `_fits_unlimited`)."""

    def _explain_blocked(self) -> None:
        """Against the pass's final state, a job without a reservation of its own gets what
        any job of its team and shape left with the same reason so far gets: computed once
        per team, shape and reason."""
        self.placed_on: dict[str, int] | None = None  # see `_taken_from`
        self.taken_on: dict[int, int] = {}  # id of a `matching` list -> units placed on its nodes
        explainer = self.explainer
        if explainer is None or explainer.state is not self.state:
            explainer = self.explainer = explain.CapacityExplainer(self.state, self.snap.nodes)
        reserved: dict[int, Reservation] = {r.job_id: r for r in self.book.reservations}
        by_kind: dict[tuple, PendingReason] = {}
        kinds, pending = self.kinds, self.pending
        for job_id, job in self.blocked.items():
            kind = kinds.get(job_id)
            if kind is None or job_id in reserved:
                pending[job_id] = self._why_blocked(job, reserved.get(job_id), explainer)
                continue
            # The team and shape (the priority plays no part), which windows it would run into,
            # and for a job that runs into one its time limit (the reason names it).
            windows = self.windows.variant(self.now + job.max_runtime_s)
            limit = None if all(windows) else job.max_runtime_s
            key = (kind[0], kind[2], pending.get(job_id), windows, limit)
            reason = by_kind.get(key)
            if reason is None:
                reason = by_kind[key] = self._why_blocked(job, None, explainer)
            pending[job_id] = reason

    def _why_blocked(self, job: PendingJob, reservation: Reservation | None, explainer) -> PendingReason:
        """In order: it would fit but for the room held for a preemptor, or for a reservation;
        others took the room this pass; its team is already at its guarantee with less idle
        than it needs to borrow; or the capacity story with the histogram (also for a team past
        its guarantee when as much is idle as it needs, but not in a shape it can use)."""
        waiting = self.pending.get(job.job_id)
        if waiting is not None and waiting.code == ReasonCode.PREEMPTION_PENDING:
            return explain.with_reservation(waiting, reservation, self.now)
        rclass = job.resource_class
        window = self._window_in_the_way(job)
        if window is not None:
            return explain.with_reservation(explain.maintenance(job, window, self.now), reservation, self.now)
        held_for = self._held_for_preemptors(job)
        if held_for is not None and self._fits_unlimited(job.shape):
            return explain.with_reservation(held_for, reservation, self.now)
        held = [r for r in self.book.by_class.get(rclass, ()) if r.job_id != job.job_id]
        if held and self._fits_unlimited(job.shape):
            return explain.behind_reservation(job, self._in_the_way(job, held), len(held), self.now)
        if reservation is None and self.placed_units[rclass]:
            taken = self._taken_from(job, explainer)
            if taken:
                return explain.behind_others(job, taken)
        used, guaranteed = self.ledger.usage[job.team][rclass], self.ledger.guaranteed(job.team, rclass)
        spec = self.ledger.teams.get(job.team)
        free = self.state.free_units.get(rclass, 0)
        if spec and spec.quota(rclass) and used >= guaranteed and free < job.shape.units:
            reason = explain.nothing_to_borrow(job, used, guaranteed, free)
        else:
            reason = explainer.explain(job)
        return explain.with_reservation(reason, reservation, self.now)

    def _taken_from(self, job: PendingJob, explainer) -> int:
        """The units this pass's placements took on the nodes that could take `job` (its
        labels, scratch disk and size: `CapacityExplainer.matching`), if with the room still
        free there they would have held it (0 otherwise). Summed once per list of matching
        nodes (the explainer keeps each list while the state stays as it is, and nothing is
        placed once explaining starts): a cold seed-2500 pass asks ~200 times, of ~10 lists."""
        matching, free, _ = explainer.matching(job.shape)
        taken = self.taken_on.get(id(matching))
        if taken is None:
            if self.placed_on is None:
                placed_on: dict[str, int] = defaultdict(int)
                for placement in self.placements:
                    for task in placement.tasks:
                        placed_on[task.node] += len(task.gpu_indices) or task.cpus
                self.placed_on = placed_on
            names = {slot.name for slot in matching}
            taken = self.taken_on[id(matching)] = sum(units for node, units in self.placed_on.items() if node in names)
        return taken if free + taken >= job.shape.units else 0

    def _in_the_way(self, job: PendingJob, held: list[Reservation]) -> Reservation:
        """Of the class's reservations, the one `job` would delay: the first to start of those
        on the nodes it would take were there no holds (any, if the plan took none of theirs)."""
        chosen = self._plan(job, None, ("free",))
        nodes = {slot.name for slot, _ in chosen} if chosen is not None else set()
        on_them = [r for r in held if nodes.intersection(r.nodes)] or held
        return min(on_them, key=lambda r: (r.start_at, r.job_id))

    def _window_in_the_way(self, job: PendingJob) -> MaintenanceWindow | None:
        """The window that keeps `job` off room it would fit in now (None: no window does):
        the earliest one on the nodes it would take were there no windows and no holds."""
        if not self._closed(job):
            return None
        chosen = self._plan(job, None, ("free",))
        if chosen is None:
            return None
        return self.windows.first_on((slot.name for slot, _ in chosen), self.now + job.max_runtime_s)

    def _preemptors(self, rclass: str) -> list[int]:
        """Jobs holding nodes in `rclass` since the pass began (their victims are still stopping,
        or have just stopped: see `_hold_nominated`), by id: sorted once per class and pass
        (there is one per preemption in flight)."""
        found = self.preemptors.get(rclass)
        if found is None:
            found = self.preemptors[rclass] = sorted(p for p, held_in in self.holders.items() if held_in == rclass)
        return found

    def _held_for_preemptors(self, job: PendingJob) -> PendingReason | None:
        """The reason naming the other jobs whose victims in its class are stopping (None if
        there are none): the same for every job but those, so worded once per class and pass
        (it lists every preemption in flight)."""
        preemptors = self._preemptors(job.resource_class)
        if job.job_id in self.holders:
            others = [p for p in preemptors if p != job.job_id]
            return explain.held_for_preemptors(job, others) if others else None
        if not preemptors:
            return None
        found = self.preemptors_reason.get(job.resource_class)
        if found is None:
            found = self.preemptors_reason[job.resource_class] = explain.held_for_preemptors(job, preemptors)
        return found
