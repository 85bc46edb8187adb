"""Asking the policy when a running job becomes a victim it may take.

The simulator asks the policy when something happens (an arrival, an end, a tick). A forecast
has no ticks, so a preemption that waits only for its victims to run their minimum (the live
reason: "1 victim reachable at 14:05 after their 10-minute minimum") was never simulated: the
job's forecast start came at its victim's end, hours later. With `SimConfig.wake_when_victims_age`
each run started or resumed asks the policy again once it has run each minimum of the policy's
(the preemptors' classes', and reclaim's), if a pass could then evict it."""

from scheduling.core import model as core

AGED = "aged"


class VictimWakes:
    def _victim_ages(self) -> tuple[float, ...]:
        """The policy's positive minimum runtimes before preemption, each once."""
        if not (self.config.wake_when_victims_age and self.policy_config.preemption):
            return ()
        config = self.policy_config
        minimums = {config.min_runtime_for(priority) for priority in core.PRIORITIES}
        return tuple(sorted(m for m in {*minimums, config.reclaim_min_runtime_s} if m > 0))

    def _wake_when_aged(self, placement: core.RunningJob, started: float, token: int) -> None:
        if not placement.preemptible:
            return
        floor = max(self.now, self.started_at)  # a live run resumed at the start: only what is ahead
        for minimum in self.victim_ages:
            if started + minimum > floor:
                self._at(started + minimum, AGED, (placement.job_id, token))

    def _on_aged(self, payload: tuple[int, int]) -> None:
        job_id, token = payload
        run = self.running.get(job_id)
        if run is None or run.token != token or run.stopping:
            return
        self.matters = self.matters or self._could_be_evicted(run.placement)

    def _could_be_evicted(self, placement: core.RunningJob) -> bool:
        """Whether a waiting job outranks the run in its class, or (where reclaim waits for a
        minimum too) a waiting owner within its guarantee may reclaim there: else a pass would
        change nothing and spend the forecast's budget. What the gate knows; no gate: ask."""
        gate, rclass = self.gate, placement.resource_class
        if gate is None:
            return True
        ranks = gate.wait_ranks.get(rclass)
        if ranks and min(ranks) < core.priority_rank(placement.priority):
            return True
        if not (self.policy_config.reclaim and self.policy_config.reclaim_min_runtime_s > 0):
            return False
        return any(
            where == rclass and sizes and gate.ledger.within_guarantee(team, where, min(sizes))
            for (team, where), sizes in gate.job_units.items()
        )
