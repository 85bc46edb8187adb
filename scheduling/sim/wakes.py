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
        """Whether a pass could now evict the run (the gate knows; no gate: ask): else it would
        change nothing and spend the forecast's budget. Reclaim counts only where it too waits
        for a minimum run."""
        if self.gate is None:
            return True
        config = self.policy_config
        reclaim = config.reclaim and self.gate.reclaims and config.reclaim_min_runtime_s > 0
        return self.gate.may_evict_run(
            placement.resource_class, core.priority_rank(placement.priority), reclaim=reclaim
        )
