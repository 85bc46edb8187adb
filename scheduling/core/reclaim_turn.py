"""Reclaim in turn (part of `scheduler.Pass`; `PolicyConfig.reclaim_in_turn`, docs/reclaim.md).

An owner within its guarantee reclaims only while no job before it in the pass's order, in its
class, waits for room it could use: otherwise the next pass would give that job the room the
victims free, and the owner would evict again, pass after pass. With
`reclaim_in_turn_backlog` the rule (and the nomination of reclaimers) holds only in classes
whose waiting jobs ask enough, with hysteresis through the snapshot's `reclaim_turn`.
"""

from collections import defaultdict

from scheduling.core.model import PendingJob


class ReclaimTurn:
    """`Pass`'s reclaim-in-turn rule, read off the jobs it left blocked so far (`least_blocked`,
    see `Pass._block`) and its candidates (see `Pass.run`)."""

    def _start_turns(self) -> None:
        # Per class, the job left blocked so far in the pass that asks the fewest units.
        self.least_blocked: dict[str, PendingJob] = {}
        self.deep: frozenset[str] | None = None  # see `_deep_classes`

    def _turn(self, rclass: str) -> int | None:
        """What `_reclaim_waits_turn` reads besides the job: the blocked job it would name."""
        least = self.least_blocked.get(rclass) if self._in_turn(rclass) else None
        return None if least is None else least.job_id

    def _reclaim_waits_turn(self, job: PendingJob) -> PendingJob | None:
        """With `reclaim_in_turn`, the job before `job` in this pass's order that was left
        waiting for room `job` would free by reclaiming (it asks no more units): the next pass
        would give it that room before `job`, which would then evict again. None: `job` may
        reclaim. Only ever more jobs are blocked within a pass, so a refusal stays one."""
        if not self._in_turn(job.resource_class):
            return None
        least = self.least_blocked.get(job.resource_class)
        return least if least is not None and least.shape.units <= job.shape.units else None

    def _in_turn(self, rclass: str) -> bool:
        """Whether `reclaim_in_turn` holds in `rclass` this pass (see `_deep_backlog`)."""
        return self.config.reclaim_in_turn and self._deep_backlog(rclass)

    def _deep_backlog(self, rclass: str) -> bool:
        """Whether reclaim in turn and the nomination of reclaimers hold in `rclass` this pass,
        as configured: always, or with `reclaim_in_turn_backlog`, where `_deep_classes` says."""
        return self.deep is None or rclass in self.deep

    def _deep_classes(self) -> frozenset[str]:
        """The classes whose waiting jobs (see `_backlog`) ask at least `reclaim_in_turn_backlog`
        times the class's capacity, or, where the gate held last pass (the snapshot's
        `reclaim_turn`), at least `reclaim_in_turn_backlog_off` times: a rule that turned on
        stays on until the backlog has drained well below where it turned on."""
        backlog, capacity = self._backlog(), self.state.fleet.capacity
        held = self.snap.reclaim_turn or frozenset()
        on = self.config.reclaim_in_turn_backlog
        off = self.config.reclaim_in_turn_backlog_off
        off = on if off is None else off
        return frozenset(
            rclass
            for rclass in capacity.keys() | backlog.keys()
            if backlog.get(rclass, 0) >= (off if rclass in held else on) * capacity.get(rclass, 0)
        )

    def _backlog(self) -> dict[str, int]:
        """Per class, the units the jobs past screening ask (held jobs, jobs waiting on
        others or in back-off cannot start, so they make no backlog). Read off the snapshot,
        so `schedule()` and a kept `Scheduler` given the same `reclaim_turn` agree."""
        backlog: dict[str, int] = defaultdict(int)
        for job in self.candidates:
            shape = job.shape
            backlog[shape.resource_class] += shape.units
        return backlog

    def _may_lower_turn(self, rclass: str, units: int) -> bool:
        """Whether a job asking `units`, left blocked, would change what `_reclaim_waits_turn`
        answers: it asks fewer units than every job blocked so far in its class."""
        if not self._in_turn(rclass):
            return False
        least = self.least_blocked.get(rclass)
        return least is None or units < least.shape.units
