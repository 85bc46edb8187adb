"""What the SDK's calls return: frozen dataclasses built from the API's JSON, tolerant of fields
they do not name, each keeping the JSON as it came in `raw` (what `mlq -o json` prints)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mlqueue.client.errors import MlqError
from mlqueue.client.specs import a_kind

# A job is over when it succeeded, was cancelled, stopped early (a sweep's trial) or skipped (a
# pipeline's step whose condition did not hold), or failed with the leader's verdict given
# (FAILED with no failure class yet may still be retried).
FINISHED = ("SUCCEEDED", "CANCELLED", "EARLY_STOPPED", "SKIPPED")
# Every state a job can be in, as the API's `?state=` filter takes them (scheduling/states.py's
# JobState; the SDK imports nothing of the server, so a test holds the two equal).
JOB_STATES = (
    "PENDING",
    "ASSIGNED",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "PREEMPTED",
    "CANCELLED",
    "EARLY_STOPPED",
    "SKIPPED",
)
# The priority classes, highest first (scheduling/core/model.py's priorities).
PRIORITIES = ("P0", "P1", "P2", "P3")
# Every node state, as `?state=` on /api/v1/nodes takes them (scheduling/core/model.py's NodeState).
NODE_STATES = ("NEW", "READY", "CORDONED", "DRAINING", "SUSPECT", "LOST")


# A 200 whose JSON is not what the API answers (a proxy's, another program's, a far other
# version's): one line, not a TypeError's traceback.
UNEXPECTED_ANSWER = (
    "the server's answer is not an mlqueue {what} ({why}): is --server an mlqueue server of this version?"
)


def _build(cls, data: dict):
    names = {field.name for field in dataclasses.fields(cls)}
    known = {key: value for key, value in _mapping(cls, data).items() if key in names and key != "raw"}
    try:
        return cls(**known, raw=data)
    except TypeError:
        missing = sorted(f.name for f in dataclasses.fields(cls) if f.name not in known and _required(f))
        raise MlqError(0, UNEXPECTED_ANSWER.format(what=cls.__name__.lower(), why=f"no {', '.join(missing)}")) from None


def _mapping(cls, data) -> dict:
    if not isinstance(data, dict):
        raise MlqError(0, UNEXPECTED_ANSWER.format(what=cls.__name__.lower(), why=a_kind(data)))
    return data


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Task:
    rank: int
    state: str
    node: str | None = None
    attempt: int = 1
    exit_code: int | None = None
    exit_signal: str = ""  # the signal that ended it ("SIGKILL"): exit_code is then None
    failure_class: str = ""
    stop_reason: str = ""  # why the scheduler stopped it (PEER_FAILED: another rank failed), if it did
    started_at: str | None = None
    finished_at: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Job:
    id: int
    state: str
    name: str = ""
    team: str = ""
    owner: str = ""
    priority: str = ""
    gpu_type: str = ""
    gpu_count: int = 0
    pending_reason: dict | None = None
    estimated_start: str | None = None
    likely_start: str | None = None
    estimated_start_as_of: str | None = None  # when the forecast's snapshot was taken
    estimated_start_stale: bool = False  # the forecast is no longer being refreshed
    submitted_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    failure_class: str = ""
    tasks: tuple[Task, ...] = ()
    # The job's detail, while its running ranks are being stopped: {cause, message, preempted_for,
    # signal, requested_at, kill_at} (a list's rows and older servers: None).
    stopping: dict | None = None
    group: dict | None = None  # a group's parent: {kind, count, parallelism, pending, running, succeeded, ...}
    parent: int | None = None  # a group's child: the parent's id
    array_index: int | None = None  # an array's element: its index
    trial: int | None = None  # a sweep's trial: its number
    params: dict | None = None  # a sweep's trial: its parameters
    step: str = ""  # a pipeline's step: its name
    existing: bool = False  # submit() answered 200: submitted before with this spec (its client_job_id)
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict) -> Job:
        tasks = _mapping(cls, data).get("tasks")
        built = _build(cls, {**data, "tasks": ()})
        detail = tuple(Task.from_json(task) for task in tasks) if isinstance(tasks, list) else ()
        return dataclasses.replace(built, tasks=detail, raw=data)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED or (self.state == "FAILED" and bool(self.failure_class))

    @property
    def reason(self) -> str:
        return (self.pending_reason or {}).get("message", "")


@dataclasses.dataclass(frozen=True)
class Child(Job):
    """A group's child as `children()` lists it: a job, with its retries and, in a sweep with a
    metric, its summary ({name, best, best_step, last, step, reports}) and rank (1 = best)."""

    retries_used: int = 0
    restarts_used: int = 0
    metric: dict | None = None
    rank: int | None = None
    # A pipeline's step: the steps it comes after, and when it runs after them.
    after: tuple[str, ...] | None = None
    when: str | None = None


@dataclasses.dataclass(frozen=True)
class QueueEntry:
    id: int
    state: str
    position: int | None = None
    name: str = ""
    team: str = ""
    owner: str = ""
    priority: str = ""
    gpu_type: str = ""
    gpu_count: int = 0
    pending_reason: dict | None = None
    estimated_start: str | None = None
    likely_start: str | None = None
    estimated_start_as_of: str | None = None  # as Job's: when the forecast's snapshot was taken
    estimated_start_stale: bool = False  # the forecast is no longer being refreshed
    reserved_nodes: tuple[str, ...] = ()
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def reason(self) -> str:
        return (self.pending_reason or {}).get("message", "")


@dataclasses.dataclass(frozen=True)
class Why:
    job_id: int
    state: str
    reason: Any = None
    histogram: Any = None
    reservation: Any = None
    latest_start: str | None = None
    likely_start: str | None = None
    estimated_start_as_of: str | None = None  # as Job's (None from a server older than the field)
    estimated_start_stale: bool = False
    suggestions: tuple = ()
    stopping: dict | None = None  # as Job's
    ended: dict | None = None  # a finished job: {state, at, by, reason, message}
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A schedule (docs/schedules.md): a spec submitted as a run at each fire time of `cron`.
    `fires` (its detail only): the last fire times, newest first, each {scheduled_for, outcome,
    job, message}."""

    id: int
    name: str = ""
    team: str = ""
    owner: str = ""
    cron: str = ""
    timezone: str = "UTC"
    concurrency: str = ""
    starting_deadline_minutes: int | None = None
    suspended: bool = False
    suspended_reason: str = ""
    next_run_at: str | None = None
    next_run_local: str | None = None
    last_fire_at: str | None = None
    last_outcome: str = ""
    last_job: int | None = None
    fires: tuple = ()
    existing: bool = False  # created with these very settings before (the create answered 200)
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict) -> Schedule:
        built = _build(cls, {**_mapping(cls, data), "fires": ()})
        fires = tuple(Fire.from_json(fire) for fire in data.get("fires") or ())
        return dataclasses.replace(built, fires=fires, raw=data)


