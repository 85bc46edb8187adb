"""The simulator settles a run cut short as the leader does (core/settle.py): a preemption is
counted apart and spends nothing, a lost node spends a restart, and none left gives up."""

from scheduling.core.model import PolicyConfig
from scheduling.core.settle import RestartPolicy
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.metrics import summarize
from scheduling.sim.policies import make_policy
from scheduling.sim.trace import TraceJob, with_estimates

ONE_NODE = custom_fleet(1, 8, racks=1, zones=1)


def simulate(trace: list[TraceJob], **config):
    return Simulation(
        ONE_NODE,
        (),
        with_estimates(trace, "exact"),
        make_policy("mlqueue"),
        SimConfig(**{"checkpoint_interval_s": 300, "grace_s": 60, "tick_s": 0, **config}),
        PolicyConfig(explain=False, min_runtime_before_preempt_s=0),
    ).run()


def test_a_preempted_job_spends_no_restart_even_with_none_allowed():
    trace = [TraceJob(1, 0, 1000, 8, "a", priority="P3"), TraceJob(2, 700, 100, 8, "b", priority="P1")]
    sim = simulate(trace, restart_policy=RestartPolicy(max_restarts=0))
    low = sim.records[1]
    assert (low.preemptions, low.restarts_used, low.failed_at, low.end) == (1, 0, None, 860 + (1000 - 600))


def test_a_lost_node_spends_a_restart():
    # The one failure falls somewhere in the job's only run (the trace's whole horizon).
    sim = simulate([TraceJob(1, 0, 1000, 8, "a")], node_failures=1, failure_downtime_s=100)
    record = sim.records[1]
    assert (record.preemptions, record.restarts_used, record.failed_at) == (0, 1, None)
    assert record.end is not None


def test_with_no_restarts_left_the_job_gives_up():
    sim = simulate([TraceJob(1, 0, 1000, 8, "a")], node_failures=1, restart_policy=RestartPolicy(max_restarts=0))
    record = sim.records[1]
    assert (record.restarts_used, record.end) == (0, None)
    assert 0 < record.failed_at < 1000
    summary = summarize(sim, entitlements={})
    assert (summary["gave_up"], summary["finished"], summary["restarts"]) == (1, 0, 0)
