"""What makes the forecast cheaper: the simulated passes keep a `Scheduler` between them
(exactly the decisions of a fresh `schedule()` each pass), and a forecast's passes bound
their reclaim victim searches (the live pass's default stays unbounded)."""

import pytest

from scheduling.core.model import PolicyConfig, Quota, Team
from scheduling.core.scheduler import schedule
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.forecast import RECLAIM_SEARCHES, forecast
from scheduling.sim.policies import MlqueuePolicy
from scheduling.sim.trace import TraceJob
from tests.unit.core.builders import NOW, cluster, job, rack, running, snapshot
from tests.unit.sim.test_quiet_instants import live_state, outcome, replay


class FreshPassPolicy(MlqueuePolicy):
    """The reference: the core's pure pass on each snapshot, nothing kept between passes."""

    def decide(self, snapshot, moved=None):
        return schedule(snapshot)


@pytest.mark.parametrize("seed", range(4))
def test_a_replay_with_the_kept_scheduler_is_the_one_with_fresh_passes(seed, monkeypatch):
    kept = replay("mlqueue", seed, skip=True, failures=seed % 2)
    monkeypatch.setattr("scheduling.sim.policies.MlqueuePolicy.decide", FreshPassPolicy.decide)
    assert outcome(replay("mlqueue", seed, skip=True, failures=seed % 2)) == outcome(kept)


@pytest.mark.parametrize("seed", range(4))
def test_a_forecast_run_with_the_kept_scheduler_is_the_one_with_fresh_passes(seed):
    nodes, busy, pending, rng = live_state(seed)
    ends = tuple((run, NOW + rng.uniform(0.1, 1.0) * (run.expected_end - NOW)) for run in busy)
    jobs = [
        TraceJob(
            p.job_id,
            max(NOW, p.not_before or NOW),
            p.max_runtime_s * rng.uniform(0.2, 1.0),
            p.shape.units,
            p.team,
            p.shape.gpu_type,
            p.priority,
            p.max_runtime_s,
            view=p,
        )
        for p in pending
    ]
    config = SimConfig(
        checkpoint_interval_s=0, grace_s=120, tick_s=0, sample_s=0, decision_step_s=60, step_growth=1 / 60
    )
    runs = [
        Simulation(list(nodes), (), jobs, policy, config, PolicyConfig(explain=False), running_at_start=ends).run()
        for policy in (MlqueuePolicy(), FreshPassPolicy())
    ]
    assert outcome(runs[0]) == outcome(runs[1])
    assert runs[0].decisions == runs[1].decisions > 0


TEAMS = (Team("a", None, {"gpu:H100": Quota(16, 16)}), Team("b", None, {"gpu:H100": Quota(0, 0)}))


def borrowed_cluster(**config):
    """Team b runs on both nodes though it may not borrow (so its evicted jobs wait for
    good); team a, owed 16 GPUs, waits with two 8-GPU jobs: each starts only by reclaiming
    one of b's."""
    nodes = cluster(rack("z1-r1", 2))
    busy = [running(1, ["z1-r1-n1"], team="b"), running(2, ["z1-r1-n2"], team="b")]
    return snapshot(
        nodes, pending=[job(3, team="a"), job(4, team="a", age=30)], running_jobs=busy, team_list=TEAMS, **config
    )


# Passes every 120 s, the grace period: a start is rounded up to the pass after its victims
# stop, so the figures below count grace periods, whatever the forecast's default step.
GRACE_STEP = {"step_s": 120.0, "step_growth": 0.0}


def test_a_forecast_reclaims_for_one_job_a_pass_when_its_passes_may_search_once():
    # Unbounded: one pass evicts for both; the victims stop after the 120 s grace period.
    assert forecast(borrowed_cluster(), reclaim_searches=None, **GRACE_STEP).latest == {3: NOW + 120, 4: NOW + 120}
    # One search a pass: job 4 searches in the pass at NOW + 120 and starts after its own grace.
    assert forecast(borrowed_cluster(), reclaim_searches=1, **GRACE_STEP).latest == {3: NOW + 120, 4: NOW + 240}


def test_a_forecast_keeps_a_tighter_bound_the_cluster_is_configured_with():
    assert RECLAIM_SEARCHES > 1
    assert forecast(borrowed_cluster(max_reclaim_searches=1), **GRACE_STEP).latest == {3: NOW + 120, 4: NOW + 240}
    assert forecast(borrowed_cluster(), **GRACE_STEP).latest == {3: NOW + 120, 4: NOW + 120}
