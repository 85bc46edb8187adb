"""The queue page's rows: what a user may see, filtered, sorted and paginated, with each job's
place in line, reason, GPUs, nodes, time waited or running, and estimated start."""

from dataclasses import dataclass, field

from django.core.paginator import Paginator
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from scheduling.models import Job, JobState, Priority, Task
from scheduling.queue_state import queue_positions
from scheduling.selectors import visible_jobs
from scheduling.states import NOT_STARTED, QUEUED_OR_RUNNING

PAGE_SIZE = 50
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
        )


@dataclass
class Row:
    job: Job
    position: int | None
    nodes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> str:
        job = self.job
        return f"{job.gpu_count} x {job.gpu_type}" if job.gpu_type else f"{job.task_count} x {job.cpu_per_rank} CPU"

    @property
    def clock(self) -> str:
        """How long it has waited (pending) or run (running); blank once it has ended."""
        job, now = self.job, timezone.now()
        if job.state == JobState.RUNNING and job.started_at:
            return "running " + short_duration((now - job.started_at).total_seconds())
        if job.state in NOT_STARTED:
            return "waiting " + short_duration((now - job.submitted_at).total_seconds())
        return ""


def short_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"


def filtered(user, query: QueueQuery) -> QuerySet[Job]:
    jobs = visible_jobs(user)
    if query.team:
        jobs = jobs.filter(team__name=query.team)
    if query.state == "active":
        jobs = jobs.filter(state__in=QUEUED_OR_RUNNING)
    elif query.state != "all":
        jobs = jobs.filter(state=query.state)
    if query.priority:
        jobs = jobs.filter(priority=query.priority)
    if query.mine:
        jobs = jobs.filter(owner=user)
    return jobs


def queue_page(user, query: QueueQuery):
    """(rows, paginator page)."""
    jobs = filtered(user, query)
    positions = queue_positions()
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
    return [Row(job, positions.get(job.pk), _nodes(job)) for job in ordered], page


def _by_position(jobs: QuerySet[Job], positions: dict[int, int]) -> list[int]:
    """Pending jobs in the order the last pass considered them, then the rest, newest first."""
    ids = list(jobs.values_list("id", flat=True))
    return sorted(ids, key=lambda job_id: (positions.get(job_id, 1 << 30), -job_id))


def _with_nodes(jobs) -> QuerySet[Job]:
    tasks = Prefetch("tasks", queryset=Task.objects.select_related("node").only("job_id", "rank", "node__name"))
    return jobs.select_related("team", "owner").prefetch_related(tasks)


def _nodes(job: Job) -> list[str]:
    return sorted({task.node.name for task in job.tasks.all() if task.node})
