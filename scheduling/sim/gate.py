"""Whether asking the policy at an instant could change anything.

A pass of the core decides something only where:
1. a task of a waiting job fits the free room of one ready node of its class (units: GPUs,
   or CPUs for a CPU class), or
2. a waiting job may evict (scheduler.py, `Pass._preempt_for`): its team stays within its
   guarantee with it (a reclaim, where the policy reclaims: `PolicyConfig.reclaim`), or it
   outranks a preemptible job running in its class.
Where neither holds for any waiting job, the pass places nothing and evicts nothing, so the
simulator need not ask: the same schedule, without the pass. Held jobs are never decided on;
every other waiting job counts, even one the core will screen out (a dependency, a back-off),
so the gate only ever errs towards asking.

Kept up to date as jobs come and go (`Watched` dicts) and nodes fail, so the question costs
a few dictionary reads, not a scan of the queue: a deep queue on a full cluster is the
common case where most instants (arrivals, ticks) can change nothing.
"""

from collections import Counter, defaultdict
from collections.abc import Callable

from scheduling.core.fairshare import Ledger
from scheduling.core.model import CPU_CLASS, JobShape, Node, NodeState, RunningJob, Team, priority_rank


class DecisionGate:
    def __init__(self, nodes, teams: tuple[Team, ...], *, preempts: bool, reclaims: bool = True):
        self.preempts = preempts
        self.reclaims = reclaims  # False: a team within its guarantee only outranks (PolicyConfig.reclaim)
        self.ledger = Ledger.build(teams, (), {})  # units held per team (and ancestors), per class
        self.held: dict[str, int] = defaultdict(int)  # units held per class, by every running job
        self.node_class = {node.name: node.resource_class for node in nodes}
        self.capacity = {node.name: _units(node) for node in nodes}
        self.ready = {node.name: node.state == NodeState.READY for node in nodes}
        self.used: dict[str, int] = defaultdict(int)  # per node, in the node's own units
        # Class -> free units -> ready nodes; counted on the first question (`_levels`), once
        # the jobs running at the start are in (a forecast's 32,768 tasks at seed-2500).
        self.free_nodes: dict[str, Counter] | None = None
        self.victim_ranks: dict[str, Counter] = defaultdict(Counter)  # class -> rank -> preemptible runs
        self.ranked: dict[int, tuple[str, int]] = {}  # job id -> its entry in victim_ranks
        # Waiting jobs that are not held: per class, units per task and ranks; per (team, class), units.
        self.task_units: dict[str, Counter] = defaultdict(Counter)
        self.wait_ranks: dict[str, Counter] = defaultdict(Counter)
        self.job_units: dict[tuple[str, str], Counter] = defaultdict(Counter)
        self.waiting: dict[int, tuple[str, int, str, int, int]] = {}

    def may_decide(self) -> bool:
        for rclass, sizes in self.task_units.items():
            if sizes and min(sizes) <= self.most_free(rclass):
                return True
        if not self.preempts:
            return False
        for (team, rclass), sizes in self.job_units.items() if self.reclaims else ():
            if sizes and self.ledger.within_guarantee(team, rclass, min(sizes)):
                return True
        for rclass, ranks in self.wait_ranks.items():
            victims = self.victim_ranks.get(rclass)
            if ranks and victims and min(ranks) < max(victims):
                return True
        return False

    def may_evict_run(self, rclass: str, rank: int, *, reclaim: bool) -> bool:
        """Whether a waiting job could evict a run of `rank` in `rclass` (once it is old enough):
        one outranks it, or (`reclaim`) a team's waiting job there is within its guarantee."""
        ranks = self.wait_ranks.get(rclass)
        if ranks and min(ranks) < rank:
            return True
        return reclaim and any(
            where == rclass and sizes and self.ledger.within_guarantee(team, where, min(sizes))
            for (team, where), sizes in self.job_units.items()
        )

    def most_free(self, rclass: str) -> int:
        levels = self._levels().get(rclass)
        return max(levels) if levels else 0

    def _levels(self) -> dict[str, Counter]:
        if self.free_nodes is None:
            self.free_nodes = defaultdict(Counter)
            for name, ready in self.ready.items():
                if ready:
                    _count(self.free_nodes[self.node_class[name]], self.capacity[name] - self.used[name], 1)
        return self.free_nodes

    # --- waiting jobs ---------------------------------------------------------------------
    def waits(self, job_id: int, shape: JobShape, team: str, priority: str, held: bool) -> None:
        if held:
            return
        entry = self.waiting[job_id] = (
            shape.resource_class,
            shape.units_per_task,
            team,
            shape.units,
            priority_rank(priority),
        )
        rclass, per_task, _, units, rank = entry
        _count(self.task_units[rclass], per_task, 1)
        _count(self.wait_ranks[rclass], rank, 1)
        _count(self.job_units[(team, rclass)], units, 1)

    def leaves(self, job_id: int) -> None:
        entry = self.waiting.pop(job_id, None)
        if entry is not None:
            rclass, per_task, team, units, rank = entry
            _count(self.task_units[rclass], per_task, -1)
            _count(self.wait_ranks[rclass], rank, -1)
            _count(self.job_units[(team, rclass)], units, -1)

    # --- running jobs and nodes -----------------------------------------------------------
    def runs(self, job: RunningJob) -> None:
        self._hold(job, 1)
        if job.preemptible and not job.preempting and job.priority != "P0":
            self.ranked[job.job_id] = (job.resource_class, priority_rank(job.priority))
            _count(self.victim_ranks[job.resource_class], priority_rank(job.priority), 1)

    def stopping(self, job_id: int) -> None:
        """A run being preempted is no one's victim any more; it holds its room until it stops."""
        entry = self.ranked.pop(job_id, None)
        if entry is not None:
            _count(self.victim_ranks[entry[0]], entry[1], -1)

    def ends(self, job: RunningJob) -> None:
        self.stopping(job.job_id)
        self._hold(job, -1)

    def _hold(self, job: RunningJob, sign: int) -> None:
        """`_update` for each of the job's tasks, inline (before the first question, the use
        alone: see `free_nodes`): a forecast starts from every running job's tasks (seed-2500:
        32,768), and follows each start and end."""
        self.ledger.add(job.team, job.resource_class, sign * job.units)
        self.held[job.resource_class] += sign * job.units
        node_class, capacity, used, ready, free_nodes = (
            self.node_class,
            self.capacity,
            self.used,
            self.ready,
            self.free_nodes,
        )
        for task in job.tasks:
            name = task.node
            rclass = node_class[name]
            units = sign * (task.cpus if rclass == CPU_CLASS else len(task.gpu_indices))
            was = used[name]
            used[name] = was + units
            if free_nodes is not None and ready[name]:  # `_count` twice, inline
                levels, free = free_nodes[rclass], capacity[name] - was
                left = levels[free] - 1
                if left:
                    levels[free] = left
                else:
                    del levels[free]
                levels[free - units] += 1  # a count of nodes: one more is never zero

    def node_ready(self, name: str, ready: bool) -> None:
        self._update(name, ready=ready)

    def _update(self, name: str, *, used: int = 0, ready: bool | None = None) -> None:
        """Change a node's use or readiness, keeping the count of ready nodes by free units."""
        levels = self.free_nodes[self.node_class[name]] if self.free_nodes is not None else None
        if levels is not None and self.ready[name]:
            _count(levels, self.capacity[name] - self.used[name], -1)
        self.used[name] += used
        if ready is not None:
            self.ready[name] = ready
        if levels is not None and self.ready[name]:
            _count(levels, self.capacity[name] - self.used[name], 1)


class Watched(dict):
    """A dict that reports each value as it is put in (`added`) and taken out (`removed`):
    the gate follows the simulator's waiting and running jobs wherever they change."""

    def __init__(self, added: Callable, removed: Callable):
        super().__init__()
        self.added, self.removed = added, removed

    def __setitem__(self, key, value):
        if key in self:
            self.removed(key, dict.__getitem__(self, key))
        super().__setitem__(key, value)
        self.added(key, value)

    def __delitem__(self, key):
        value = dict.__getitem__(self, key)
        super().__delitem__(key)
        self.removed(key, value)

    def pop(self, key, *default):
        if key not in self:
            return super().pop(key, *default)
        value = super().pop(key)
        self.removed(key, value)
        return value

    def _unsupported(self, *args, **kwargs):
        raise TypeError("a Watched dict changes only by [key] = value, del and pop")

    clear = popitem = setdefault = update = __ior__ = _unsupported


def _units(node: Node) -> int:
    return node.gpus if node.gpu_type else node.cpus


def _count(counter: Counter, key: int, delta: int) -> None:
    """Add `delta` to `counter[key]`, dropping keys that reach zero (min and max read keys)."""
    value = counter[key] + delta
    if value:
        counter[key] = value
    else:
        del counter[key]
