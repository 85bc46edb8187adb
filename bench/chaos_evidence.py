"""What the fault campaign's verdict is drawn from, read once at the end:

- the ledger every job process appended to (`JOB ATTEMPT RANK WHAT TIME`, tests/e2e/ledger_job.py):
  when each attempt of each task really ran, whatever the database believes;
- the database: jobs, task rows, and the event log (transitions with their epochs, the LEADER
  events written with each epoch bump, stop requests, retries, node states);
- the agents' logs: which node started each attempt, and each time an agent's lease ran out
  and it killed its tasks.
All times are epoch seconds of this one machine's clock."""

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.chaos_store import Store

# What a job process notes: `start`, a `tick` while alive, `end` when done, `checkpoint` when
# it exits on SIGTERM, `term` when it ignores one.
SIGNALLED = ("checkpoint", "term")
AGENT_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ mlqueue\.agent: (\S+): (.*)$")
STARTED = re.compile(r"^started job (\d+) rank (\d+) attempt (\d+) ")


@dataclass
class Span:
    """One attempt of one task, as its own process saw it."""

    job: int
    rank: int
    attempt: int
    first: float
    last: float
    marks: dict[str, float] = field(default_factory=dict)  # what -> first time noted (ticks left out)

    @property
    def signalled_at(self) -> float | None:
        times = [self.marks[what] for what in SIGNALLED if what in self.marks]
        return min(times) if times else None

    @property
    def finished(self) -> bool:
        return "end" in self.marks


@dataclass(frozen=True)
class Event:
    id: int
    job: int | None
    kind: str
    reason: str
    to_state: str
    data: dict
    at: float
    node: str | None
    message: str


@dataclass(frozen=True)
class JobRow:
    id: int
    client_job_id: str
    state: str
    reason: str
    failure_class: str
    restarts_used: int


@dataclass(frozen=True)
class TaskRow:
    job: int
    rank: int
    epoch: int
    state: str
    assigned_at: float | None
    kill_at: float | None


@dataclass(frozen=True)
class LeaseKill:
    node: str
    at: float
    line: str


@dataclass
class Evidence:
    spans: dict[tuple[int, int, int], Span]
    jobs: dict[int, JobRow]
    events: list[Event]
    tasks: list[TaskRow]
    lease_epoch: int
    lease_kills: list[LeaseKill]
    read_at: float
    started_on: dict[tuple[int, int, int], str] = field(default_factory=dict)  # (job, rank, attempt) -> node

    def job_events(self, job: int, kind: str | None = None) -> list[Event]:
        return [e for e in self.by_job.get(job, ()) if kind is None or e.kind == kind]

    def __post_init__(self):
        self.by_job: dict[int, list[Event]] = {}
        for event in self.events:
            if event.job is not None:
                self.by_job.setdefault(event.job, []).append(event)

    def nodes_of(self, job: int, *, before: float) -> set[str]:
        """The nodes of the job's placement in force at `before` (its last PLACED event)."""
        placed = [e for e in self.job_events(job, "TRANSITION") if e.reason == "PLACED" and e.at <= before]
        return set(placed[-1].data.get("nodes", ())) if placed else set()

    def nodes_ran(self, span: Span) -> set[str]:
        """The node that started this attempt, from its agent's log; else the job's placement
        (for a gang, every node of it)."""
        node = self.started_on.get((span.job, span.rank, span.attempt))
        return {node} if node else self.nodes_of(span.job, before=span.first + 1)

    def nodes_before(self, event: Event) -> set[str]:
        """The nodes of the job's placement that `event` is about: the last PLACED event written
        before it (by id: a pass stamps all its writes with one time, the requeue's new placement
        included)."""
        placed = [e for e in self.job_events(event.job, "TRANSITION") if e.reason == "PLACED" and e.id < event.id]
        return set(placed[-1].data.get("nodes", ())) if placed else set()


def read_ledger(path: Path) -> dict[tuple[int, int, int], Span]:
    spans: dict[tuple[int, int, int], Span] = {}
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        try:
            job, attempt, rank, what, when = line.split()
            key, at = (int(job), int(rank), int(attempt)), float(when)
        except ValueError:
            continue  # the line a running job is writing as the ledger is read
        span = spans.get(key)
        if span is None:
            span = spans[key] = Span(key[0], key[1], key[2], at, at)
        span.first, span.last = min(span.first, at), max(span.last, at)
        if what != "tick":
            span.marks.setdefault(what, at)
    return spans


def read_agent_logs(logs: list[str]) -> tuple[list[LeaseKill], dict[tuple[int, int, int], str]]:
    """(the lease kills, the node that started each attempt) from the agents' logs."""
    kills, started_on = [], {}
    for text in logs:
        for match in filter(None, map(AGENT_LINE.match, text.splitlines())):
            started = STARTED.match(match[3])
            if started:
                started_on[(int(started[1]), int(started[2]), int(started[3]))] = match[2]
            elif match[3].startswith("lease expired"):
                at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                kills.append(LeaseKill(match[2], at, match[3]))
    return kills, started_on


def read_database(store: Store) -> tuple[dict[int, JobRow], list[Event], list[TaskRow], int]:
    jobs = {
        row[0]: JobRow(*row)
        for row in store.rows(
            "SELECT id, coalesce(client_job_id, ''), state, pending_reason_code, failure_class, restarts_used "
            "FROM scheduling_job"
        )
    }
    events = [
        Event(*row)
        for row in store.rows(
            "SELECT e.id, e.job_id, e.kind, e.reason, e.to_state, e.data, extract(epoch FROM e.created_at)::float8, "
            "n.name, left(e.message, 200) FROM scheduling_jobevent e LEFT JOIN agents_node n ON n.id = e.node_id "
            "ORDER BY e.id"
        )
    ]
    tasks = [
        TaskRow(*row)
        for row in store.rows(
            "SELECT job_id, rank, epoch, state, extract(epoch FROM assigned_at)::float8, "
            "extract(epoch FROM kill_at)::float8 FROM scheduling_task"
        )
    ]
    lease = store.rows("SELECT epoch FROM scheduling_schedulerlease WHERE id = 1")
    return jobs, events, tasks, lease[0][0] if lease else 0


def gather(store: Store, ledger: Path, agent_logs: list[str], *, read_at: float) -> Evidence:
    jobs, events, tasks, lease_epoch = read_database(store)
    kills, started_on = read_agent_logs(agent_logs)
    return Evidence(read_ledger(ledger), jobs, events, tasks, lease_epoch, kills, read_at, started_on)
