"""The scheduler's view of the cluster, read from the store into the core's dataclasses (the
leader's passes, the forecast, the dry run): the nodes,
running jobs and teams (scheduling/cluster.py), and the pending jobs.

Reads are `values()` queries, not model instances: a snapshot of 5,000 pending jobs and
30,000 running tasks is built in one pass of each table.

A job group's children load as a queue head (as Kueue considers only queue heads): per group,
at most its parallelism of the children that may start now (see `_group_heads`). An array of
10,000 elements at most 16 at once costs a pass 16 rows, not 10,000; the children left out get
the reason their group's loaded ones got (scheduling/leader/apply.py `_write_left_out_reasons`)."""

from collections import defaultdict
from dataclasses import dataclass, field
from operator import itemgetter

from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, RowNumber

from scheduling import dependencies
from scheduling.cluster import (
    HOUR,
    KeptReads,
    checkpoint_interval_s,
    load_nodes,
    load_running,
    load_teams,
    policy_config,
    ts,
)
from scheduling.core import model as core
from scheduling.core.conditions import Edge, Status
from scheduling.maintenance import load_windows
from scheduling.models import Job, JobState, Task, TaskState
from scheduling.states import ON_NODE

PENDING_FIELDS = (
    "id",
    "parent_id",
    "team__name",
    "priority",
    "gpu_type",
    "task_count",
    "gpus_per_task",
    "cpu_per_rank",
    "memory_per_rank_gb",
    "scratch_disk_gb",
    "names_image",
    "node_selector",
    "topology_hint",
    "submitted_at",
    "queued_at",
    "max_runtime_hours",
    "not_before",
    "held",
    "checkpoint",
    "pending_reason_code",
    "pending_reason_message",
    "reserved_nodes",
    "nominated_nodes",
    "pending_histogram",
    "estimated_start",
    "likely_start",
)


@dataclass
class StoreView:
    """The snapshot plus what applying decisions needs: ids by name, current reasons."""

    snapshot: core.ClusterSnapshot
    node_ids: dict[str, int] = field(default_factory=dict)
    # job -> (reason code, message, reserved nodes, nominated nodes, histogram) as stored now
    reasons: dict[int, tuple] = field(default_factory=dict)
    # job -> (estimated start, likely start) as stored now
    starts: dict[int, tuple] = field(default_factory=dict)
    # group -> its children in the snapshot, head first, for each group with children that may
    # start now left out of it (they wait as their group's loaded children do)
    left_out: dict[int, list[int]] = field(default_factory=dict)


def build_view(*, now, config: core.PolicyConfig | None = None, kept: KeptReads | None = None) -> StoreView:
    """The pass's view: single jobs and each group's head (`_group_heads`). `kept`: the last
    view's reads (the leader keeps them): nodes and jobs read with the same values come back
    as the same objects (see `KeptReads`)."""
    nodes, node_ids = load_nodes(kept)
    running = load_running(now, kept)
    starters = {job.preempted_for for job in running if job.preempting and job.preempted_for is not None}
    heads, left_out = _group_heads(now, starters)
    rows = sorted([*_waiting().filter(parent__isnull=True).values(*PENDING_FIELDS), *heads], key=lambda r: -r["id"])
    view = _view(rows, nodes, node_ids, running, now, config or policy_config(), kept)
    view.left_out = left_out
    return view


def build_everyone(*, now, config: core.PolicyConfig | None = None) -> StoreView:
    """The view with every pending job, each group's children all: the forecast's, which must
    see the whole queue. It costs what the whole queue costs: built only when a forecast starts."""
    nodes, node_ids = load_nodes()
    rows = list(_waiting().values(*PENDING_FIELDS))
    return _view(rows, nodes, node_ids, load_running(now), now, config or policy_config())


def _view(rows: list[dict], nodes, node_ids, running, now, config, kept: KeptReads | None = None) -> StoreView:
    pending, reasons, starts = _pending(rows, kept)
    snapshot = core.ClusterSnapshot(
        nodes if isinstance(nodes, tuple) else tuple(nodes),
        tuple(running),
        tuple(pending),
        load_teams(),
        now.timestamp(),
        config,
        # Running children's groups too: the forecast may evict one, which then waits in its group.
        groups=load_groups({job.group for job in (*pending, *running) if job.group is not None}),
        maintenance=load_windows(now),
    )
    return StoreView(snapshot, node_ids, reasons, starts)


def _waiting():
    # A group's parent has no tasks of its own: only its children are scheduled.
    waiting = Job.objects.filter(state=JobState.PENDING, cancel_requested_at__isnull=True, group_kind="")
    # Whether it names an image, not the image's text: all a pass needs of it.
    return waiting.annotate(names_image=ExpressionWrapper(~Q(image=""), output_field=BooleanField()))


def _group_heads(now, starters: set[int]) -> tuple[list[dict], dict[int, list[int]]]:
    """Per group, the children that may start now, at most its parallelism, in this order:
    1. those that hold nodes for themselves (nominated when they evicted) or whose victims are
       stopping (`starters`): each takes a slot of the group already (the core counts them), and
       there are never more of them than the parallelism;
    2. then by index (an array's element, a sweep's trial), then by id.
    A held child (its reason is HELD from the hold on) and one in retry back-off past `now`
    (BACKOFF, written at its requeue) cannot start now and are not loaded. One query for every
    group: ROW_NUMBER() over each group's children, kept up to the group's parallelism.
    Returns the rows, and per group whose head leaves children out, its loaded children's ids."""
    eligible = (
        _waiting().filter(parent__isnull=False, held=False).filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
    )
    starting = Case(When(Q(pk__in=starters) | ~Q(nominated_nodes=[]), then=Value(0)), default=Value(1))
    ranked = eligible.annotate(
        parallelism=Cast(KeyTextTransform("parallelism", "parent__group"), IntegerField()),
        head_rank=Window(RowNumber(), partition_by=[F("parent_id")], order_by=[starting, "group_index", "id"]),
        eligible_count=Window(Count("id"), partition_by=[F("parent_id")]),
    ).filter(head_rank__lte=F("parallelism"))
    # Ranked on ids alone, then the heads' rows: the window sorts narrow rows, not whole jobs.
    heads = list(ranked.values_list("id", "parent_id", "head_rank", "eligible_count"))
    by_group: dict[int, list[tuple]] = defaultdict(list)
    for head in heads:
        by_group[head[1]].append(head)
    left_out = {
        group: [head[0] for head in sorted(loaded, key=lambda h: h[2])]
        for group, loaded in by_group.items()
        if loaded[0][3] > len(loaded)
    }
    return list(_waiting().filter(pk__in=[head[0] for head in heads]).values(*PENDING_FIELDS)), left_out


