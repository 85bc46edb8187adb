"""Reads behind the admin console (/nodes/): every node's GPUs by rack, node states, GPUs and
fragmentation per class, the scheduler's status, recent preemptions and failures.

Each read is a fixed number of queries whatever the cluster's size: the heatmap re-fetches
itself every few seconds for every admin who has the page open."""

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from scheduling.core.model import gpu_type_of
from scheduling.metrics_store import gpus_by_state
from scheduling.models import AdminState, Job, JobState, Node, NodeState, StopReason, Task, TaskIsolation, TaskState
from scheduling.selectors import scheduler_state
from scheduling.states import ON_NODE
from teams.models import AuditEvent, EventKind

UP = (NodeState.READY, NodeState.CORDONED, NodeState.DRAINING)
RECENT = 20
NODE_FIELDS = (
    "id",
    "name",
    "zone",
    "rack",
    "gpu_type",
    "gpu_count",
    "cpu_count",
    "state",
    "state_reason",
    "admin_state",
    "reclaim_deadline",
    "task_isolation",
    "excluded_gpus",
)
EVENT_FIELDS = (
    "id",
    "created_at",
    "job_id",
    "job__name",
    "job__team__name",
    "actor_name",
    "from_state",
    "to_state",
    "reason",
    "message",
)


@dataclass(frozen=True)
class Cell:
    """One GPU square on a node's page: `status` is its CSS class (free, used, reserved,
    draining, down: not available for placement, a cordoned node's idle GPUs too)."""

    status: str
    title: str


@dataclass
class NodeLine:
    """One node in the heatmap: a square colored by its state and, while it takes work, by
    how much of it is free (`level`: all, some or none)."""

    name: str
    state: str
    reason: str
    admin_state: str
    gpu_type: str
    gpu_count: int
    free: int  # GPUs free and usable now (CPUs on a CPU node)
    capacity: int  # GPUs (CPUs on a CPU node)
    reclaim_deadline: object
    unisolated: bool = False  # its agent runs tasks as its own user (it cannot switch users)

    @property
    def level(self) -> str:
        if self.state != NodeState.READY or not self.capacity:
            return ""
        return "all" if self.free == self.capacity else "none" if self.free == 0 else "some"

    @property
    def usage(self) -> str:
        unit = "GPUs" if self.gpu_type else "CPUs"
        return f"{self.free}/{self.capacity} {self.gpu_type + ' ' if self.gpu_type else ''}{unit} free"

    @property
    def title(self) -> str:
        return f"{self.name} · {self.state} · {self.usage}{' · ' + self.reason if self.reason else ''}"


@dataclass
class Rack:
    zone: str
    name: str
    nodes: list[NodeLine] = field(default_factory=list)


@dataclass(frozen=True)
class GpuClass:
    resource_class: str
    free: int
    used: int
    unavailable: int
    fragmentation: float

    @property
    def percent(self) -> float:
        return round(self.fragmentation * 100, 1)

    @property
    def gpu_type(self) -> str | None:
        return gpu_type_of(self.resource_class)


def racks(nodes=None) -> list[Rack]:
    """The nodes (all, or a filtered queryset) grouped by zone then rack, each with what is
    free on it: two queries in all, whatever the fleet's size."""
    gpus_held, cpus_used = _usage()
    grouped: dict[tuple[str, str], Rack] = {}
    rows = (Node.objects.all() if nodes is None else nodes).order_by("zone", "rack", "name").values(*NODE_FIELDS)
    for node in rows:
        rack = grouped.setdefault((node["zone"], node["rack"]), Rack(node["zone"], node["rack"]))
        held = gpus_held[node["id"]]
        # A GPU excluded for a fault is neither free nor used, unless a task still holds it.
        unusable = len(held) + sum(int(index) not in held for index in node["excluded_gpus"])
        rack.nodes.append(_line(node, unusable, cpus_used[node["id"]]))
    return sorted(grouped.values(), key=lambda rack: (rack.zone, _natural(rack.name)))


def _natural(name: str) -> list:
    """z1-r2 before z1-r10: the numbers in a name compared as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _line(node: dict, gpus_used: int, cpus_used: int) -> NodeLine:
    """A node's free GPUs (CPUs on a CPU node) count only while it takes new work."""
    capacity, used = (node["gpu_count"], gpus_used) if node["gpu_type"] else (node["cpu_count"], cpus_used)
    return NodeLine(
        name=node["name"],
        state=node["state"],
        reason=node["state_reason"],
        admin_state=node["admin_state"],
        gpu_type=node["gpu_type"],
        gpu_count=node["gpu_count"],
        free=max(0, capacity - used) if node["state"] == NodeState.READY else 0,
        capacity=capacity,
        reclaim_deadline=node["reclaim_deadline"],
        unisolated=node["task_isolation"] == TaskIsolation.NONE,
    )


