"""The leader's view of the cluster, read from the store into the core's dataclasses.

Reads are `values()` queries, not model instances: a snapshot of 5,000 pending jobs and
30,000 running tasks is built in one pass of each table."""
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings

from scheduling.models import Job, JobState, Node, Task, TaskState
from scheduling.core import model as core
from teams.models import Quota, Team

ACTIVE = (TaskState.ASSIGNED, TaskState.RUNNING)
HOUR = 3600.0


@dataclass
class StoreView:
    """The snapshot plus what applying decisions needs: ids by name, current reasons."""

    snapshot: core.ClusterSnapshot
    node_ids: dict[str, int] = field(default_factory=dict)
    # job -> (reason code, message, reserved nodes, nominated nodes, histogram) as stored now
    reasons: dict[int, tuple] = field(default_factory=dict)
    # job -> (estimated start, likely start) as stored now
    starts: dict[int, tuple] = field(default_factory=dict)


def ts(moment) -> float | None:
    return moment.timestamp() if moment is not None else None


def policy_config() -> core.PolicyConfig:
    """The policy as this deployment configures it."""
    return core.PolicyConfig(min_runtime_by_class=dict(settings.MLQ_PREEMPT_MIN_RUNTIME),
                             reclaim_after_wait_s=settings.MLQ_RECLAIM_AFTER_WAIT_S, order=settings.MLQ_QUEUE_ORDER)


def build_view(*, now, config: core.PolicyConfig | None = None) -> StoreView:
    nodes, node_ids = load_nodes()
    running = load_running(now)
    pending, reasons, starts = _pending()
    snapshot = core.ClusterSnapshot(tuple(nodes), tuple(running), tuple(pending), load_teams(), now.timestamp(),
                                    config or policy_config())
    return StoreView(snapshot, node_ids, reasons, starts)


