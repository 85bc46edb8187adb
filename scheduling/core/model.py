"""The core's input vocabulary: frozen dataclasses describing one moment of the cluster.

Times are seconds on whatever clock the caller uses (epoch seconds in the worker, virtual
seconds in the simulator); the core never reads a clock itself. Free capacity is not an
input: it is each node's total minus the running allocations on it, so the two can never
disagree.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from operator import attrgetter

from scheduling.core.conditions import Condition, Edge

PRIORITIES = ("P0", "P1", "P2", "P3")
HOUR = 3600.0
# Seconds a victim must have run before a preemptor of each class may take its room.
MIN_RUNTIME_BY_CLASS = {"P0": 0.0, "P1": 600.0, "P2": 600.0, "P3": 600.0}


class _Ranks(dict):
    """Priority -> rank, where a priority not known raises as `PRIORITIES.index` does."""

    def __missing__(self, priority: str) -> int:
        return PRIORITIES.index(priority)


_RANKS = _Ranks({priority: rank for rank, priority in enumerate(PRIORITIES)})


def pickled_by_fields(cls):
    """A frozen, slotted dataclass pickled as a call of the class on its fields (what is derived
    from them is made again): the slots' default pickles a list of every slot and sets each
    again one by one. A snapshot's 4,359 running jobs and their tasks, as the forecast sends
    them to its workers: pickled in a third of the time (75 -> 26 ms), loaded in about 60%."""
    get = attrgetter(*(f.name for f in fields(cls) if f.init))

    def __reduce__(self):
        return cls, get(self)

    cls.__reduce__ = __reduce__
    return cls


# P0 -> 0 (most urgent) .. P3 -> 3; `PRIORITIES.index` raises for others. The dict's own
# look-up, not a function around it: asked ~3,000 times a forecast's pass, where the call of a
# Python function cost more than the look-up (~1.5% of a forecast).
priority_rank = _RANKS.__getitem__


class NodeState(StrEnum):
    # In the inventory, but no agent has heartbeated yet: it never gets work.
    NEW = "NEW"
    READY = "READY"
    CORDONED = "CORDONED"
    DRAINING = "DRAINING"
    SUSPECT = "SUSPECT"
    LOST = "LOST"


class Topology(StrEnum):
    NONE = "none"
    PREFER_SAME_RACK = "prefer_same_rack"
    REQUIRE_SAME_RACK = "require_same_rack"
    SPREAD = "spread"


CPU_CLASS = "cpu"
GPU_CLASS_PREFIX = "gpu:"
_CLASS_NAMES: dict[str | None, str] = {}


def resource_class(gpu_type: str | None) -> str:
    """ "gpu:H100", or "cpu" for a machine or job without GPUs (memoized: a hot path)."""
    name = _CLASS_NAMES.get(gpu_type)
    if name is None:
        name = _CLASS_NAMES[gpu_type] = f"{GPU_CLASS_PREFIX}{gpu_type}" if gpu_type else CPU_CLASS
    return name


def gpu_type_of(rclass: str) -> str | None:
    """The inverse of `resource_class`: "gpu:H100" -> "H100", "cpu" -> None."""
    return rclass.removeprefix(GPU_CLASS_PREFIX) if rclass.startswith(GPU_CLASS_PREFIX) else None


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Node:
    """A machine: its totals, where it sits, and whether it may take work."""

    name: str
    zone: str
    rack: str
    gpu_type: str | None
    gpus: int
    cpus: int
    memory_gb: int
    labels: Mapping[str, str] = field(default_factory=dict)
    state: NodeState = NodeState.READY
    # GPU indices taken out of placement for a fault: the others stay schedulable.
    excluded_gpus: tuple[int, ...] = ()
    # Local scratch disk (GB): a job asking `JobShape.scratch_disk_gb` runs only on nodes with
    # at least that much. A minimum per node, not a consumable (as Slurm's TmpDisk and --tmp).
    # 0: not known (an agent that does not report it), so not checked.
    scratch_disk_gb: int = 0
    # Whether its agent runs a job's image (a container runtime or hook): a job that names one
    # (`JobShape.image`) runs only where it does. None: not reported (an older agent), so not
    # checked, as scratch disk 0.
    runs_images: bool | None = None

    def lacks_scratch(self, asked: int) -> bool:
        """Whether the node is known to have less scratch disk than `asked` GB."""
        return 0 < self.scratch_disk_gb < asked

    def lacks_images(self, image: bool) -> bool:
        """Whether the node is known not to run images, for a job that names one (`image`)."""
        return image and self.runs_images is False

    @property
    def resource_class(self) -> str:
        return resource_class(self.gpu_type)

    @property
    def usable_gpus(self) -> list[int]:
        """The GPU indices placement may give out: all but the excluded ones."""
        if not self.excluded_gpus:
            return list(range(self.gpus))
        return [i for i in range(self.gpus) if i not in self.excluded_gpus]


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class JobShape:
    """What one job asks for: `tasks` identical ranks, started together (a gang)."""

    gpu_type: str | None
    tasks: int
    gpus_per_task: int
    cpus_per_task: int
    memory_gb_per_task: int
    node_selector: Mapping[str, str] = field(default_factory=dict)
    topology: Topology = Topology.NONE
    scratch_disk_gb: int = 0  # local scratch disk a node must have to run its tasks (see `Node`)
    image: bool = False  # it names an image: only nodes that run images take it (see `Node`)
    # Derived once (a pass asks for them for every job it weighs, many times over): the class,
    # the units one task takes (GPUs, or CPUs for CPU jobs) and all tasks take.
    resource_class: str = field(init=False, repr=False, compare=False)
    units_per_task: int = field(init=False, repr=False, compare=False)
    units: int = field(init=False, repr=False, compare=False)
    _key: tuple = field(init=False, repr=False, compare=False)  # see `key`

    def __post_init__(self):
        per_task = self.gpus_per_task if self.gpu_type else self.cpus_per_task
        object.__setattr__(self, "resource_class", resource_class(self.gpu_type))
        object.__setattr__(self, "units_per_task", per_task)
        object.__setattr__(self, "units", self.tasks * per_task)
        selector = tuple(sorted(self.node_selector.items()))
        key = (
            self.gpu_type,
            self.gpus_per_task,
            self.cpus_per_task,
            self.memory_gb_per_task,
            selector,
            self.topology,
            self.scratch_disk_gb,
            self.image,
        )
        object.__setattr__(self, "_key", key)

    @property
    def gpu_count(self) -> int:
        return self.tasks * self.gpus_per_task

    @property
    def unit_name(self) -> str:
        return self.gpu_type or "CPU"

    def describe(self) -> str:
        return f"{self.tasks} x {self.units_per_task} {self.unit_name}"

    def key(self) -> tuple:
        """Jobs with equal keys and more tasks can never fit where one with fewer did not."""
        return self._key


def tasks_per_node(shape: JobShape, *, gpus: int, cpus: int, memory_gb: int) -> int:
    """How many of the job's tasks fit in the given amounts (the binding resource decides)."""
    fit = memory_gb // shape.memory_gb_per_task if shape.memory_gb_per_task else 1 << 30
    if shape.gpus_per_task:
        fit = min(fit, gpus // shape.gpus_per_task)
    if shape.cpus_per_task:
        fit = min(fit, cpus // shape.cpus_per_task)
    return fit


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to "can this job ever run?": ok, or the spec field to blame and why."""

    ok: bool
    field: str = ""
    message: str = ""


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """Where one rank runs: a node and the GPU indices (and CPU, memory) it holds there."""

    rank: int
    node: str
    gpu_indices: tuple[int, ...]
    cpus: int
    memory_gb: int


def confirmed_checkpoint(times) -> float | None:
    """A job's confirmed checkpoint in its current attempt: the oldest of its ranks' last ones
    (the gang can resume only from a step every rank saved); None while any rank has none."""
    times = list(times)
    if not times or any(at is None for at in times):
        return None
    return min(times)


def lost_since(started_at: float, last_checkpoint_at: float | None) -> float:
    """Where the work a stop would lose begins: the attempt's start, or its last confirmed
    checkpoint if later."""
    return started_at if last_checkpoint_at is None else max(started_at, last_checkpoint_at)


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding resources: running, starting, or being preempted (its resources count as
    used until it is gone, so nothing is over-committed while it drains)."""

    job_id: int
    team: str
    priority: str
    gpu_type: str | None
    tasks: tuple[TaskPlacement, ...]
    started_at: float
    expected_end: float
    preemptible: bool = True
    checkpointing: bool = False
    last_checkpoint_at: float | None = None
    preempting: bool = False
    preempted_for: int | None = None
    # While it stops: when its stop is forced (SIGKILL at the end of its grace period), if known.
    stop_by: float | None = None
    # How often it checkpoints (its spec's interval), for the simulator; None: not known.
    checkpoint_interval_s: float | None = None
    # How many times the job was preempted before this attempt: the policy spares jobs it has
    # already evicted (each eviction costs them their work since a checkpoint, and a new wait).
    preemptions: int = 0
    # The job group it belongs to (ClusterSnapshot.groups), if any: it takes one of its slots.
    group: int | None = None
    # Derived once (a pass asks for them many times): GPUs held (CPUs for a CPU job), class.
    units: int = field(init=False, repr=False, compare=False)
    resource_class: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "units", sum(len(t.gpu_indices) if self.gpu_type else t.cpus for t in self.tasks))
        object.__setattr__(self, "resource_class", resource_class(self.gpu_type))

    @property
    def gpus(self) -> int:
        return sum(len(t.gpu_indices) for t in self.tasks)

    def hours_lost_if_stopped(self, now: float) -> float:
        """GPU-hours (CPU-hours for CPU jobs) of work since the last checkpoint."""
        return self.units * max(0.0, now - lost_since(self.started_at, self.last_checkpoint_at)) / HOUR


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class PendingJob:
    job_id: int
    team: str
    priority: str
    shape: JobShape
    submitted_at: float
    max_runtime_s: float
    not_before: float | None = None
    held: bool = False
    waiting_on: tuple[int, ...] = ()
    checkpointing: bool = False
    # The team's typical runtime for jobs like this one, if known: orders shorter work first.
    expected_runtime_s: float | None = None
    # The job it was last preempted for, while that job still waits: it goes after it, so
    # the room it gave up is not taken straight back (no preemption ping-pong).
    yields_to: int | None = None
    # How often it checkpoints (its spec's interval), for the simulator; None: not known.
    checkpoint_interval_s: float | None = None
    # The nodes it was nominated to when it last evicted (kube-scheduler's nominated node),
    # held for it until the first pass after its victims have stopped: no job that comes
    # before it in that pass (one waiting past the bound, say) takes the room it freed.
    nominated: tuple[str, ...] = ()
    # The job group it belongs to (ClusterSnapshot.groups): it starts only while the group has
    # fewer than its parallelism on nodes.
    group: int | None = None
    # The condition of each `waiting_on` edge (core/conditions.py), in the same order; empty:
    # every one waits for success.
    waiting_conditions: tuple[str, ...] = ()
    # When it last joined the queue (its latest requeue), if not at submit: what a reported
    # queue wait counts from. Ordering and aging keep to `submitted_at`.
    queued_at: float | None = None
    # Its shape's, kept on the job (a pass reads it for every job it weighs, many times over:
    # a property's call cost ~1% of a forecast).
    resource_class: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "resource_class", self.shape.resource_class)

    @property
    def waiting_edges(self) -> tuple[Edge, ...]:
        conditions = self.waiting_conditions or (Condition.SUCCESS,) * len(self.waiting_on)
        return tuple(Edge(job_id, Condition(c)) for job_id, c in zip(self.waiting_on, conditions, strict=True))


