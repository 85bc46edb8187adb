"""A forecast goes on from where the live scheduler left the backlog gate (`reclaim_turn`):
its first simulated pass decides as the live pass would on the same snapshot."""

from dataclasses import replace

from scheduling.core.scheduler import schedule
from scheduling.sim.policies import MlqueuePolicy
from tests.unit.core.test_reclaim_in_turn import H100, gated


def test_the_simulated_policy_starts_from_the_gate_it_is_given():
    # 9 of 16 H100 asked: below the gate (1 x 16), above its hysteresis (0.5 x 16).
    state = gated()
    held = MlqueuePolicy(reclaim_turn=frozenset({H100})).decide(state)
    assert held.preemptions == ()
    assert held.preemptions == schedule(replace(state, reclaim_turn=frozenset({H100}))).preemptions
    assert len(MlqueuePolicy().decide(state).preemptions) == 8