@dataclasses.dataclass(frozen=True)
class Fire:
    """One fire time of a schedule and what it came to (`run_schedule` returns the run's)."""

    scheduled_for: str
    outcome: str
    job: int | None = None
    message: str = ""
    fired_at: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class DryRun:
    valid: bool
    can_ever_run: bool | None = None
    placement: Any = None
    reason: Any = None
    suggestions: tuple = ()
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Event:
    id: int
    kind: str
    actor: str = ""
    from_state: str = ""
    to_state: str = ""
    reason: str = ""
    message: str = ""
    created_at: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Team:
    name: str
    parent: str | None = None
    is_division: bool = False
    description: str = ""
    my_role: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Quota:
    resource_class: str
    guaranteed: int = 0
    borrowing_limit: int | None = None
    weight: float = 1.0
    updated_at: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    state: str = ""
    zone: str = ""
    rack: str = ""
    gpu_type: str = ""
    gpu_count: int = 0
    health: str = ""
    admin_state: str = ""
    admin_reason: str = ""
    excluded_gpus: dict = dataclasses.field(default_factory=dict)  # GPU index -> why (a fault)
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class MaintenanceWindow:
    """A maintenance window (docs/maintenance.md): `nodes` drain at `starts_at`, and those it
    drained (`drained`) are uncordoned at `ends_at`."""

    id: int
    target: str = ""
    nodes: tuple = ()
    starts_at: str = ""
    ends_at: str = ""
    duration_hours: float = 0.0
    reason: str = ""
    state: str = ""
    drained: tuple = ()
    created_by: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Token:
    id: int
    name: str = ""
    hint: str = ""
    token: str | None = None  # only when just created: shown once
    created_at: str | None = None
    last_used_at: str | None = None
    expires_at: str | None = None
    revoked_at: str | None = None
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One notification about one job's event to one destination (docs/notifications.md)."""

    id: str
    job: int
    event: str = ""
    channel: str = ""
    target: str = ""
    status: str = ""
    attempts: int = 0
    last_status_code: int | None = None
    last_error: str = ""
    next_try_at: str | None = None
    created_at: str | None = None
    delivered_at: str | None = None
    payload: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """`stopping`: those of `cancelled` whose tasks are still stopping (CANCELLED once they have)."""

    cancelled: tuple = ()
    stopping: tuple = ()
    skipped: tuple = ()
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Submitted:
    """One spec of a batch (POST /api/v1/jobs/batch): `status` 201 created, 200 submitted before
    with the same spec, 409 its client_job_id taken by job `id` with another spec (`detail`)."""

    index: int
    status: int
    id: int
    client_job_id: str | None = None
    name: str = ""
    team: str = ""
    state: str = ""
    detail: str = ""
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


_PLAIN = (
    Submitted,
    Task,
    QueueEntry,
    Why,
    DryRun,
    Event,
    Team,
    Quota,
    Node,
    MaintenanceWindow,
    Token,
    CancelResult,
    Fire,
    Delivery,
)
for _cls in _PLAIN:
    _cls.from_json = classmethod(_build)
