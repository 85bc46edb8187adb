"""The core's output: what to start, what to stop, what to hold, and why each job waits."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scheduling.core.model import TaskPlacement
from scheduling.core.reasons import PendingReason


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: int
    tasks: tuple[TaskPlacement, ...]
    # Above the team's guarantee: the first to be reclaimed when an owner wants it back.
    borrowed: bool = False

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({t.node for t in self.tasks}))


class PreemptionReason(StrEnum):
    """Why a running job is evicted (core/preemption.py), stored as its events' reason."""

    PRIORITY = "PRIORITY"  # a job of a higher class outranks it
    RECLAIM = "RECLAIM"  # a team within its guarantee takes back what it lent


@dataclass(frozen=True, slots=True)
class Preemption:
    victim_job_id: int
    for_job_id: int
    reason: PreemptionReason
    message: str


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    nodes: tuple[str, ...]
    start_at: float
    # Units (GPUs, or CPUs) the job needs from each reserved node at start_at.
    units: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PassStats:
    pending: int = 0
    considered: int = 0
    placed: int = 0
    placed_tasks: int = 0
    preempted: int = 0
    reserved: int = 0
    elapsed_ms: float | None = None
    # Per resource class: free units not in a block a whole-node task could use, over all free.
    fragmentation: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decisions:
    placements: tuple[Placement, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    pending: Mapping[int, PendingReason] = field(default_factory=dict)
    # The order the pass considered jobs in: the queue's positions.
    order: tuple[int, ...] = ()
    stats: PassStats = field(default_factory=PassStats)
    # Job -> the nodes it is nominated to (`PendingJob.nominated`) after this pass: those that
    # evicted in it, and those whose victims are still stopping. A job left out has none.
    nominations: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    # With `PolicyConfig.reclaim_in_turn_backlog`: the resource classes where reclaim in turn and
    # the nomination of reclaimers held in this pass, for the next snapshot's `reclaim_turn`.
    reclaim_turn: frozenset[str] = frozenset()
