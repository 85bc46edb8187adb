"""The queue page's rows: what a user may see, filtered, sorted and paginated, with each job's
place in line, reason, GPUs, nodes, time waited or running, and estimated start.

A job group (an array or a sweep) is ONE row, as squeue shows `123_[5-100]`: its pending
indices, its children by state, its parallelism and the best place in line of its pending
children. Its children are not top-level rows; the row expands to them (`group_rows`)."""

from dataclasses import dataclass, field

from django.core.paginator import Paginator
from django.db.models import Prefetch, Q, QuerySet
from django.utils import timezone
from django.utils.html import format_html

from scheduling.group_state import child_counts
from scheduling.groups import summary
from scheduling.models import GroupKind, Job, JobState, Priority, Task
from scheduling.queue_state import queue_positions
from scheduling.selectors import visible_jobs
from scheduling.states import NOT_STARTED, QUEUED_OR_RUNNING
from teams.selectors import team_and_below_ids

PAGE_SIZE = 50
# The place given a job the last pass did not order: after every job in line.
NOT_IN_LINE = 1 << 30
# The children an expanded group row lists; the group's page lists them all.
GROUP_ROWS = 100
# The index ranges a group row names before it elides the rest ("5-9,12,20-31,…").
MAX_RANGES = 6
SORTS = {
    "position": "place in line (pending first)",
    "-submitted": "newest first",
    "submitted": "oldest first",
    "priority": "priority",
    "-id": "job id",
}


@dataclass
class QueueQuery:
    team: str = ""
    state: str = "active"
    priority: str = ""
    mine: bool = False
    sort: str = "position"
    page: int = 1
    search: str = ""  # a job id (a child's finds its group), or words of a name, or an owner

    @classmethod
    def from_params(cls, params) -> "QueueQuery":
        state = params.get("state", "active")
        sort = params.get("sort", "position")
        try:
            page = max(1, int(params.get("page", 1)))
        except ValueError:
            page = 1
        return cls(
            team=params.get("team", ""),
            state=state if state in ("active", "all", *JobState.values) else "active",
            priority=params.get("priority", "") if params.get("priority", "") in Priority.values else "",
            mine=params.get("mine") in ("1", "on", "true"),
            sort=sort if sort in SORTS else "position",
            page=page,
            search=params.get("q", "").strip()[:200],
        )


@dataclass(frozen=True)
class GroupInfo:
    """What a group's row says: its children by state (groups.summary) and which are pending."""

    counts: dict
    pending: str  # squeue's form for an array ("123_[5-9,12]"), "trials 3-19" for a sweep; "" if none

    @property
    def done(self) -> int:
        return self.counts["succeeded"]


@dataclass
class Row:
    job: Job
    position: int | None
    nodes: list[str] = field(default_factory=list)
    group: GroupInfo | None = None

    @property
    def children_noun(self) -> str:
        return {"array": "elements", "sweep": "trials", "pipeline": "steps"}.get(self.job.group_kind, "children")

    @property
    def gpus(self) -> str:
        job = self.job
        if job.group_kind == "pipeline":  # each step asks for its own: the job page lists them
            return "per step"
        each = " each" if self.group else ""
        if job.gpu_type:
            return f"{job.gpu_count} x {job.gpu_type}{each}"
        return f"{job.task_count} x {job.cpu_per_rank} CPU{each}"

    @property
    def clock(self) -> str:
        """How long it has waited (pending) or run (running); blank once it has ended. In a span
        the page's script counts on from (`data-elapsed`, seconds as rendered: the browser's clock
        need not agree with the server's), so the column moves between live refreshes."""
        job, now = self.job, timezone.now()
        if job.state == JobState.RUNNING and job.started_at:
            label, since = "running", job.started_at
        elif job.state in NOT_STARTED:
            label, since = "waiting", job.queued_at  # since its requeue, if any
        else:
            return ""
        seconds = int(max(0, (now - since).total_seconds()))
        return format_html(
            '<span class="clock" data-label="{}" data-elapsed="{}">{} {}</span>',
            label,
            seconds,
            label,
            short_duration(seconds),
        )


def short_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"


def index_ranges(indices: list[int]) -> str:
    """[5, 6, 7, 9, 12, 13] -> "5-7,9,12-13"; past MAX_RANGES ranges the rest is "…"."""
    ranges: list[list[int]] = []
    for index in sorted(indices):
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    parts = [str(low) if low == high else f"{low}-{high}" for low, high in ranges[:MAX_RANGES]]
    return ",".join(parts) + (",…" if len(ranges) > MAX_RANGES else "")


def pending_label(parent: Job, indices: list[int]) -> str:
    """The pending children of a group row: squeue's "123_[5-9,12]" for an array, "trials 3-19"
    for a sweep, "steps train, evaluate" for a pipeline, "" when none waits."""
    if not indices:
        return ""
    if parent.group_kind == GroupKind.ARRAY:
        return f"{parent.pk}_[{index_ranges(indices)}]"
    if parent.group_kind == GroupKind.PIPELINE:
        names = [parent.group["steps"][index]["name"] for index in sorted(indices)]
        shown = ", ".join(names[:MAX_RANGES]) + (", …" if len(names) > MAX_RANGES else "")
        return f"step{'s' if len(names) > 1 else ''} {shown}"
    return f"trial{'s' if len(indices) > 1 else ''} {index_ranges(indices)}"


