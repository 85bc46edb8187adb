"""The cluster the scheduler decides over: nodes, jobs, their tasks (ranks) and logs, and the leader lease."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduling.core.model import PRIORITIES, Topology, resource_class
from scheduling.core.model import NodeState as CoreNodeState
from scheduling.core.reasons import NOT_YET_SCHEDULED_MESSAGE, ReasonCode

# TaskState and JobState are declared with their named sets; imported from here as before.
from scheduling.states import ON_NODE, QUEUED_OR_RUNNING, UNSUCCESSFUL, JobState, TaskState  # noqa: F401

# The node inventory. Liveness (heartbeats) lives in Redis, and in batches here (scheduling/liveness.py).
# A node's `state` is what the scheduler reads: its health (NEW, READY, SUSPECT, LOST, from
# heartbeats) unless it is READY, in which case an admin's CORDONED or DRAINING shows instead.
NodeState = models.TextChoices("NodeState", [(s.value, s.value) for s in CoreNodeState])
HEALTH_STATES = (NodeState.NEW, NodeState.READY, NodeState.SUSPECT, NodeState.LOST)


class AdminState(models.TextChoices):
    NONE = "", "schedulable"
    CORDONED = "CORDONED", "cordoned: no new work"
    DRAINING = "DRAINING", "draining: no new work, running tasks move elsewhere"


class TaskIsolation(models.TextChoices):
    UID = "uid", "each task runs as a user of its own"
    NONE = "none", "tasks run as the agent's own user: they can read each other's environment and files"


class Node(models.Model):
    name = models.CharField(max_length=253, unique=True)
    zone = models.CharField(max_length=63)
    rack = models.CharField(max_length=63)
    gpu_type = models.CharField(max_length=20, blank=True, help_text="empty for a CPU node")
    gpu_count = models.PositiveSmallIntegerField(default=0)
    cpu_count = models.PositiveIntegerField()
    memory_gb = models.PositiveIntegerField()
    scratch_disk_gb = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=NodeState.choices, default=NodeState.NEW)
    state_reason = models.CharField(max_length=300, blank=True)
    health = models.CharField(max_length=10, choices=[(s, s) for s in HEALTH_STATES], default=NodeState.NEW)
    admin_state = models.CharField(max_length=10, choices=AdminState.choices, default=AdminState.NONE, blank=True)
    admin_reason = models.CharField(max_length=300, blank=True)
    reclaim_deadline = models.DateTimeField(null=True, blank=True, help_text="spot reclaim: tasks requeued then")
    address = models.CharField(max_length=253, blank=True, help_text="where a gang's rank 0 is reached")
    token_digest = models.CharField(max_length=64, blank=True, db_index=True)
    # How the agent separates tasks from each other and from itself: "uid" (each task runs as a
    # user of its own), "none" (tasks run as the agent's user; the node page warns).
    task_isolation = models.CharField(max_length=10, blank=True, choices=TaskIsolation.choices)
    # Whether the agent runs a job's image (--container-runtime podman or --container-hook): jobs
    # that name an image are placed only where it does. None: not reported (an older agent), not checked.
    runs_images = models.BooleanField(
        null=True, blank=True, help_text="whether its agent runs jobs' images (a container runtime); null: not reported"
    )
    state_changed_at = models.DateTimeField(default=timezone.now)
    registered_at = models.DateTimeField(default=timezone.now)
    first_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Written in batches by the web processes (scheduling/liveness.py), not per heartbeat: the
    # liveness that survives Redis losing its data.
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # GPUs taken out of placement for a fault (agents/health.py): index (a string, as JSON keys
    # are) -> why. The node's other GPUs stay schedulable; an admin puts them back.
    excluded_gpus = models.JSONField(default=dict, blank=True)
    # The faults the health rules have acted on (agents/health.py `Marks`): the same fault,
    # reported again by every heartbeat, cordons or excludes once.
    health_marks = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "agents_node"  # the table predates the model's move from the agents app
        ordering = ["zone", "rack", "name"]
        indexes = [models.Index(fields=["gpu_type", "state"], name="node_class_state_idx")]

    def __str__(self) -> str:
        return self.name

    @property
    def resource_class(self) -> str:
        return resource_class(self.gpu_type)

    @staticmethod
    def effective_state(health: str, admin_state: str) -> str:
        return admin_state if health == NodeState.READY and admin_state else health


class FailureClass(models.TextChoices):
    INFRA = "INFRA", "infrastructure (node lost, lease expired, spot reclaim, preempted)"
    APP = "APP", "application (non-zero exit)"
    TIMEOUT = "TIMEOUT", "past max_runtime"
    CANCELLED = "CANCELLED", "cancelled"
    DEPENDENCY = "DEPENDENCY", "a job it depends on did not end as it required"
    EARLY_STOPPED = "EARLY_STOPPED", "stopped early by its sweep's rule"
    GROUP = "GROUP", "elements of its group failed"


class StopReason(models.TextChoices):
    """Why the scheduler asked a running task to stop (what its exit will mean)."""

    PREEMPTED = "PREEMPTED", "preempted for another job"
    CANCELLED = "CANCELLED", "cancelled"
    TIMEOUT = "TIMEOUT", "past max_runtime"
    DRAIN = "DRAIN", "its node is draining"
    PEER_FAILED = "PEER_FAILED", "another rank of its gang failed"
    REQUEUED = "REQUEUED", "requeued on request"
    EARLY_STOPPED = "EARLY_STOPPED", "stopped early by its sweep's rule"


class Signal(models.TextChoices):
    TERM = "TERM", "SIGTERM: checkpoint and exit"
    KILL = "KILL", "SIGKILL"


Priority = models.TextChoices("Priority", [(p, p) for p in PRIORITIES])
TopologyHint = models.TextChoices("TopologyHint", [(t.name, t.value) for t in Topology])
PendingReasonCode = models.TextChoices("PendingReasonCode", [(c.value, c.value) for c in ReasonCode])


class GroupKind(models.TextChoices):
    """What a group's parent job is: its children are ordinary jobs (scheduling/groups.py)."""

    ARRAY = "array", "array"
    SWEEP = "sweep", "sweep"
    PIPELINE = "pipeline", "pipeline"