@dataclass(frozen=True, slots=True)
class Quota:
    guaranteed: int = 0
    borrowing_limit: int = 0
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Team:
    """A node of the team tree; `parent` is None for a division."""

    name: str
    parent: str | None = None
    quotas: Mapping[str, Quota] = field(default_factory=dict)

    def quota(self, rclass: str) -> Quota | None:
        """None: no quota for this class, so the team may only borrow idle capacity, unbounded."""
        return self.quotas.get(rclass)


BACKLOG_NOT_A_NUMBER = "{field}={value!r}: must be a number >= 0 (or None)"
BACKLOG_OFF_WITHOUT_ON = (
    "reclaim_in_turn_backlog_off={value!r}: needs reclaim_in_turn_backlog set"
    " (the rule turns off below it only where a backlog turned it on)"
)
BACKLOG_OFF_ABOVE_ON = "reclaim_in_turn_backlog_off={value!r}: must be at most reclaim_in_turn_backlog ({on!r})"


def check_backlog_gate(on: float | None, off: float | None) -> None:
    """Raise ValueError naming the field unless `on` and `off` (PolicyConfig's
    `reclaim_in_turn_backlog` and `reclaim_in_turn_backlog_off`) make a gate: numbers >= 0 or
    None, `off` only with `on`, and `off` <= `on`."""
    for name, value in (("reclaim_in_turn_backlog", on), ("reclaim_in_turn_backlog_off", off)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0):
            raise ValueError(BACKLOG_NOT_A_NUMBER.format(field=name, value=value))
    if off is not None and on is None:
        raise ValueError(BACKLOG_OFF_WITHOUT_ON.format(value=off))
    if off is not None and off > on:
        raise ValueError(BACKLOG_OFF_ABOVE_ON.format(value=off, on=on))


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    # Each this long a job waits raises it one priority class (never into P0).
    aging_interval_s: float = 4 * HOUR
    # Past this wait, nothing new is placed on the nodes reserved for a blocked job.
    reservation_wait_bound_s: float = 2 * HOUR
    # Per class of the PREEMPTOR: tasks that have run less than this are not preempted for
    # priority by a job of that class. An incident (P0) waits for nobody; the others let a
    # fresh start get some work done. Classes left out get `MIN_RUNTIME_BY_CLASS`'s value.
    min_runtime_by_class: Mapping[str, float] = field(default_factory=lambda: dict(MIN_RUNTIME_BY_CLASS))
    # The older single knob: when set, the minimum for P1-P3 preemptors (P0 keeps its own).
    min_runtime_before_preempt_s: float | None = None
    # Blocked jobs per resource class that hold a reservation (the first ones in queue order).
    reservations_per_class: int = 2
    # How many of the jobs waiting past `reservation_wait_bound_s` go first in their class, oldest
    # first (None: all of them); the others keep their place in the order. With as many as hold
    # reservations, the oldest always get them, so nothing starves, while short jobs are not made
    # to queue behind every job older than the bound (BENCHMARKS.md, "The queue order").
    overdue_first: int | None = 2
    # Whether a job requeued after running (evicted, its node lost) counts its wait for rule 2
    # (overdue, oldest first, the reservations) from its requeue (`PendingJob.queued_at`), as
    # Kueue's default requeuing timestamp (Eviction) does, not from its submit: else a victim
    # that ran goes straight back to the head of the overdue line, ahead of jobs that never ran.
    overdue_since_requeue: bool = False
    backfill: bool = True
    preemption: bool = True
    # Whether a team within its guarantee evicts borrowers (RECLAIM); off, it only outranks
    # (PRIORITY) like any job. The forecast's simulated future may turn it off (sim/forecast.py).
    reclaim: bool = True
    # Within a team's turn, start the job with the least expected GPU-time first.
    shortest_first_within_team: bool = True
    # Whether a QUOTA reason that names a parent team gives that team's figures (use, guarantee,
    # limit). Its child's members read the reason; where quotas are private (MLQ_QUOTAS_PUBLIC
    # off) they may not read the parent's figures, and the reason says only which limit it is.
    parent_quota_figures: bool = True
    # "weighted_shortest": jobs by expected GPU-time times (1 + their team's dominant share), so
    # short jobs go first across teams and a team using more than it is owed sees its jobs count
    # as larger; "fair_share": teams take turns by dominant share (see QueueOrder). The live
    # scheduler reads MLQ_QUEUE_ORDER.
    order: str = "weighted_shortest"
    # Bounds the work one pass spends searching for victims: for priority, and (None: no
    # bound) for reclaim. A job past the budget is tried again next pass.
    max_preemption_searches: int = 64
    max_reclaim_searches: int | None = None
    # Reclaim without churn (see preemption.py). Natural termination: a job expected to end
    # within `reclaim_spare_ending_s` is not reclaimed (its room comes back soon anyway, while
    # an evicted job waits again and redoes work). Victims that checkpointed lately go first
    # (the time since the last checkpoint in whole `reclaim_checkpoint_step_s`), then the
    # longest expected remaining, when `reclaim_longest_first` (the order of every victim
    # search). A job preempted `reclaim_max_evictions` times is not reclaimed again, nor
    # (optionally) one that has run less than `reclaim_min_runtime_s`, unless the owner has
    # waited past `reclaim_wait_bound_s`: then it reclaims from anyone over a guarantee. The
    # defaults met issue 13's aims at 640 and 768 GPUs (BENCHMARKS.md, "Victims that
    # checkpointed lately" and "The checkpoint step at 12 minutes").
    reclaim_spare_ending_s: float = 0.0
    reclaim_longest_first: bool = True
    reclaim_checkpoint_step_s: float = 720.0
    reclaim_min_runtime_s: float = 0.0
    # An owner reclaims only after waiting this long (YuniKorn's preemption delay).
    reclaim_after_wait_s: float = 0.0
    reclaim_max_evictions: int | None = 2
    reclaim_wait_bound_s: float = 2 * HOUR
    # Reclaim in turn: a job reclaims only while no job before it in the pass's order, of its
    # class, was left waiting for room it could use (asking no more units). Otherwise that job
    # takes the room the eviction frees in the next pass, and the owner evicts again: on the
    # Philly trace nearly every reclaim eviction came from such a loop (BENCHMARKS.md).
    reclaim_in_turn: bool = True
    # `reclaim_in_turn` and `nominate_reclaimers` only under a deep backlog: they hold in a pass
    # for a class only when the GPUs (CPUs) its waiting jobs ask come to at least this many
    # times the class's capacity, read off the snapshot (None: always, as configured). On the
    # Philly trace the two always on won at 640 GPUs (overloaded) and lost at 768; gated at 1,
    # with `reclaim_in_turn_backlog_off` at 0, they met every 640 aim of issue 13 and left 768
    # as it was (BENCHMARKS.md, "The reclaim gate on by default").
    reclaim_in_turn_backlog: float | None = 1.0
    # Hysteresis for `reclaim_in_turn_backlog`: where the rule held in the last pass
    # (`ClusterSnapshot.reclaim_turn`) it holds on until the backlog falls below this many times
    # the class's capacity, so it does not switch on and off with every job that starts or
    # arrives (None: the same as `reclaim_in_turn_backlog`, no hysteresis). At most that, >= 0;
    # 0: once on in a class, on for good. None when `reclaim_in_turn_backlog` is None.
    reclaim_in_turn_backlog_off: float | None = 0.0
    # Weigh a victim's past evictions against choosing it again (RunningJob.preemptions).
    eviction_memory: bool = False
    # A job that evicted for priority is nominated to the nodes it will start on, held for it
    # until it starts there (PendingJob.nominated); one that only reclaimed, when this is set
    # (and under `reclaim_in_turn_backlog`'s gate). Alone, always on, it cut reclaim evictions by
    # 80% on the Philly trace but raised the average wait and JCT (BENCHMARKS.md, "Nominated
    # nodes"); with reclaim in turn under the gate it is the default (docs/reclaim.md).
    nominate_reclaimers: bool = True
    # Explain every job left waiting and report fragmentation (the worker does; a simulation
    # that only needs the schedule does not).
    explain: bool = True

    def __post_init__(self):
        check_backlog_gate(self.reclaim_in_turn_backlog, self.reclaim_in_turn_backlog_off)

    def min_runtime_for(self, priority: str) -> float:
        """How long a victim must have run before a job of class `priority` may preempt it."""
        if priority != "P0" and self.min_runtime_before_preempt_s is not None:
            return self.min_runtime_before_preempt_s
        return self.min_runtime_by_class.get(priority, MIN_RUNTIME_BY_CLASS[priority])