def filtered(user, query: QueueQuery) -> QuerySet[Job]:
    """Top-level jobs only: a group's children are listed under its row."""
    jobs = visible_jobs(user).filter(parent__isnull=True)
    if query.team:
        jobs = jobs.filter(team_id__in=team_and_below_ids(query.team))
    if query.state == "active":
        jobs = jobs.filter(state__in=QUEUED_OR_RUNNING)
    elif query.state != "all":
        jobs = jobs.filter(state=query.state)
    if query.priority:
        jobs = jobs.filter(priority=query.priority)
    if query.mine:
        jobs = jobs.filter(owner=user)
    if query.search:
        jobs = jobs.filter(searched(query.search))
    return jobs


def searched(text: str) -> Q:
    """The queue's search box: "123" or "#123" is that job (a group's child: its group's row),
    anything else a part of the job's name or its owner's user name."""
    number = text.removeprefix("#")
    if number.isascii() and number.isdigit() and len(number) < 19:  # "²".isdigit(), and int() refuses it
        job_id = int(number)
        return Q(pk=job_id) | Q(pk__in=Job.objects.filter(pk=job_id).values("parent_id"))
    return Q(name__icontains=text) | Q(owner__username=text)


def queue_page(user, query: QueueQuery):
    """(rows, paginator page), in a number of queries that does not grow with the page's jobs
    or their groups' children."""
    jobs = filtered(user, query)
    positions = with_group_positions(queue_positions())
    if query.sort == "position":
        ids = _by_position(jobs, positions)
        page = Paginator(ids, PAGE_SIZE).get_page(query.page)
        by_id = {job.pk: job for job in _with_nodes(Job.objects.filter(pk__in=list(page.object_list)))}
        ordered = [by_id[job_id] for job_id in page.object_list if job_id in by_id]
    else:
        order = {
            "-submitted": ["-submitted_at", "-id"],
            "submitted": ["submitted_at", "id"],
            "priority": ["priority", "submitted_at", "id"],
            "-id": ["-id"],
        }[query.sort]
        page = Paginator(_with_nodes(jobs.order_by(*order)), PAGE_SIZE).get_page(query.page)
        ordered = list(page.object_list)
    groups = group_infos([job for job in ordered if job.group_kind])
    return [Row(job, positions.get(job.pk), _nodes(job), groups.get(job.pk)) for job in ordered], page


def with_group_positions(positions: dict[int, int]) -> dict[int, int]:
    """The positions, plus each group's: the best place in line of its pending children (one
    query, over the jobs the last pass ordered)."""
    if not positions:
        return positions
    children = Job.objects.filter(pk__in=list(positions), parent__isnull=False).values_list("id", "parent_id")
    found = dict(positions)
    for child_id, parent_id in children:
        found[parent_id] = min(found.get(parent_id, NOT_IN_LINE), positions[child_id])
    return found


def group_infos(parents: list[Job]) -> dict[int, GroupInfo]:
    """parent -> its row's counts and pending indices, in two queries for the whole page."""
    if not parents:
        return {}
    ids = [parent.pk for parent in parents]
    counts = child_counts(ids)
    pending: dict[int, list[int]] = {}
    waiting = Job.objects.filter(parent_id__in=ids, state__in=(JobState.PENDING, JobState.PREEMPTED))
    for parent_id, index in waiting.values_list("parent_id", "group_index").order_by():
        pending.setdefault(parent_id, []).append(index)
    return {
        parent.pk: GroupInfo(
            summary(parent, counts.get(parent.pk, {})), pending_label(parent, pending.get(parent.pk, []))
        )
        for parent in parents
    }


def group_rows(parent: Job) -> tuple[list[Row], int]:
    """An expanded group row: its children as ordinary rows, pending ones in line order, then
    by index; at most GROUP_ROWS of them, and how many there are in all."""
    positions = queue_positions()
    children = Job.objects.filter(parent=parent)
    ids = sorted(
        children.values_list("id", "group_index"), key=lambda pair: (positions.get(pair[0], NOT_IN_LINE), pair[1])
    )
    shown = [job_id for job_id, _ in ids[:GROUP_ROWS]]
    by_id = _with_nodes(Job.objects.filter(pk__in=shown)).in_bulk(shown)
    rows = [Row(by_id[job_id], positions.get(job_id), _nodes(by_id[job_id])) for job_id in shown if job_id in by_id]
    return rows, len(ids)


def _by_position(jobs: QuerySet[Job], positions: dict[int, int]) -> list[int]:
    """Pending jobs in the order the last pass considered them, then the rest, newest first."""
    ids = list(jobs.values_list("id", flat=True))
    return sorted(ids, key=lambda job_id: (positions.get(job_id, NOT_IN_LINE), -job_id))


def _with_nodes(jobs) -> QuerySet[Job]:
    tasks = Prefetch("tasks", queryset=Task.objects.select_related("node").only("job_id", "rank", "node__name"))
    return jobs.select_related("team", "owner").prefetch_related(tasks)


def _nodes(job: Job) -> list[str]:
    return sorted({task.node.name for task in job.tasks.all() if task.node})
