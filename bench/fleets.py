"""Deterministic fleets, team trees and workloads for benchmarking the scheduling core.

Every draw comes from a seeded random.Random, so a benchmark is repeatable: the same seed
gives the same nodes, the same running allocations and the same queue, and a change in the
figures is a change in the scheduler, not in its input. Pure Python, like the core: no Django.
"""

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import count

from scheduling.core.model import (
    HOUR,
    PRIORITIES,
    JobShape,
    Node,
    NodeState,
    PendingJob,
    Quota,
    RunningJob,
    TaskPlacement,
    Team,
    Topology,
)
from scheduling.sim.fleets import FLEETS, apportion, build_fleet, custom_fleet  # noqa: F401  (re-exported)

# (division, share of every resource class, its teams' shares of the division's guarantee)
DIVISIONS = (("research", 0.4, (0.5, 0.3, 0.2)), ("production", 0.6, (0.4, 0.35, 0.25)))

PRIORITY_WEIGHTS = (2, 15, 68, 15)  # P0..P3: mostly P2, a few P0
RUNTIMES_S = (600, 1800, HOUR, 4 * HOUR, 12 * HOUR, 24 * HOUR, 72 * HOUR, 168 * HOUR)
RUNTIME_WEIGHTS = (10, 15, 20, 20, 12, 10, 8, 5)
SINGLE_GPUS = (1, 2, 4, 8)
SINGLE_WEIGHTS = (30, 20, 20, 30)
GANG_TASKS = (2, 4, 8, 16)  # 16-128 GPUs on 8-GPU hosts
TOPOLOGIES = (Topology.NONE, Topology.PREFER_SAME_RACK, Topology.REQUIRE_SAME_RACK, Topology.SPREAD)
TOPOLOGY_WEIGHTS = (30, 35, 20, 15)
CPU_TASK_CPUS = (1, 2, 4, 8, 16)
# Pending job mix, by job count: single-task GPU jobs, multi-node gangs, CPU batch jobs.
SINGLE_SHARE, GANG_SHARE, CPU_SHARE = 75, 7, 18
# Running gangs take this much of a GPU class's fill before the small jobs scatter over the rest.
RUNNING_GANG_FILL = 0.4
MAX_MISSES = 30
PROBES = 8


# --- teams --------------------------------------------------------------------------------


def capacity(fleet: Sequence[Node]) -> dict[str, int]:
    """Units per resource class: GPUs of each type, and the cores of the CPU-only hosts."""
    totals: dict[str, int] = defaultdict(int)
    for node in fleet:
        totals[node.resource_class] += node.gpus if node.gpu_type else node.cpus
    return dict(totals)


def build_teams(fleet: Sequence[Node]) -> tuple[Team, ...]:
    """Two divisions guaranteed 40% and 60% of every resource class, each split among three
    teams; teams may borrow as much again as they are guaranteed, divisions the rest."""
    totals = capacity(fleet)
    splits = {rclass: apportion(total, [share for _, share, _ in DIVISIONS]) for rclass, total in totals.items()}
    teams: list[Team] = []
    for d, (division, _, team_shares) in enumerate(DIVISIONS):
        guarantees = {rclass: parts[d] for rclass, parts in splits.items()}
        teams.append(Team(division, None, {rc: Quota(g, totals[rc] - g) for rc, g in guarantees.items()}))
        teams += _division_teams(division, guarantees, team_shares)
    return tuple(teams)


def _division_teams(division: str, guarantees: Mapping[str, int], shares: Sequence[float]) -> list[Team]:
    split = {rclass: apportion(g, shares) for rclass, g in guarantees.items()}
    return [
        Team(f"{division}-{suffix}", division, {rc: Quota(parts[i], parts[i]) for rc, parts in split.items()})
        for i, suffix in enumerate("abcdefgh"[: len(shares)])
    ]


