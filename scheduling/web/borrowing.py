"""Whether a job on its nodes runs on its team's guarantee or on borrowed capacity that a
reclaim may take back, as the scheduler counts it now (`core.fairshare.borrowed_jobs`): not the
`Job.borrowed` flag, which is how its placement stood (QA: a preempted, PENDING job, and a job
made P0, kept "borrowing idle capacity" on its page)."""

from django.db.models import Min
from django.db.models.functions import Coalesce
from django.utils import timezone

from scheduling.core.model import priority_rank, resource_class
from scheduling.models import Job
from scheduling.states import ON_NODE
from teams.models import Quota

GUARANTEE = "GUARANTEE"
BORROWED = "BORROWED"

ON_GUARANTEE = (
    "runs within the guarantee of team {team} ({guaranteed} {unit}): a reclaim does not take it (a job of a higher "
    "priority class still may)"
)
ON_BORROWED = (
    "runs on borrowed capacity, above the guarantee of team {team} ({guaranteed} {unit}; its jobs use {used}): it may "
    "be reclaimed when another team needs its guarantee back"
)
P0_ON_GUARANTEE = "runs within the guarantee of team {team} ({guaranteed} {unit}): a P0 is never reclaimed or preempted"
P0_ON_BORROWED = (
    "runs above the guarantee of team {team} ({guaranteed} {unit}; its jobs use {used}), but a P0 is never reclaimed "
    "or preempted"
)


def capacity(job: Job) -> dict | None:
    """{"runs_on": GUARANTEE or BORROWED, "reclaimable", "message"} for a job on its nodes,
    None otherwise. The team's jobs of its class fill its guarantee in the core's order (1. the
    highest priority class first; 2. the earliest start of their current attempt; 3. job id);
    those past it borrow. A reclaim never takes a P0 (nor preempts one). Two small queries:
    for a job's own answer and page, never a list."""
    if job.state not in ON_NODE or job.group_kind:
        return None
    quota = Quota.objects.filter(team_id=job.team_id, resource_class=resource_class(job.gpu_type or None)).first()
    guaranteed = quota.guaranteed if quota else 0
    used, within = _fill(job, guaranteed)
    if within is None:  # its tasks left their nodes since the job was read
        return None
    unit = job.gpu_type or "CPU"
    figures = {"team": job.team.name, "guaranteed": guaranteed, "unit": unit, "used": used}
    if within:
        said = (P0_ON_GUARANTEE if job.priority == "P0" else ON_GUARANTEE).format(**figures)
        return {"runs_on": GUARANTEE, "reclaimable": False, "message": said}
    if job.priority == "P0":
        return {"runs_on": BORROWED, "reclaimable": False, "message": P0_ON_BORROWED.format(**figures)}
    return {"runs_on": BORROWED, "reclaimable": True, "message": ON_BORROWED.format(**figures)}


def _fill(job: Job, guaranteed: int) -> tuple[int, bool | None]:
    """The units the team's jobs of the class run, and whether `job` is within the guarantee
    (None: it has no task on a node)."""
    now = timezone.now()
    rows = (
        Job.objects.filter(team_id=job.team_id, gpu_type=job.gpu_type, tasks__state__in=ON_NODE)
        .values("id", "priority", "task_count", "gpus_per_task", "cpu_per_rank")
        .annotate(began=Min(Coalesce("tasks__started_at", "tasks__assigned_at")))
    )
    ordered = sorted(rows, key=lambda r: (priority_rank(r["priority"]), r["began"] or now, r["id"]))
    used, within = 0, None
    for row in ordered:
        used += row["task_count"] * (row["gpus_per_task"] if job.gpu_type else row["cpu_per_rank"])
        if row["id"] == job.pk:
            within = used <= guaranteed
    return used, within