def load_nodes() -> tuple[list[core.Node], dict[str, int]]:
    found, ids = [], {}
    fields = ("id", "name", "zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "labels", "state")
    for row in Node.objects.values(*fields):
        ids[row["name"]] = row["id"]
        found.append(core.Node(row["name"], row["zone"], row["rack"], row["gpu_type"] or None, row["gpu_count"],
                               row["cpu_count"], row["memory_gb"], row["labels"] or {}, core.NodeState(row["state"])))
    return found, ids


def load_running(now) -> list[core.RunningJob]:
    tasks = defaultdict(list)
    stopping: dict[int, int | None] = {}
    began: dict[int, float] = {}
    saved: dict[int, list[float | None]] = defaultdict(list)
    rows = Task.objects.filter(state__in=ACTIVE).values_list(
        "job_id", "rank", "node__name", "gpu_indices", "stop_reason", "preempted_for_id", "started_at", "assigned_at",
        "last_checkpoint_at")
    for job_id, rank, node, gpus, stop_reason, preempted_for, started_at, assigned_at, checkpoint_at in rows:
        tasks[job_id].append((rank, node, tuple(gpus)))
        saved[job_id].append(ts(checkpoint_at))
        if stop_reason:
            stopping[job_id] = preempted_for
        moment = ts(started_at or assigned_at)
        if moment is not None:
            began[job_id] = min(began.get(job_id, moment), moment)
    jobs = Job.objects.filter(pk__in=tasks).values(
        "id", "team__name", "priority", "gpu_type", "cpu_per_rank", "memory_per_rank_gb", "max_runtime_hours",
        "checkpoint", "preemptions")
    return [_running_job(job, tasks[job["id"]], stopping, began.get(job["id"], now.timestamp()),
                         core.confirmed_checkpoint(saved[job["id"]])) for job in jobs]


def checkpoint_interval_s(checkpoint: dict | None) -> float | None:
    """The spec's checkpoint interval in seconds; None without a checkpoint block."""
    return float(checkpoint.get("interval_minutes", 30)) * 60 if checkpoint else None


def _running_job(job: dict, tasks: list, stopping: dict, started: float,
                 checkpoint_at: float | None) -> core.RunningJob:
    """`started`: when this attempt began (its runtime allowance counts from there);
    `checkpoint_at`: the checkpoint every rank of this attempt has confirmed (None: not yet)."""
    placements = tuple(core.TaskPlacement(rank, node, gpus, job["cpu_per_rank"], job["memory_per_rank_gb"])
                       for rank, node, gpus in sorted(tasks))
    return core.RunningJob(
        job["id"], job["team__name"], job["priority"], job["gpu_type"] or None, placements, started,
        started + job["max_runtime_hours"] * HOUR, preemptible=job["priority"] != "P0",
        checkpointing=job["checkpoint"] is not None, last_checkpoint_at=checkpoint_at,
        preempting=job["id"] in stopping, preempted_for=stopping.get(job["id"]),
        checkpoint_interval_s=checkpoint_interval_s(job["checkpoint"]), preemptions=job["preemptions"],
    )


def _pending() -> tuple[list[core.PendingJob], dict, dict]:
    rows = Job.objects.filter(state=JobState.PENDING, cancel_requested_at__isnull=True).values(
        "id", "team__name", "priority", "gpu_type", "task_count", "gpus_per_task", "cpu_per_rank",
        "memory_per_rank_gb", "node_selector", "topology_hint", "submitted_at", "max_runtime_hours", "not_before",
        "held", "checkpoint", "pending_reason_code", "pending_reason_message", "reserved_nodes",
        "nominated_nodes", "pending_histogram", "estimated_start", "likely_start")
    rows = list(rows)
    unmet = _unmet_dependencies([row["id"] for row in rows])
    yields = _preemptors_waiting([row["id"] for row in rows])
    jobs, reasons, starts = [], {}, {}
    for row in rows:
        shape = core.JobShape(row["gpu_type"] or None, row["task_count"], row["gpus_per_task"], row["cpu_per_rank"],
                              row["memory_per_rank_gb"], row["node_selector"] or {}, core.Topology(row["topology_hint"]))
        jobs.append(core.PendingJob(
            row["id"], row["team__name"], row["priority"], shape, row["submitted_at"].timestamp(),
            row["max_runtime_hours"] * HOUR, ts(row["not_before"]), row["held"], tuple(unmet.get(row["id"], ())),
            checkpointing=row["checkpoint"] is not None, yields_to=yields.get(row["id"]),
            checkpoint_interval_s=checkpoint_interval_s(row["checkpoint"]), nominated=tuple(row["nominated_nodes"]),
        ))
        reasons[row["id"]] = (row["pending_reason_code"], row["pending_reason_message"], row["reserved_nodes"],
                              row["nominated_nodes"], row["pending_histogram"])
        starts[row["id"]] = (row["estimated_start"], row["likely_start"])
    return jobs, reasons, starts


def _unmet_dependencies(job_ids: list[int]) -> dict[int, list[int]]:
    """job -> the jobs it depends on that have not succeeded yet."""
    through = Job.depends_on.through
    unmet = defaultdict(list)
    rows = through.objects.filter(from_job_id__in=job_ids).exclude(to_job__state=JobState.SUCCEEDED).values_list(
        "from_job_id", "to_job_id")
    for job_id, dependency in rows:
        unmet[job_id].append(dependency)
    return {job_id: sorted(deps) for job_id, deps in unmet.items()}


def _preemptors_waiting(job_ids: list[int]) -> dict[int, int]:
    """job -> the job it was last preempted for, where that one is still pending."""
    rows = Task.objects.filter(job_id__in=job_ids, state=TaskState.PENDING, preempted_for__state=JobState.PENDING)
    return dict(rows.values_list("job_id", "preempted_for_id"))


def load_teams() -> tuple[core.Team, ...]:
    """The team tree with each team's quotas, as the core sees it."""
    quotas = defaultdict(dict)
    for row in Quota.objects.values("team_id", "resource_class", "guaranteed", "borrowing_limit", "weight"):
        quotas[row["team_id"]][row["resource_class"]] = core.Quota(row["guaranteed"], row["borrowing_limit"],
                                                                   row["weight"])
    return tuple(core.Team(t["name"], t["parent__name"], quotas.get(t["id"], {}))
                 for t in Team.objects.values("id", "name", "parent__name"))