class DependencyCondition(models.TextChoices):
    """How a job waits on a job it depends on (scheduling/core/conditions.py decides)."""

    SUCCESS = "success", "after it succeeded"
    FAILURE = "failure", "after it failed"
    ANY = "any", "after it ended, however it ended"


class RestartMode(models.TextChoices):
    RESUME = "resume_from_checkpoint"
    RESTART = "restart"
    FAIL = "fail"


def held_message(name: str, reason: str) -> str:
    """A held job's pending reason, as the job page and `why` show it."""
    return f"held by {name}: {reason}" if reason else f"held by {name}: it will not start until it is released"


class Job(models.Model):
    """One submission. `spec` keeps the normalized spec as accepted; the columns are its
    queryable projection."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    client_job_id = models.CharField(max_length=128, null=True, blank=True)
    spec = models.JSONField()
    spec_digest = models.CharField(max_length=64)

    name = models.CharField(max_length=200)
    image = models.CharField(max_length=500, blank=True)
    command = models.JSONField(default=list)
    env = models.JSONField(default=dict, blank=True)
    # The spec's secret_env values, as one Fernet token (scheduling/secrets.py); `spec` keeps
    # the names with "***". Not editable: no model form (the admin's) shows or changes it.
    secret_env_ciphertext = models.TextField(blank=True, default="", editable=False)
    gpu_type = models.CharField(max_length=20, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpus_per_task = models.PositiveSmallIntegerField(default=0)
    task_count = models.PositiveIntegerField(default=1)
    cpu_per_rank = models.PositiveIntegerField(default=1)
    memory_per_rank_gb = models.PositiveIntegerField(default=4)
    scratch_disk_gb = models.PositiveIntegerField(default=0)
    topology_hint = models.CharField(max_length=20, choices=TopologyHint.choices, default=Topology.NONE.value)
    node_selector = models.JSONField(default=dict, blank=True)
    priority = models.CharField(max_length=2, choices=Priority.choices, default="P2")
    max_runtime_hours = models.FloatField(default=168)
    grace_period_seconds = models.PositiveIntegerField(default=120)
    checkpoint = models.JSONField(null=True, blank=True)
    on_preemption = models.CharField(max_length=24, choices=RestartMode.choices, default=RestartMode.RESUME)
    on_node_failure = models.CharField(max_length=24, choices=RestartMode.choices, default=RestartMode.RESUME)
    max_restarts = models.PositiveIntegerField(default=20)
    max_retries = models.PositiveIntegerField(default=2)
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, related_name="dependents", blank=True, through="JobDependency"
    )
    # Job groups (scheduling/groups.py). A group's parent has a `group_kind`, no tasks of its own
    # and a state derived from its children's; `group` holds what the group decides by: count,
    # parallelism, max_failures and, for a sweep, its seed, metric and early-stop rule.
    group_kind = models.CharField(max_length=10, choices=GroupKind.choices, blank=True)
    group = models.JSONField(default=dict, blank=True)
    # A child's parent and its place among its siblings (an array's index, a sweep's trial
    # number); a sweep trial's parameters.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    group_index = models.PositiveIntegerField(null=True, blank=True)
    params = models.JSONField(null=True, blank=True)
    # A pipeline's step: its name (its `after` and `when` are its dependency edges).
    step_name = models.CharField(max_length=63, blank=True)
    # A sweep's parent: when a trial last reported a metric, and when its early-stop rule last
    # looked (the leader looks again only after new reports).
    metrics_changed_at = models.DateTimeField(null=True, blank=True)
    early_stop_checked_at = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    pending_reason_code = models.CharField(max_length=24, choices=PendingReasonCode.choices, blank=True)
    pending_reason_message = models.TextField(blank=True)
    held = models.BooleanField(default=False)
    # Who held it and why (POST /jobs/{id}/hold), shown as its pending reason until released.
    held_by_name = models.CharField(max_length=150, blank=True)
    held_reason = models.CharField(max_length=500, blank=True)
    # A group's child held by its group's hold, not by one of its own: the group's release
    # releases it (a child held by itself stays held), and a hold of its own replaces it.
    held_with_group = models.BooleanField(default=False, db_default=False)  # db_default: see docs/deploy.md
    not_before = models.DateTimeField(null=True, blank=True, help_text="retry back-off: not placed before this")
    restarts_used = models.PositiveIntegerField(default=0)
    retries_used = models.PositiveIntegerField(default=0)
    # Preemptions, drains and spot reclaims: counted apart, never a budget (core/settle.py).
    preemptions = models.PositiveIntegerField(default=0)
    # Its last requeue resumes from the checkpoint (the verdict's `resume`): MLQ_RESUME of the
    # attempts after it. A requeue "from the start" (restart mode, an application's retry) is not.
    resume_next = models.BooleanField(default=False)
    failure_class = models.CharField(max_length=16, choices=FailureClass.choices, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    # The pooled UID its tasks run as, every rank and attempt (scheduling/task_slots.py): set at
    # its first placement, held until it is over.
    run_slot = models.PositiveIntegerField(null=True, blank=True)
    # Its current attempt's MASTER_PORT, chosen when the attempt is placed: free among the
    # attempts whose rank 0 is on that node (scheduling/assignments.py, MasterPorts). Null on
    # rows placed before it was stored: their port is the hash the attempt was told.
    master_port = models.PositiveIntegerField(null=True, blank=True)
    # Placed above its team's guarantee: first to go when the owner reclaims (display only;
    # the core recomputes who is borrowing each pass).
    borrowed = models.BooleanField(default=False)
    reserved_nodes = models.JSONField(default=list, blank=True)
    # The nodes it was nominated to when it evicted (core.PendingJob.nominated): held for it
    # until the first pass after its victims have stopped. Written with the pending reason.
    nominated_nodes = models.JSONField(default=list, blank=True)
    # The pass's node count for its shape, written with the pending reason where the reason is
    # about room on the nodes: {"histogram": [[why, nodes], ...], "fit": "3/36"}; {} otherwise.
    # The job page shows it instead of rebuilding the cluster on every render.
    pending_histogram = models.JSONField(default=dict, blank=True)
    # The start-time forecast's two starts (scheduling/leader/forecasting.py): the latest start
    # (`estimated_start`, the API's name for it: the start if every job runs to its max_runtime),
    # and the likely start, from the teams' observed runtimes.
    estimated_start = models.DateTimeField(null=True, blank=True)
    likely_start = models.DateTimeField(null=True, blank=True)
    # The spec's `notify` block (scheduling/notify_spec.py); None: the owner's defaults apply. A
    # group's children never notify: their group does, as one job.
    notify = models.JSONField(null=True, blank=True)
    # A run of a schedule (scheduling/schedules.py): which one, and the fire time it is the run of.
    schedule = models.ForeignKey("Schedule", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs")
    scheduled_for = models.DateTimeField(null=True, blank=True)

    submitted_at = models.DateTimeField(default=timezone.now)
    # When it last joined the queue: its submit, or its latest requeue (a preemption, a retry, a
    # lost node, a user's requeue). Queue waits are counted from it (metrics, the queue page).
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "client_job_id"],
                condition=models.Q(client_job_id__isnull=False),
                name="job_team_client_id_unique",
            ),
        ]
        indexes = [
            # The scheduler loads the active jobs; the queue page lists them in order.
            models.Index(
                fields=["priority", "submitted_at", "id"],
                condition=models.Q(state__in=list(QUEUED_OR_RUNNING)),
                name="job_active_order_idx",
            ),
            models.Index(fields=["team", "state", "-id"], name="job_team_state_idx"),
            models.Index(fields=["state", "-id"], name="job_state_idx"),
            models.Index(fields=["owner", "-id"], name="job_owner_idx"),
            models.Index(fields=["parent", "group_index"], name="job_parent_index_idx"),
            # The slots held (scheduling/task_slots.py: HELD), read once per pass that places.
            models.Index(
                fields=["run_slot"],
                condition=models.Q(run_slot__isnull=False)
                & ~(
                    models.Q(state__in=["SUCCEEDED", "CANCELLED", "EARLY_STOPPED", "SKIPPED"])
                    | models.Q(state="FAILED", failure_class__gt="")
                ),
                name="job_run_slot_held_idx",
            ),
            # A group's state counts its children by state at each child's transition, under the
            # parent's lock: an index-only scan (2 ms for 10,000 children) instead of a heap scan (65 ms).
            models.Index(fields=["parent", "state", "failure_class"], name="job_parent_state_idx"),
            models.Index(fields=["schedule", "-id"], name="job_schedule_idx"),
            # The leader's sweep for attempts that ended without a verdict yet.
            models.Index(
                fields=["state"],
                condition=models.Q(failure_class="", state__in=list(UNSUCCESSFUL)),
                name="job_attempt_over_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} {self.name}"

    def new_child(self, *, spec: dict, columns: dict, now, **member) -> "Job":
        """An unsaved child of this group's parent (an element, a trial, a step): the parent's
        team, owner, digest and secrets, its own spec and columns, no client_job_id (only the
        parent is idempotent on it); `member` says which child it is (group_index, params, ...)."""
        return Job(
            team_id=self.team_id,
            owner_id=self.owner_id,
            parent=self,
            spec=spec,
            spec_digest=self.spec_digest,
            secret_env_ciphertext=self.secret_env_ciphertext,
            submitted_at=now,
            queued_at=now,
            updated_at=now,
            **{**columns, "client_job_id": None},
            **member,
        )

    @property
    def reason_code(self) -> str:
        """Why it waits, as the last pass stored it; NOT_YET_SCHEDULED until a pass has."""
        if self.held:  # at once, before the next pass stores it
            return ReasonCode.HELD
        return self.pending_reason_code or ReasonCode.NOT_YET_SCHEDULED

    @property
    def reason_message(self) -> str:
        if self.held:
            return held_message(self.held_by_name, self.held_reason)
        return self.pending_reason_message or NOT_YET_SCHEDULED_MESSAGE


class StartForecast(models.Model):
    """The start forecasts a job got before its first start, kept to measure their accuracy
    (scheduling/forecast_accuracy.py): the first it got and the last one before it started,
    each as the forecast wrote them (`latest`: the "at the latest" bound; `likely`). The
    forecast rewrites the job's own two columns each time a start moves and clears them when
    the job is placed; this row keeps them, and `started_at` is copied from the job at its
    first start, so the row outlives the job."""

    job = models.OneToOneField(Job, null=True, on_delete=models.SET_NULL, related_name="start_forecast")
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="+")
    first_latest = models.DateTimeField(null=True)
    first_likely = models.DateTimeField(null=True)
    first_at = models.DateTimeField(help_text="when the first forecast was written")
    last_latest = models.DateTimeField(null=True)
    last_likely = models.DateTimeField(null=True)
    last_at = models.DateTimeField(help_text="when the last forecast before the start was written")
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The weekly report reads a range of starts, per team or for all.
            models.Index(
                fields=["started_at"], condition=models.Q(started_at__isnull=False), name="startfc_started_idx"
            ),
            models.Index(fields=["team", "started_at"], name="startfc_team_started_idx"),
        ]

    def __str__(self) -> str:
        return f"start forecast of job {self.job_id}"


class JobDependency(models.Model):
    """One edge of `Job.depends_on`: `from_job` waits on `to_job` under `condition`. The table is
    the one Django made for the plain many-to-many, with the condition added."""

    from_job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    to_job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    condition = models.CharField(max_length=8, choices=DependencyCondition.choices, default=DependencyCondition.SUCCESS)

    class Meta:
        db_table = "scheduling_job_depends_on"
        # The name Django gave the plain many-to-many's constraint: the table keeps it.
        constraints = [
            models.UniqueConstraint(
                fields=["from_job", "to_job"], name="scheduling_job_depends_on_from_job_id_to_job_id_c021c760_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"job {self.from_job_id} after job {self.to_job_id} ({self.condition})"


class Task(models.Model):
    """One rank of a job. `attempt` counts its starts; each start carries (epoch, attempt)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    rank = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.PENDING)
    node = models.ForeignKey("Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks")
    # Where the current attempt was placed, kept after a requeue clears `node`: that node's
    # agent may still ship the attempt's last log chunks, and no other node may.
    last_node = models.ForeignKey("Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    gpu_indices = models.JSONField(default=list, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    epoch = models.PositiveBigIntegerField(default=0)
    failure_class = models.CharField(max_length=16, choices=FailureClass.choices, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    exit_signal = models.CharField(max_length=10, blank=True)
    # Why the rank was lost, when not the job's doing and known (core/settle.py's LOST_BECAUSE:
    # the agent's exit cause, or node_lost): the verdict names it.
    exit_cause = models.CharField(max_length=24, blank=True)
    # A stop the scheduler asked for: the agent sends `stop_signal`; past `kill_at`, SIGKILL.
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, blank=True)
    stop_signal = models.CharField(max_length=4, choices=Signal.choices, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    kill_at = models.DateTimeField(null=True, blank=True)
    preempted_for = models.ForeignKey("Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    assigned_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The current attempt's last checkpoint its agent saw confirmed (docs/checkpoints.md);
    # cleared when a new attempt starts.
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    checkpoint_step = models.PositiveBigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job_id", "rank"]
        constraints = [models.UniqueConstraint(fields=["job", "rank"], name="task_job_rank_unique")]
        indexes = [
            # What runs where: the scheduler's snapshot and the agent's assignments.
            models.Index(
                fields=["node", "state"],
                condition=models.Q(state__in=list(ON_NODE)),
                name="task_active_node_idx",
            ),
            models.Index(fields=["state"], name="task_state_idx"),
            # The leader's sweep of overdue grace deadlines.
            models.Index(fields=["kill_at"], condition=models.Q(kill_at__isnull=False), name="task_kill_at_idx"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} rank {self.rank} ({self.state})"


class TaskLog(models.Model):
    """A chunk of a task attempt's stdout or stderr, shipped by its agent (agents/ingest.py
    writes it; the job's logs, in the API and the job page, read it). Its table keeps the name
    it had in the agents app."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    rank = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    stream = models.CharField(max_length=6, choices=[("stdout", "stdout"), ("stderr", "stderr")])
    offset = models.PositiveBigIntegerField(help_text="character offset of this chunk in the stream")
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agents_tasklog"
        ordering = ["job_id", "rank", "attempt", "stream", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["job", "rank", "attempt", "stream", "offset"], name="tasklog_chunk_unique")
        ]


class JobMetric(models.Model):
    """One value a job reported (`mlqueue.report(step=.., name=value)`), shipped by its agent as a
    `metric` event. `seq` is the report's line in the attempt's metrics file: with the rank and
    attempt it makes a report stored once however often the agent resends it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    rank = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    step = models.BigIntegerField()
    name = models.CharField(max_length=100)
    value = models.FloatField()
    reported_at = models.DateTimeField(null=True, blank=True, help_text="the job's own clock")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job_id", "name", "step", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job", "rank", "attempt", "seq", "name"], name="jobmetric_report_unique")
        ]
        indexes = [models.Index(fields=["job", "name", "step"], name="jobmetric_series_idx")]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.name}={self.value:g} at step {self.step}"


class SchedulerLease(models.Model):
    """The single row that says who leads and under which epoch; every leader write is fenced
    by it. `renewed_at` is the database's clock, never a worker's."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    epoch = models.PositiveBigIntegerField(default=0)
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid")
    backend_pid = models.IntegerField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)
    # The holder's lease duration (`run_scheduler --lease`), written with every take and renewal:
    # the lease is live while renewed_at is younger than this by the database's clock.
    lease_seconds = models.FloatField(null=True, blank=True)
    last_pass_ms = models.FloatField(null=True, blank=True)
    last_pass_at = models.DateTimeField(null=True, blank=True)
    # The last start-time forecast written: when the snapshot it simulated was taken (the
    # leader's clock, as the starts are) and how long it took, snapshot to write. The stored
    # starts are as old as `forecast_at` (scheduling/leader/forecasting.py).
    forecast_at = models.DateTimeField(null=True, blank=True)
    forecast_ms = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="scheduler_lease_singleton")]

    def __str__(self) -> str:
        return f"epoch {self.epoch} held by {self.holder or 'nobody'}"
