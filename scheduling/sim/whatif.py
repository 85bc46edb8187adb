"""What if a team's quota were different? The same trace replayed under two team trees.

Pure, like the core: the caller gives the fleet, the current and the proposed teams, the jobs
(the cluster's own history, scheduling/sim/history.py) and a `progress` callback, which may
raise to stop the replay (the Celery task's time limit). The policy is mlqueue's as the
cluster configures it.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import PolicyConfig, Quota, Team
from scheduling.sim.engine import SimConfig, Simulation
from scheduling.sim.metrics import by_team, summarize
from scheduling.sim.policies import MlqueuePolicy
from scheduling.sim.trace import TraceJob, trace_groups, with_estimates

# A replay ends this long after the last arrival, finished or not: a job that no team limit
# lets run under a tree (a smaller borrowing limit than it needs) stays unfinished, counted.
AFTER_LAST_ARRIVAL_S = 7 * 86400.0
# Figures of the whole cluster shown beside the teams'.
CLUSTER_FIGURES = (
    "jobs",
    "finished",
    "unfinished",
    "avg_wait_s",
    "p95_wait_s",
    "avg_jct_s",
    "utilization",
    "gpu_hours_lost",
)


@dataclass(frozen=True)
class Comparison:
    current: dict  # {"cluster": {...}, "teams": {team: {...}}}
    proposed: dict
    refused: int  # jobs no node of today's fleet could ever hold


def with_quota(teams: tuple[Team, ...], *, team: str, rclass: str, quota: Quota) -> tuple[Team, ...]:
    """The tree with one team's quota in one class replaced (added, if it had none)."""
    return tuple(replace(t, quotas={**t.quotas, rclass: quota}) if t.name == team else t for t in teams)


def compare(
    nodes: list,
    current: tuple[Team, ...],
    proposed: tuple[Team, ...],
    jobs: list[TraceJob],
    *,
    policy: PolicyConfig,
    progress: Callable[[float], None] = lambda fraction: None,
) -> Comparison:
    """Replay `jobs` under each tree; `progress` hears 0..1 over both replays."""
    gpu_types = sorted({n.gpu_type for n in nodes if n.gpu_type})
    first, last = min((j.submit for j in jobs), default=0.0), max((j.submit for j in jobs), default=0.0)
    config = SimConfig(gpu_type=gpu_types[0] if gpu_types else "H100", horizon_s=last - first + AFTER_LAST_ARRIVAL_S)
    kept = [job for job in with_estimates(jobs, "x2") if can_ever_run(job.shape(config.gpu_type), nodes).ok]
    figures = []
    for index, teams in enumerate((current, proposed)):
        figures.append(replay(nodes, teams, kept, config=config, policy=policy, progress=_half(progress, index)))
    progress(1.0)
    return Comparison(figures[0], figures[1], len(jobs) - len(kept))


def replay(nodes: list, teams: tuple[Team, ...], jobs: list[TraceJob], *, config: SimConfig, policy, progress) -> dict:
    """One replay: the cluster's figures and each team's."""
    last = max((job.submit for job in jobs), default=0.0)
    watched = Watched(MlqueuePolicy(), progress, last)
    sim = Simulation(nodes, teams, jobs, watched, config, replace(policy, explain=False), groups=trace_groups(jobs))
    sim.run()
    cluster = summarize(sim, entitlements={})
    figures = {key: cluster[key] for key in CLUSTER_FIGURES}
    return {"cluster": figures, "teams": by_team(sim)}


class Watched:
    """The policy, telling `progress` how far through the arrivals each pass is."""

    def __init__(self, policy, progress: Callable[[float], None], last_arrival: float):
        self.policy, self.progress, self.last_arrival = policy, progress, last_arrival

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def decide(self, snapshot, moved=None):
        self.progress(min(0.99, snapshot.now / self.last_arrival) if self.last_arrival else 0.99)
        return self.policy.decide(snapshot, moved=moved)


def _half(progress: Callable[[float], None], index: int) -> Callable[[float], None]:
    return lambda fraction: progress((index + fraction) / 2)