def _usage(nodes=None) -> tuple[dict[int, dict[int, int]], Counter]:
    """What the active tasks hold, by node id: GPU index -> job id, and CPUs in use."""
    gpus, cpus = defaultdict(dict), Counter()
    tasks = Task.objects.filter(state__in=ON_NODE, node__isnull=False)
    if nodes is not None:
        tasks = tasks.filter(node__in=nodes)
    for node_id, job_id, indices, cpu_per_rank in tasks.values_list(
        "node_id", "job_id", "gpu_indices", "job__cpu_per_rank"
    ):
        gpus[node_id].update(dict.fromkeys(indices, job_id))
        cpus[node_id] += cpu_per_rank
    return gpus, cpus


def _reservations() -> dict[str, int]:
    """Node name -> the pending job it is reserved for (the oldest, when several are)."""
    reserved: dict[str, int] = {}
    rows = (
        Job.objects.filter(state=JobState.PENDING)
        .exclude(reserved_nodes=[])
        .order_by("id")
        .values_list("id", "reserved_nodes")
    )
    for job_id, names in rows:
        for name in names:
            reserved.setdefault(name, job_id)
    return reserved


def gpu_cells(node: Node) -> list[Cell]:
    """A node's GPUs one by one, for its own page."""
    held = _usage([node])[0][node.pk]
    reserved_for = _reservations().get(node.name)
    row = {"state": node.state, "admin_state": node.admin_state}
    return [
        Cell("down", f"GPU {index}: excluded: {node.excluded_gpus[str(index)]}")
        if str(index) in node.excluded_gpus and held.get(index) is None
        else _cell(index, row, held.get(index), reserved_for)
        for index in range(node.gpu_count)
    ]


def _cell(index: int, node: dict, job_id: int | None, reserved_for: int | None) -> Cell:
    """A held GPU is used whatever its node's state; a free one shows why it cannot be used
    now, the node's condition first (down, draining), then a pending job's reservation."""
    if job_id is not None:
        return Cell("used", f"GPU {index}: used by job {job_id}")
    if node["state"] not in UP:
        return Cell("down", f"GPU {index}: down (node {node['state']})")
    if AdminState.DRAINING in (node["state"], node["admin_state"]):
        return Cell("draining", f"GPU {index}: free, node draining")
    if AdminState.CORDONED in (node["state"], node["admin_state"]):  # idle, but nothing is placed there
        return Cell("down", f"GPU {index}: idle, node cordoned (not available for placement)")
    if reserved_for is not None:
        return Cell("reserved", f"GPU {index}: reserved for job {reserved_for}")
    return Cell("free", f"GPU {index}: free")


def unisolated(rack_list: list[Rack]) -> list[str]:
    """Nodes whose tasks can read each other's environment and files: the page warns."""
    return [node.name for rack in rack_list for node in rack.nodes if node.unisolated]


def state_counts(rack_list: list[Rack]) -> list[tuple[str, int]]:
    """How many nodes are in each state, every state listed, from racks() already read."""
    counts = Counter(node.state for rack in rack_list for node in rack.nodes)
    return [(state, counts[state]) for state in NodeState.values]


def gpu_classes() -> list[GpuClass]:
    """Per GPU class, the same numbers /metrics reports: free (on READY nodes), used, the rest
    unavailable (on nodes taking no new work), and fragmentation."""
    gpus, fragmentation = gpus_by_state()
    counts = defaultdict(Counter)
    for (rclass, state), value in gpus:
        counts[rclass][state if state in ("free", "used") else "unavailable"] += value
    return [
        GpuClass(rclass, counts[rclass]["free"], counts[rclass]["used"], counts[rclass]["unavailable"], ratio)
        for (rclass,), ratio in fragmentation
    ]


def scheduler_status() -> dict:
    """The lease, and its holder as leader only while the lease is live (the same answer as
    /api/v1/scheduler's); otherwise no one leads and passes have stopped."""
    state = scheduler_state()
    return {"leader": state.leader, "lease": state}


def recent_preemptions() -> list[dict]:
    """The victims' stop requests (the preempting job's own STOP_REQUESTED event, with reason
    PRIORITY or RECLAIM, would list each preemption twice)."""
    return _recent(AuditEvent.objects.filter(kind=EventKind.STOP_REQUESTED, reason=StopReason.PREEMPTED))


def recent_failures() -> list[dict]:
    return _recent(AuditEvent.objects.filter(kind=EventKind.TRANSITION, to_state=TaskState.FAILED))


def _recent(events) -> list[dict]:
    return list(events.order_by("-created_at", "-id").values(*EVENT_FIELDS)[:RECENT])
