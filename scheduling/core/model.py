"""The core's vocabulary: frozen dataclasses in, frozen dataclasses out.

Times are seconds on whatever clock the caller uses (epoch seconds in the worker, virtual
seconds in the simulator); the core never reads a clock itself.
"""
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

PRIORITIES = ("P0", "P1", "P2", "P3")


def priority_rank(priority: str) -> int:
    """P0 -> 0 (most urgent) .. P3 -> 3."""
    return PRIORITIES.index(priority)


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


def resource_class(gpu_type: str | None) -> str:
    return f"gpu:{gpu_type}" if gpu_type else "cpu"


@dataclass(frozen=True, slots=True)
class Node:
    """A machine as the scheduler sees it. Free amounts default to the whole machine."""

    name: str
    zone: str
    rack: str
    gpu_type: str | None
    gpus: int
    cpus: int
    memory_gb: int
    labels: Mapping[str, str] = field(default_factory=dict)
    state: NodeState = NodeState.READY
    free_gpu_indices: tuple[int, ...] | None = None
    free_cpus: int | None = None
    free_memory_gb: int | None = None

    @property
    def resource_class(self) -> str:
        return resource_class(self.gpu_type)

    @property
    def free_gpus(self) -> tuple[int, ...]:
        return tuple(range(self.gpus)) if self.free_gpu_indices is None else self.free_gpu_indices

    @property
    def cpus_free(self) -> int:
        return self.cpus if self.free_cpus is None else self.free_cpus

    @property
    def memory_free(self) -> int:
        return self.memory_gb if self.free_memory_gb is None else self.free_memory_gb


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

    @property
    def gpu_count(self) -> int:
        return self.tasks * self.gpus_per_task

    @property
    def resource_class(self) -> str:
        return resource_class(self.gpu_type)

    def describe(self) -> str:
        if self.gpu_type:
            return f"{self.tasks} x {self.gpus_per_task} {self.gpu_type}"
        return f"{self.tasks} x {self.cpus_per_task} CPU"


def tasks_per_node(shape: JobShape, *, gpus: int, cpus: int, memory_gb: int) -> int:
    """How many of the job's tasks fit in the given amounts (the binding resource decides)."""
    limits = []
    if shape.gpus_per_task:
        limits.append(gpus // shape.gpus_per_task)
    if shape.cpus_per_task:
        limits.append(cpus // shape.cpus_per_task)
    if shape.memory_gb_per_task:
        limits.append(memory_gb // shape.memory_gb_per_task)
    return min(limits) if limits else 0


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to "can this job ever run?": ok, or the spec field to blame and why."""

    ok: bool
    field: str = ""
    message: str = ""
    details: tuple[str, ...] = ()