# What a PendingJob is built from: every field read but the reasons and forecast starts, which
# the leader rewrites. Equal values, with the same unmet edges and preemptor, give an equal job.
REWRITTEN = (
    "pending_reason_code",
    "pending_reason_message",
    "reserved_nodes",
    "pending_histogram",
    "estimated_start",
    "likely_start",
)
JOB_VALUES = itemgetter(*(name for name in PENDING_FIELDS if name not in REWRITTEN))


def _pending(rows: list[dict], kept: KeptReads | None = None) -> tuple[list[core.PendingJob], dict, dict]:
    unmet = _unmet_dependencies([row["id"] for row in rows])
    yields = _preemptors_waiting([row["id"] for row in rows])
    kept = kept if kept is not None else KeptReads()
    jobs, reasons, starts = [], {}, {}
    found: dict[int, tuple] = {}
    for row in rows:
        job_id = row["id"]
        edges, preemptor = unmet.get(job_id, ()), yields.get(job_id)
        values = (JOB_VALUES(row), edges, preemptor)
        made = kept.built(kept.pending, job_id, values) or _pending_job(row, edges, preemptor)
        found[job_id] = (values, made)
        jobs.append(made)
        reasons[job_id] = (
            row["pending_reason_code"],
            row["pending_reason_message"],
            row["reserved_nodes"],
            row["nominated_nodes"],
            row["pending_histogram"],
        )
        starts[job_id] = (row["estimated_start"], row["likely_start"])
    kept.pending = found
    return jobs, reasons, starts


def _pending_job(row: dict, edges: tuple, preemptor: int | None) -> core.PendingJob:
    """`edges`: what it still waits on (`_unmet_dependencies`); `preemptor`: the job it was
    last preempted for, while that one waits (`_preemptors_waiting`)."""
    shape = core.JobShape(
        row["gpu_type"] or None,
        row["task_count"],
        row["gpus_per_task"],
        row["cpu_per_rank"],
        row["memory_per_rank_gb"],
        row["node_selector"] or {},
        core.Topology(row["topology_hint"]),
        row["scratch_disk_gb"],
        row["names_image"],
    )
    return core.PendingJob(
        row["id"],
        row["team__name"],
        row["priority"],
        shape,
        row["submitted_at"].timestamp(),
        row["max_runtime_hours"] * HOUR,
        ts(row["not_before"]),
        row["held"],
        tuple(edge.job_id for edge in edges),
        checkpointing=row["checkpoint"] is not None,
        yields_to=preemptor,
        checkpoint_interval_s=checkpoint_interval_s(row["checkpoint"]),
        nominated=tuple(row["nominated_nodes"]),
        group=row["parent_id"],
        waiting_conditions=tuple(edge.condition for edge in edges),
        queued_at=row["queued_at"].timestamp(),
    )


def load_groups(parent_ids: set[int]) -> dict[int, core.Group]:
    """Each group's limit, and its children that failed and await the leader's verdict
    (core.Group.settling; one whose tasks are still on nodes counts as running). One query."""
    settling = (
        Job.objects.filter(parent=OuterRef("pk"), state=JobState.FAILED, failure_class="")
        .exclude(Exists(Task.objects.filter(job=OuterRef("pk"), state__in=ON_NODE)))
        .order_by()
        .values("parent")
        .annotate(n=Count("*"))
        .values("n")
    )
    rows = (
        Job.objects.filter(pk__in=parent_ids)
        .annotate(settling=Coalesce(Subquery(settling), 0))
        .values_list("id", "group_kind", "group", "settling")
    )
    return {job_id: core.Group(kind, group["parallelism"], settling) for job_id, kind, group, settling in rows}


def _unmet_dependencies(job_ids: list[int]) -> dict[int, tuple[Edge, ...]]:
    """job -> the edges it still waits on (core/conditions.py), in one query. One that can never be
    met waits on the edges that broke until the leader's sweep ends it (before the next pass)."""
    found = {}
    for job_id, verdict in dependencies.verdicts(job_ids).items():
        if verdict.status != Status.MET:
            found[job_id] = verdict.waiting or verdict.broken
    return found


def _preemptors_waiting(job_ids: list[int]) -> dict[int, int]:
    """job -> the job it was last preempted for, where that one is still pending. The waiting
    tasks that name a preemptor are few (victims back in the queue), so they are read first
    and matched to `job_ids` here: with the ids in the query, Postgres joined every waiting
    task to every waiting job when its statistics were off (1.8 s at 5,000 waiting)."""
    rows = Task.objects.filter(
        state=TaskState.PENDING, preempted_for__isnull=False, preempted_for__state=JobState.PENDING
    ).values_list("job_id", "preempted_for_id")
    wanted = set(job_ids)
    return {job_id: preemptor for job_id, preemptor in rows if job_id in wanted}
