"""The leader's view of the cluster, read from the store into the core's dataclasses: the nodes
running jobs and teams (scheduling/cluster.py), and the pending jobs.

Reads are `values()` queries, not model instances: a snapshot of 5,000 pending jobs and
30,000 running tasks is built in one pass of each table."""

from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings

from scheduling.cluster import HOUR, checkpoint_interval_s, load_nodes, load_running, load_teams, ts
from scheduling.core import model as core
from scheduling.models import Job, JobState, Task, TaskState


@dataclass
class StoreView:
    """The snapshot plus what applying decisions needs: ids by name, current reasons."""

    snapshot: core.ClusterSnapshot
    node_ids: dict[str, int] = field(default_factory=dict)
    # job -> (reason code, message, reserved nodes, nominated nodes, histogram) as stored now
    reasons: dict[int, tuple] = field(default_factory=dict)
    # job -> (estimated start, likely start) as stored now
    starts: dict[int, tuple] = field(default_factory=dict)


def policy_config() -> core.PolicyConfig:
    """The policy as this deployment configures it."""
    return core.PolicyConfig(
        min_runtime_by_class=dict(settings.MLQ_PREEMPT_MIN_RUNTIME),
        reclaim_after_wait_s=settings.MLQ_RECLAIM_AFTER_WAIT_S,
        order=settings.MLQ_QUEUE_ORDER,
    )


def build_view(*, now, config: core.PolicyConfig | None = None) -> StoreView:
    nodes, node_ids = load_nodes()
    running = load_running(now)
    pending, reasons, starts = _pending()
    snapshot = core.ClusterSnapshot(
        tuple(nodes),
        tuple(running),
        tuple(pending),
        load_teams(),
        now.timestamp(),
        config or policy_config(),
        # Running children's groups too: the forecast may evict one, which then waits in its group.
        groups=load_groups({job.group for job in (*pending, *running) if job.group is not None}),
    )
    return StoreView(snapshot, node_ids, reasons, starts)


def _pending() -> tuple[list[core.PendingJob], dict, dict]:
    # A group's parent has no tasks of its own: only its children are scheduled.
    rows = Job.objects.filter(state=JobState.PENDING, cancel_requested_at__isnull=True, group_kind="").values(
        "id",
        "parent_id",
        "team__name",
        "priority",
        "gpu_type",
        "task_count",
        "gpus_per_task",
        "cpu_per_rank",
        "memory_per_rank_gb",
        "node_selector",
        "topology_hint",
        "submitted_at",
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
    rows = list(rows)
    unmet = _unmet_dependencies([row["id"] for row in rows])
    yields = _preemptors_waiting([row["id"] for row in rows])
    jobs, reasons, starts = [], {}, {}
    for row in rows:
        shape = core.JobShape(
            row["gpu_type"] or None,
            row["task_count"],
            row["gpus_per_task"],
            row["cpu_per_rank"],
            row["memory_per_rank_gb"],
            row["node_selector"] or {},
            core.Topology(row["topology_hint"]),
        )
        jobs.append(
            core.PendingJob(
                row["id"],
                row["team__name"],
                row["priority"],
                shape,
                row["submitted_at"].timestamp(),
                row["max_runtime_hours"] * HOUR,
                ts(row["not_before"]),
                row["held"],
                tuple(unmet.get(row["id"], ())),
                checkpointing=row["checkpoint"] is not None,
                yields_to=yields.get(row["id"]),
                checkpoint_interval_s=checkpoint_interval_s(row["checkpoint"]),
                nominated=tuple(row["nominated_nodes"]),
                group=row["parent_id"],
            )
        )
        reasons[row["id"]] = (
            row["pending_reason_code"],
            row["pending_reason_message"],
            row["reserved_nodes"],
            row["nominated_nodes"],
            row["pending_histogram"],
        )
        starts[row["id"]] = (row["estimated_start"], row["likely_start"])
    return jobs, reasons, starts


def load_groups(parent_ids: set[int]) -> dict[int, core.Group]:
    rows = Job.objects.filter(pk__in=parent_ids).values_list("id", "group_kind", "group")
    return {job_id: core.Group(kind, group["parallelism"]) for job_id, kind, group in rows}


def _unmet_dependencies(job_ids: list[int]) -> dict[int, list[int]]:
    """job -> the jobs it depends on that have not succeeded yet."""
    through = Job.depends_on.through
    unmet = defaultdict(list)
    rows = (
        through.objects.filter(from_job_id__in=job_ids)
        .exclude(to_job__state=JobState.SUCCEEDED)
        .values_list("from_job_id", "to_job_id")
    )
    for job_id, dependency in rows:
        unmet[job_id].append(dependency)
    return {job_id: sorted(deps) for job_id, deps in unmet.items()}


def _preemptors_waiting(job_ids: list[int]) -> dict[int, int]:
    """job -> the job it was last preempted for, where that one is still pending."""
    rows = Task.objects.filter(job_id__in=job_ids, state=TaskState.PENDING, preempted_for__state=JobState.PENDING)
    return dict(rows.values_list("job_id", "preempted_for_id"))