class _TeamPicker:
    """Picks jobs' teams in proportion to their guarantees, skewed per team, so some teams
    run past their guarantee (borrowing) and others stay under it."""

    def __init__(self, teams: Sequence[Team], rng: random.Random) -> None:
        self.leaves = [team for team in teams if team.parent is not None]
        self.skew = {team.name: rng.uniform(0.5, 1.6) for team in self.leaves}
        self.used: dict[tuple[str, str], int] = defaultdict(int)

    def pick(self, rng: random.Random, rclass: str) -> Team:
        weights = [max(team.quotas[rclass].guaranteed, 1) * self.skew[team.name] for team in self.leaves]
        return rng.choices(self.leaves, weights)[0]

    def charge(self, rng: random.Random, rclass: str, units: int) -> Team:
        """A team for a running job, never taken past its guarantee plus borrowing limit."""
        team = self.pick(rng, rclass)
        if self._room(team, rclass) < units:
            team = max(self.leaves, key=lambda t: self._room(t, rclass))
        self.used[team.name, rclass] += units
        return team

    def _room(self, team: Team, rclass: str) -> int:
        quota = team.quotas[rclass]
        return quota.guaranteed + quota.borrowing_limit - self.used[team.name, rclass]


# --- the fleet as the workload generator sees it ------------------------------------------


@dataclass(frozen=True, slots=True)
class _Class:
    """One resource class's READY nodes, alike in this generator's fleets, so the first
    stands for all when sizing tasks."""

    gpu_type: str | None
    rclass: str
    nodes: tuple[Node, ...]
    units: int
    # Gang sizes (tasks) that fit the class, and the most tasks a same-rack gang may have.
    gang_tasks: tuple[int, ...]
    rack_tasks: int

    @property
    def host(self) -> Node:
        return self.nodes[0]


def _classes(fleet: Sequence[Node]) -> list[_Class]:
    by_class: dict[str | None, list[Node]] = defaultdict(list)
    for node in fleet:
        if node.state is NodeState.READY:
            by_class[node.gpu_type].append(node)
    return [_class(gpu_type, nodes) for gpu_type, nodes in by_class.items()]


