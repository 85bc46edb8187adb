"""The cluster as the policy core sees it, read from the store: the nodes, the jobs running
on them and the teams with their quotas. The leader's snapshot (scheduling/leader/snapshot.py)
is built from these, and so is the "what would help" panel's view of the cluster now
(scheduling/web/explanations.py).

Reads are `values()` queries, not model instances: 30,000 running tasks are one pass of the table."""

from collections import defaultdict

from django.conf import settings

from scheduling.core import model as core
from scheduling.models import Job, Node, Task
from scheduling.states import ON_NODE
from teams.models import Quota, Team

HOUR = 3600.0


def ts(moment) -> float | None:
    return moment.timestamp() if moment is not None else None


def load_nodes() -> tuple[list[core.Node], dict[str, int]]:
    found, ids = [], {}
    fields = ("id", "name", "zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "labels", "state")
    fields += ("excluded_gpus", "scratch_disk_gb")
    for row in Node.objects.values(*fields):
        ids[row["name"]] = row["id"]
        found.append(
            core.Node(
                row["name"],
                row["zone"],
                row["rack"],
                row["gpu_type"] or None,
                row["gpu_count"],
                row["cpu_count"],
                row["memory_gb"],
                row["labels"] or {},
                core.NodeState(row["state"]),
                tuple(sorted(int(index) for index in row["excluded_gpus"] or ())),
                row["scratch_disk_gb"],
            )
        )
    return found, ids


def load_running(now) -> list[core.RunningJob]:
    tasks = defaultdict(list)
    stopping: dict[int, int | None] = {}
    began: dict[int, float] = {}
    saved: dict[int, list[float | None]] = defaultdict(list)
    rows = Task.objects.filter(state__in=ON_NODE).values_list(
        "job_id",
        "rank",
        "node__name",
        "gpu_indices",
        "stop_reason",
        "preempted_for_id",
        "started_at",
        "assigned_at",
        "last_checkpoint_at",
    )
    for job_id, rank, node, gpus, stop_reason, preempted_for, started_at, assigned_at, checkpoint_at in rows:
        tasks[job_id].append((rank, node, tuple(gpus)))
        saved[job_id].append(ts(checkpoint_at))
        if stop_reason:
            stopping[job_id] = preempted_for
        moment = ts(started_at or assigned_at)
        if moment is not None:
            began[job_id] = min(began.get(job_id, moment), moment)
    jobs = Job.objects.filter(pk__in=tasks).values(
        "id",
        "team__name",
        "priority",
        "gpu_type",
        "cpu_per_rank",
        "memory_per_rank_gb",
        "max_runtime_hours",
        "checkpoint",
        "preemptions",
        "parent_id",
    )
    return [
        _running_job(
            job,
            tasks[job["id"]],
            stopping,
            began.get(job["id"], now.timestamp()),
            core.confirmed_checkpoint(saved[job["id"]]),
        )
        for job in jobs
    ]


def checkpoint_interval_s(checkpoint: dict | None) -> float | None:
    """The spec's checkpoint interval in seconds; None without a checkpoint block."""
    return float(checkpoint.get("interval_minutes", 30)) * 60 if checkpoint else None


def _running_job(
    job: dict, tasks: list, stopping: dict, started: float, checkpoint_at: float | None
) -> core.RunningJob:
    """`started`: when this attempt began (its runtime allowance counts from there);
    `checkpoint_at`: the checkpoint every rank of this attempt has confirmed (None: not yet)."""
    placements = tuple(
        core.TaskPlacement(rank, node, gpus, job["cpu_per_rank"], job["memory_per_rank_gb"])
        for rank, node, gpus in sorted(tasks)
    )
    return core.RunningJob(
        job["id"],
        job["team__name"],
        job["priority"],
        job["gpu_type"] or None,
        placements,
        started,
        started + job["max_runtime_hours"] * HOUR,
        preemptible=job["priority"] != "P0",
        checkpointing=job["checkpoint"] is not None,
        last_checkpoint_at=checkpoint_at,
        preempting=job["id"] in stopping,
        preempted_for=stopping.get(job["id"]),
        checkpoint_interval_s=checkpoint_interval_s(job["checkpoint"]),
        preemptions=job["preemptions"],
        group=job["parent_id"],
    )


def load_teams() -> tuple[core.Team, ...]:
    """The team tree with each team's quotas, as the core sees it."""
    quotas = defaultdict(dict)
    for row in Quota.objects.values("team_id", "resource_class", "guaranteed", "borrowing_limit", "weight"):
        quotas[row["team_id"]][row["resource_class"]] = core.Quota(
            row["guaranteed"], row["borrowing_limit"], row["weight"]
        )
    return tuple(
        core.Team(t["name"], t["parent__name"], quotas.get(t["id"], {}))
        for t in Team.objects.values("id", "name", "parent__name")
    )


def policy_config() -> core.PolicyConfig:
    """The policy as this deployment configures it."""
    return core.PolicyConfig(
        min_runtime_by_class=dict(settings.MLQ_PREEMPT_MIN_RUNTIME),
        reclaim_after_wait_s=settings.MLQ_RECLAIM_AFTER_WAIT_S,
        reclaim_in_turn=settings.MLQ_RECLAIM_IN_TURN,
        nominate_reclaimers=settings.MLQ_RECLAIM_IN_TURN,
        order=settings.MLQ_QUEUE_ORDER,
    )