@dataclass(frozen=True, slots=True)
class Group:
    """A job group (an array, a sweep): at most `parallelism` of its children on nodes at once.
    `settling`: its children that failed and await the leader's verdict (retried, or failed for
    good). Each still holds its slot: a sibling started in it could start after the failure that
    ends the group (one more than `max_failures`), and a retried child has its slot back."""

    kind: str
    parallelism: int
    settling: int = 0


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    """An admin's maintenance window: its nodes are drained from `start_at` to `end_at`.
    `target` says what it drains as the admin named it ("rack z1-r3", "zone z2", "3 nodes")."""

    window_id: int
    target: str
    nodes: tuple[str, ...]
    start_at: float
    end_at: float
    # The nodes it drained, once it has started: they take work again at its end (the simulator
    # and the forecast bring them back then).
    drained: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    teams: tuple[Team, ...]
    now: float
    config: PolicyConfig = field(default_factory=PolicyConfig)
    # The groups of the pending and running jobs, by parent job id (PendingJob.group, RunningJob.group).
    groups: Mapping[int, Group] = field(default_factory=dict)
    # Maintenance windows not yet over (core/maintenance.py): a job whose time limit would run
    # into one does not start on its nodes.
    maintenance: tuple[MaintenanceWindow, ...] = ()
    # The resource classes where the backlog gate (`PolicyConfig.reclaim_in_turn_backlog`) held
    # in the last pass (`Decisions.reclaim_turn`): there it holds on down to
    # `reclaim_in_turn_backlog_off`. None: not known, as empty for `schedule()`; a kept
    # `Scheduler` then reads its own last pass's.
    reclaim_turn: frozenset[str] | None = None
