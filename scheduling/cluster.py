"""The cluster as the policy core sees it, read from the store: the nodes, the jobs running
on them and the teams with their quotas. The leader's snapshot (scheduling/store_view.py)
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


def load_nodes(kept: "KeptReads | None" = None) -> tuple[list[core.Node] | tuple[core.Node, ...], dict[str, int]]:
    """Every node, and its id by name. `kept`: the last read's nodes, given back as the same
    tuple while no node's values have changed."""
    found, ids = [], {}
    fields = ("id", "name", "zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "labels", "state")
    fields += ("excluded_gpus", "scratch_disk_gb", "runs_images")
    rows = list(Node.objects.values_list(*fields))
    if kept is not None and kept.nodes is not None and kept.nodes[0] == rows:
        return kept.nodes[1], kept.nodes[2]
    for row in (dict(zip(fields, values, strict=True)) for values in rows):
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
                row["runs_images"],
            )
        )
    if kept is not None:
        kept.nodes = (rows, tuple(found), ids)
        return kept.nodes[1], ids
    return found, ids


class KeptReads:
    """The jobs the leader's last read built, each with the values it was built from. A job
    read again with the same values is given back as the same object, not an equal new one:
    the kept `Scheduler` then finds its own objects (its `_as_kept` compares by identity first,
    so it need not compare every field of thousands of jobs), and the read builds only what
    changed. Each read keeps only the jobs it saw."""

    def __init__(self):
        self.nodes: tuple | None = None  # (the rows, the nodes, their ids by name)
        self.running: dict[int, tuple] = {}  # job id -> (values, RunningJob)
        self.pending: dict[int, tuple] = {}  # job id -> (values, PendingJob)

    @staticmethod
    def built(kept: dict[int, tuple], job_id: int, values: tuple):
        """The object the last read built for `job_id` from these same `values`, else None."""
        old = kept.get(job_id)
        return old[1] if old is not None and old[0] == values else None


def load_running(now, kept: KeptReads | None = None) -> list[core.RunningJob]:
    """`kept`: the last read's jobs, given back for those whose values have not changed (and
    updated to this read's)."""
    tasks = defaultdict(list)
    stopping: dict[int, int | None] = {}
    began: dict[int, float] = {}
    forced: dict[int, float] = {}  # a stopping job's latest SIGKILL time
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
        "kill_at",
    )
    for job_id, rank, node, gpus, stop_reason, preempted_for, started_at, assigned_at, checkpoint_at, kill_at in rows:
        tasks[job_id].append((rank, node, tuple(gpus)))
        saved[job_id].append(ts(checkpoint_at))
        if stop_reason:
            stopping[job_id] = preempted_for
            if kill_at is not None:
                forced[job_id] = max(forced.get(job_id, 0.0), kill_at.timestamp())
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
    kept = kept if kept is not None else KeptReads()
    found: dict[int, tuple] = {}
    running = []
    for job in jobs:
        job_id = job["id"]
        started, checkpoint = began.get(job_id, now.timestamp()), core.confirmed_checkpoint(saved[job_id])
        placed = tasks[job_id]
        stop_by = forced.get(job_id)
        values = (tuple(job.values()), tuple(sorted(placed)), stopping.get(job_id, False), started, checkpoint, stop_by)
        made = kept.built(kept.running, job_id, values) or _running_job(
            job, placed, stopping, started, checkpoint, stop_by
        )
        found[job_id] = (values, made)
        running.append(made)
    kept.running = found
    return running


def checkpoint_interval_s(checkpoint: dict | None) -> float | None:
    """The spec's checkpoint interval in seconds; None without a checkpoint block."""
    return float(checkpoint.get("interval_minutes", 30)) * 60 if checkpoint else None


def _running_job(
    job: dict, tasks: list, stopping: dict, started: float, checkpoint_at: float | None, stop_by: float | None = None
) -> core.RunningJob:
    """`started`: when this attempt began (its runtime allowance counts from there);
    `checkpoint_at`: the checkpoint every rank of this attempt has confirmed (None: not yet);
    `stop_by`: while it stops, when its stop is forced."""
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
        stop_by=stop_by,
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
        reclaim_in_turn_backlog=settings.MLQ_RECLAIM_IN_TURN_BACKLOG,
        # "always" has no gate to turn off
        reclaim_in_turn_backlog_off=(
            settings.MLQ_RECLAIM_IN_TURN_BACKLOG_OFF if settings.MLQ_RECLAIM_IN_TURN_BACKLOG is not None else None
        ),
        order=settings.MLQ_QUEUE_ORDER,
        overdue_since_requeue=settings.MLQ_OVERDUE_SINCE_REQUEUE,
        reclaim_max_evictions=settings.MLQ_RECLAIM_MAX_EVICTIONS,
        reclaim_longest_first=settings.MLQ_RECLAIM_LONGEST_FIRST,
        reclaim_checkpoint_step_s=settings.MLQ_RECLAIM_CHECKPOINT_STEP_S,
        parent_quota_figures=settings.MLQ_QUOTAS_PUBLIC,
    )
