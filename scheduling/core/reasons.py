"""Why a job waits: a code (data), a category, and a sentence with the numbers."""

from dataclasses import dataclass, field
from enum import StrEnum


class ReasonCode(StrEnum):
    NO_MATCHING_NODES = "NO_MATCHING_NODES"
    INSUFFICIENT_CAPACITY = "INSUFFICIENT_CAPACITY"
    FRAGMENTED = "FRAGMENTED"
    QUOTA = "QUOTA"
    PRIORITY = "PRIORITY"
    BEHIND_RESERVATION = "BEHIND_RESERVATION"
    BACKOFF = "BACKOFF"
    HELD = "HELD"
    DEPENDENCY = "DEPENDENCY"
    PREEMPTING = "PREEMPTING"
    # Victims exist, but none may be evicted yet: they are younger than their minimum runtime.
    PREEMPTION_PENDING = "PREEMPTION_PENDING"
    # Submitted since the last pass: no decision about it yet.
    NOT_YET_SCHEDULED = "NOT_YET_SCHEDULED"
    # Its group (an array, a sweep) already has as many children on nodes as its parallelism.
    GROUP_LIMIT = "GROUP_LIMIT"
    # It would fit but for a maintenance window its time limit would run into.
    MAINTENANCE = "MAINTENANCE"


NOT_YET_SCHEDULED_MESSAGE = "waiting for the scheduler's next pass"


class Category(StrEnum):
    """Whether waiting can end by itself (capacity frees up) or needs someone to act."""

    CAPACITY = "capacity"
    POLICY = "policy"
    USER = "user"
    UNRESOLVABLE = "unresolvable"


CATEGORY = {
    ReasonCode.NO_MATCHING_NODES: Category.UNRESOLVABLE,
    ReasonCode.INSUFFICIENT_CAPACITY: Category.CAPACITY,
    ReasonCode.FRAGMENTED: Category.CAPACITY,
    ReasonCode.QUOTA: Category.POLICY,
    ReasonCode.PRIORITY: Category.POLICY,
    ReasonCode.BEHIND_RESERVATION: Category.POLICY,
    ReasonCode.BACKOFF: Category.USER,
    ReasonCode.HELD: Category.USER,
    ReasonCode.DEPENDENCY: Category.USER,
    ReasonCode.PREEMPTING: Category.CAPACITY,
    ReasonCode.PREEMPTION_PENDING: Category.CAPACITY,
    ReasonCode.NOT_YET_SCHEDULED: Category.CAPACITY,
    ReasonCode.GROUP_LIMIT: Category.USER,
    ReasonCode.MAINTENANCE: Category.CAPACITY,
}


@dataclass(frozen=True, slots=True)
class PendingReason:
    code: ReasonCode
    message: str
    # node rejection histogram: reason -> node count, e.g. {"other GPU type": 900}
    histogram: tuple[tuple[str, int], ...] = field(default=())
    # With a histogram: how many nodes could take one task, of how many, e.g. "3/36"
    # ("" where the reason is not about room on the nodes).
    fit_count: str = ""
    # When the wait ends by itself, where the sentence gives that time (PREEMPTION_PENDING: when
    # its victims may go). Not part of what the reason is: the sentence says it.
    until: float | None = field(default=None, compare=False)

    @property
    def category(self) -> Category:
        return CATEGORY[self.code]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