def _class(gpu_type: str | None, nodes: list[Node]) -> _Class:
    """Gangs only for GPU classes, and no bigger than half the class, so each stays feasible."""
    gang_tasks = tuple(t for t in GANG_TASKS if gpu_type and t <= len(nodes) // 2)
    rack_tasks = Counter(node.rack for node in nodes).most_common(1)[0][1]
    units = sum(node.gpus if gpu_type else node.cpus for node in nodes)
    return _Class(gpu_type, nodes[0].resource_class, tuple(nodes), units, gang_tasks, rack_tasks)


# --- job shapes ---------------------------------------------------------------------------


def _single_shape(rng: random.Random, cls: _Class) -> JobShape:
    """One task of 1, 2, 4 or 8 GPUs (those the class's hosts can hold)."""
    sizes = [(gpus, weight) for gpus, weight in zip(SINGLE_GPUS, SINGLE_WEIGHTS, strict=True) if gpus <= cls.host.gpus]
    gpus = rng.choices([g for g, _ in sizes], [w for _, w in sizes])[0]
    return JobShape(cls.gpu_type, 1, gpus, *_per_task(rng, cls.host, gpus), _selector(rng, cls, 0.05))


def _gang_shape(rng: random.Random, cls: _Class) -> JobShape:
    """A multi-node gang of whole-host tasks; a same-rack requirement is capped at the fullest
    rack, so the job can always run some day."""
    topology = rng.choices(TOPOLOGIES, TOPOLOGY_WEIGHTS)[0]
    tasks = rng.choice(cls.gang_tasks)
    if topology is Topology.REQUIRE_SAME_RACK:
        tasks = min(tasks, cls.rack_tasks)
    gpus = cls.host.gpus
    return JobShape(cls.gpu_type, tasks, gpus, *_per_task(rng, cls.host, gpus), _selector(rng, cls, 0.3), topology)


def _cpu_shape(rng: random.Random, cls: _Class) -> JobShape:
    """A CPU batch job: several tasks of 1-16 cores, 2 or 4 GB a core."""
    cpus = min(rng.choice(CPU_TASK_CPUS), cls.host.cpus)
    memory_gb = min(cpus * rng.choice((2, 4)), cls.host.memory_gb)
    return JobShape(None, rng.randint(2, 16), 0, cpus, memory_gb)


def _per_task(rng: random.Random, host: Node, gpus: int) -> tuple[int, int]:
    """CPUs and memory at most in proportion to the task's GPUs, so the GPUs run out first."""
    fraction = gpus / host.gpus * rng.choice((0.25, 0.5, 1.0))
    return max(1, int(host.cpus * fraction)), max(1, int(host.memory_gb * fraction))


def _selector(rng: random.Random, cls: _Class, chance: float) -> dict[str, str]:
    """Sometimes ask for the interconnect label the class's hosts carry."""
    return dict(cls.host.labels) if cls.host.labels and rng.random() < chance else {}


def _small_shape(rng: random.Random, cls: _Class) -> JobShape:
    return _single_shape(rng, cls) if cls.gpu_type else _cpu_shape(rng, cls)


# --- laying down the running jobs ---------------------------------------------------------


@dataclass(slots=True)
class _Free:
    """What is still free on one node while running jobs are laid down."""

    node: Node
    gpus: list[int]
    cpus: int
    memory_gb: int

    @classmethod
    def of(cls, node: Node) -> "_Free":
        return cls(node, list(range(node.gpus)), node.cpus, node.memory_gb)

    @property
    def untouched(self) -> bool:
        return self.cpus == self.node.cpus and len(self.gpus) == self.node.gpus

    @property
    def exhausted(self) -> bool:
        return (self.node.gpus > 0 and not self.gpus) or self.cpus == 0 or self.memory_gb == 0

    def fits(self, shape: JobShape) -> bool:
        return (
            len(self.gpus) >= shape.gpus_per_task
            and self.cpus >= shape.cpus_per_task
            and self.memory_gb >= shape.memory_gb_per_task
        )

    def take(self, rank: int, shape: JobShape) -> TaskPlacement:
        indices = tuple(self.gpus[: shape.gpus_per_task])
        del self.gpus[: shape.gpus_per_task]
        self.cpus -= shape.cpus_per_task
        self.memory_gb -= shape.memory_gb_per_task
        return TaskPlacement(rank, self.node.name, indices, shape.cpus_per_task, shape.memory_gb_per_task)


class _Pool:
    """The free space of one resource class. Full nodes leave the open list as probes find
    them, so a random probe rarely misses even when the class is nearly full."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.frees = [_Free.of(node) for node in nodes]
        self.open = list(self.frees)
        self.used = 0

    def place_gang(self, rng: random.Random, shape: JobShape) -> tuple[TaskPlacement, ...]:
        """Whole untouched nodes, all in one rack when one has room (as the scheduler would
        have chosen on the emptier cluster the gang started on); () when it does not fit."""
        by_rack: dict[str, list[_Free]] = defaultdict(list)
        for free in self.frees:
            if free.untouched and free.fits(shape):
                by_rack[free.node.rack].append(free)
        roomy = [frees for frees in by_rack.values() if len(frees) >= shape.tasks]
        if roomy:
            return self._take(rng.choice(roomy)[: shape.tasks], shape)
        spread = [free for frees in by_rack.values() for free in frees]
        if shape.topology is Topology.REQUIRE_SAME_RACK or len(spread) < shape.tasks:
            return ()
        return self._take(spread[: shape.tasks], shape)

    def place_tasks(self, rng: random.Random, shape: JobShape) -> tuple[TaskPlacement, ...]:
        """Each task on a node probed at random, the scattered layout of a cluster that has run
        for a while. A job whose later tasks find no room keeps the ones placed (a running job
        records no shape), so nothing needs rolling back."""
        tasks = []
        for rank in range(shape.tasks):
            free = self._find(rng, shape)
            if free is None:
                break
            tasks.append(free.take(rank, shape))
        self.used += len(tasks) * shape.units_per_task
        return tuple(tasks)

    def _take(self, frees: Sequence[_Free], shape: JobShape) -> tuple[TaskPlacement, ...]:
        tasks = tuple(free.take(rank, shape) for rank, free in enumerate(frees))
        self.used += len(tasks) * shape.units_per_task
        return tasks

    def _find(self, rng: random.Random, shape: JobShape) -> _Free | None:
        for _ in range(PROBES):
            if not self.open:
                return None
            i = rng.randrange(len(self.open))
            free = self.open[i]
            if free.exhausted:
                self.open[i] = self.open[-1]
                self.open.pop()
            elif free.fits(shape):
                return free
        start = rng.randrange(len(self.open)) if self.open else 0
        return next((f for f in self.open[start:] + self.open[:start] if f.fits(shape)), None)


def _allocations(rng: random.Random, cls: _Class, fill: float) -> list[tuple[TaskPlacement, ...]]:
    """Running jobs' placements until `fill` of the class's units are in use: gangs first on
    whole nodes, as when they started, then small jobs scattered over what is left."""
    pool, out = _Pool(cls.nodes), []
    target = cls.units * fill
    if cls.gang_tasks:
        _fill(pool, out, target * RUNNING_GANG_FILL, lambda: pool.place_gang(rng, _gang_shape(rng, cls)))
    _fill(pool, out, target, lambda: pool.place_tasks(rng, _small_shape(rng, cls)))
    return out


def _fill(
    pool: _Pool, out: list[tuple[TaskPlacement, ...]], target: float, place: Callable[[], tuple[TaskPlacement, ...]]
) -> None:
    """Appends placements until `target` units are used, or placing keeps failing: the class
    is then as full as jobs of this kind can make it."""
    misses = 0
    while pool.used < target and misses < MAX_MISSES:
        tasks = place()
        misses = 0 if tasks else misses + 1
        if tasks:
            out.append(tasks)


def _running_job(
    rng: random.Random, job_id: int, cls: _Class, tasks: tuple[TaskPlacement, ...], teams: _TeamPicker, now: float
) -> RunningJob:
    """Started in the past, due to end in the future; gangs mostly checkpoint."""
    units = sum(len(t.gpu_indices) if cls.gpu_type else t.cpus for t in tasks)
    team = teams.charge(rng, cls.rclass, units)
    priority = _priority(rng)
    runtime = _runtime(rng)
    started_at = now - runtime * rng.uniform(0.02, 0.95)
    checkpointing = bool(cls.gpu_type) and rng.random() < (0.7 if len(tasks) > 1 else 0.3)
    last_checkpoint = max(started_at, now - rng.uniform(0, 1800)) if checkpointing else None
    return RunningJob(
        job_id,
        team.name,
        priority,
        cls.gpu_type,
        tasks,
        started_at,
        started_at + runtime,
        preemptible=priority != "P0",
        checkpointing=checkpointing,
        last_checkpoint_at=last_checkpoint,
    )


def _priority(rng: random.Random) -> str:
    return rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0]


def _runtime(rng: random.Random) -> float:
    return float(rng.choices(RUNTIMES_S, RUNTIME_WEIGHTS)[0])


# --- the queue ----------------------------------------------------------------------------


def _pending_menu(classes: Sequence[_Class]) -> tuple[list[Callable[[random.Random], JobShape]], list[float]]:
    """Shape makers and their weights: GPU jobs split by the classes' GPU counts."""
    gpu_units = sum(cls.units for cls in classes if cls.gpu_type) or 1
    menu: list[tuple[Callable[[random.Random], JobShape], float]] = []
    for cls in classes:
        share = cls.units / gpu_units
        if not cls.gpu_type:
            menu.append((partial(_cpu_shape, cls=cls), CPU_SHARE))
            continue
        menu.append((partial(_single_shape, cls=cls), SINGLE_SHARE * share))
        if cls.gang_tasks:
            menu.append((partial(_gang_shape, cls=cls), GANG_SHARE * share))
    return [maker for maker, _ in menu], [weight for _, weight in menu]


def _pending_shapes(rng: random.Random, classes: Sequence[_Class], pending_tasks: int) -> Iterator[JobShape]:
    """Shapes until their tasks add up to exactly `pending_tasks` (the last one trimmed)."""
    makers, weights = _pending_menu(classes)
    remaining = pending_tasks if makers else 0
    while remaining > 0:
        shape = rng.choices(makers, weights)[0](rng)
        shape = replace(shape, tasks=min(shape.tasks, remaining))
        remaining -= shape.tasks
        yield shape


def _pending_job(rng: random.Random, job_id: int, shape: JobShape, teams: _TeamPicker, now: float) -> PendingJob:
    """Submitted over the past hours; a few held, not yet due, or waiting on earlier jobs."""
    runtime = _runtime(rng)
    roll = rng.random()
    return PendingJob(
        job_id,
        teams.pick(rng, shape.resource_class).name,
        _priority(rng),
        shape,
        submitted_at=now - rng.uniform(60, 8 * HOUR),
        max_runtime_s=runtime,
        not_before=now + rng.uniform(600, 6 * HOUR) if roll < 0.02 else None,
        held=0.02 <= roll < 0.03,
        waiting_on=_dependencies(rng, job_id) if 0.03 <= roll < 0.06 else (),
        checkpointing=bool(shape.gpu_type) and rng.random() < 0.4,
        expected_runtime_s=runtime * rng.uniform(0.1, 0.7) if rng.random() < 0.5 else None,
    )


def _dependencies(rng: random.Random, job_id: int) -> tuple[int, ...]:
    """One or two earlier jobs (ids count up from 1, running jobs first)."""
    if job_id <= 1:
        return ()
    return tuple(sorted({rng.randrange(1, job_id) for _ in range(rng.randint(1, 2))}))


def build_workload(
    fleet: Sequence[Node], teams: Sequence[Team], *, pending_tasks: int, fill: float, seed: int, now: float
) -> tuple[list[RunningJob], list[PendingJob]]:
    """Running jobs filling `fill` of each resource class's READY capacity, on real free GPU
    indices, never over-allocating a node; then a queue of exactly `pending_tasks` tasks."""
    rng = random.Random(seed)
    classes = _classes(fleet)
    picker = _TeamPicker(teams, rng)
    ids = count(1)
    running = [
        _running_job(rng, next(ids), cls, tasks, picker, now)
        for cls in classes
        for tasks in _allocations(rng, cls, fill)
    ]
    pending = [
        _pending_job(rng, next(ids), shape, picker, now) for shape in _pending_shapes(rng, classes, pending_tasks)
    ]
    return running, pending


def build_arrivals(
    fleet: Sequence[Node],
    teams: Sequence[Team],
    *,
    tasks: int,
    seed: int,
    now: float,
    first_id: int,
    jobs: int | None = None,
    submitted_over: float = 0.0,
) -> list[PendingJob]:
    """New submissions of the queue's mix with ids from `first_id`: about `tasks` tasks, or
    the first `jobs` jobs; submitted over the last `submitted_over` seconds (0: just now)."""
    rng = random.Random(seed)
    picker = _TeamPicker(teams, rng)
    shapes = _pending_shapes(rng, _classes(fleet), tasks)
    ids = count(first_id)
    arrivals = []
    for shape in shapes:
        if jobs is not None and len(arrivals) == jobs:
            break
        job = _pending_job(rng, next(ids), shape, picker, now)
        arrivals.append(replace(job, submitted_at=now - rng.uniform(0, submitted_over), not_before=None, waiting_on=()))
    return arrivals
