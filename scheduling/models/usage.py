"""The usage ledger, its daily rollups and the prices its costs read (scheduling/ledger.py,
scheduling/rollup.py, scheduling/accounting.py)."""

from django.db import models
from django.utils import timezone

from scheduling.models.cluster import FailureClass, Priority, StopReason


class LostCause(models.TextChoices):
    """Why an attempt's work since its last confirmed checkpoint was thrown away (the ledger's
    `lost_cause`). A cancel, a user's requeue and a sweep's early stop lose nothing: the
    owner (or their sweep) chose to stop the work."""

    PREEMPTION = "preemption", "preempted for a job of a higher priority"
    # Not RECLAIM (a spot node's): stopped so that another team gets capacity it is guaranteed.
    QUOTA_RECLAIM = "quota_reclaim", "preempted to reclaim capacity another team is guaranteed"
    DRAIN = "drain", "its node was drained"
    RECLAIM = "reclaim", "its spot node was reclaimed"
    NODE_LOSS = "node_loss", "its node or the node's agent was lost"
    # Its agent could not start it (no container runtime for its image, no user to run it as).
    NOT_STARTED = "not_started", "its node agent could not start it"
    FAILURE = "failure", "it failed (non-zero exit, past max_runtime)"


class UsageRecord(models.Model):
    """The usage ledger: one row per attempt of a job, opened when the attempt is placed and
    closed when its last rank ends, in the transitions' own transactions (scheduling/ledger.py).

    Copies what the usage reports need (team, owner, class, size) instead of pointing at the
    job: a row outlives its job's deletion, and a report never joins the jobs table. GPUs and
    CPUs are held from `started_at` (the placement) to `ended_at` (NULL while it runs)."""

    job_id = models.BigIntegerField()
    attempt = models.PositiveIntegerField()
    job_name = models.CharField(max_length=200)
    team_id = models.BigIntegerField()
    team_name = models.CharField(max_length=63)
    owner_id = models.BigIntegerField()
    owner_name = models.CharField(max_length=150)
    resource_class = models.CharField(max_length=24, help_text='"gpu:H100", or "cpu"')
    priority = models.CharField(max_length=2, choices=Priority.choices)
    gpus = models.PositiveIntegerField()
    cpus = models.PositiveIntegerField()
    # When this attempt began waiting: the submit for the first, the end of the one before for a
    # later one (a requeue follows it within a pass).
    queued_at = models.DateTimeField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The job's state as the attempt ended (SUCCEEDED, FAILED, PREEMPTED, CANCELLED,
    # EARLY_STOPPED; PENDING for a placement withdrawn before it ran); "" while it runs.
    outcome = models.CharField(max_length=16, blank=True)
    stop_reason = models.CharField(max_length=16, choices=StopReason.choices, blank=True)
    failure_class = models.CharField(max_length=16, choices=FailureClass.choices, blank=True)
    lost_gpu_hours = models.FloatField(default=0.0)
    lost_cause = models.CharField(max_length=16, choices=LostCause.choices, blank=True)
    # Where the lost work began: the last checkpoint every rank confirmed, or the attempt's start.
    lost_since = models.DateTimeField(null=True, blank=True)
    # The job ran again after this attempt (a retry, a restart, a user's requeue): set when its
    # next attempt opens. The last attempt of a job so far has False: "jobs by outcome" counts those.
    superseded = models.BooleanField(default=False)

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [models.UniqueConstraint(fields=["job_id", "attempt"], name="usage_job_attempt_unique")]
        indexes = [
            # Attempts overlapping [from, to): those that started inside it (by start) and those
            # that started before and ended inside or after it, or still run (by end).
            models.Index(fields=["started_at"], name="usage_started_idx"),
            models.Index(fields=["ended_at"], name="usage_ended_idx"),
            models.Index(fields=["started_at"], condition=models.Q(ended_at__isnull=True), name="usage_open_idx"),
            models.Index(fields=["team_id", "started_at"], name="usage_team_started_idx"),
            models.Index(fields=["owner_id", "started_at"], name="usage_owner_started_idx"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} ({self.outcome or 'running'})"


ROLLUP_KEY = ("day", "team_id", "team_name", "owner_id", "owner_name", "resource_class", "priority")
USAGE_DAY_KEY = (*ROLLUP_KEY, "outcome", "lost_cause")
USAGE_WAIT_DAY_KEY = (*ROLLUP_KEY, "bar")


class UsageRollupKey(models.Model):
    """What the usage reports filter and group by, copied from the ledger row (UsageRecord), and
    the UTC day the figures fall in."""

    day = models.DateField()
    team_id = models.BigIntegerField()
    team_name = models.CharField(max_length=63)
    owner_id = models.BigIntegerField()
    owner_name = models.CharField(max_length=150)
    resource_class = models.CharField(max_length=24)
    priority = models.CharField(max_length=2, choices=Priority.choices)

    class Meta:
        abstract = True


class UsageDay(UsageRollupKey):
    """The closed attempts of the usage ledger summed per UTC day (scheduling/rollup.py): the
    GPU- and CPU-microseconds held in that day (an attempt spanning days split across them),
    and the attempts that ended that day, how, the GPU-hours they lost, and how many of them were
    not their job's last (`superseded`, added when the next attempt opens). Written by the
    transition that closes a ledger row, in its transaction; `manage.py rebuild_usage_rollup`
    rebuilds it from the ledger. Microseconds as integers: sums in any order are exact."""

    outcome = models.CharField(max_length=16, blank=True)
    lost_cause = models.CharField(max_length=16, choices=LostCause.choices, blank=True)
    gpu_us = models.BigIntegerField(default=0)
    cpu_us = models.BigIntegerField(default=0)
    ended = models.PositiveIntegerField(default=0)
    lost_gpu_hours = models.FloatField(default=0.0)
    superseded = models.PositiveIntegerField(default=0, help_text="of `ended`, those the job ran again after")

    class Meta:
        constraints = [models.UniqueConstraint(fields=USAGE_DAY_KEY, name="usage_day_key")]
        indexes = [models.Index(fields=["day"], name="usage_day_day_idx")]


class UsageWaits(UsageRollupKey):
    """How many attempts waited each histogram bar's time (scheduling.accounting.WAIT_BAR)."""

    bar = models.FloatField(help_text="the wait in seconds, to its bar's precision")
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class UsageWaitDay(UsageWaits):
    """The queue waits of the closed attempts that started on a UTC day, for the p50 and p95."""

    class Meta:
        constraints = [models.UniqueConstraint(fields=USAGE_WAIT_DAY_KEY, name="usage_wait_day_key")]
        indexes = [models.Index(fields=["day"], name="usage_wait_day_day_idx")]


class UsageWaitWeek(UsageWaits):
    """The same for a week (`day`: its Monday, UTC): a quarter's waits are as many rows per day
    as attempts waited different times, so its whole weeks are read from here."""

    class Meta:
        constraints = [models.UniqueConstraint(fields=USAGE_WAIT_DAY_KEY, name="usage_wait_week_key")]
        indexes = [models.Index(fields=["day"], name="usage_wait_week_day_idx")]


class Price(models.Model):
    """What an hour of a resource class costs from `effective_from` on, until the class's next
    price: a GPU-hour (GPU classes) and a CPU-hour (every class: a GPU job's CPUs too). A
    change is a new row; the ledger's costs split an attempt at each change
    (scheduling/accounting.py). Before a class's first price its hours cost nothing."""

    resource_class = models.CharField(max_length=24, help_text='"gpu:H100", or "cpu"')
    gpu_hour = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    cpu_hour = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    effective_from = models.DateTimeField()
    set_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["resource_class", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["resource_class", "effective_from"], name="price_class_from_unique"),
            models.CheckConstraint(condition=models.Q(gpu_hour__gte=0, cpu_hour__gte=0), name="price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_class} from {self.effective_from:%Y-%m-%d %H:%M}"
