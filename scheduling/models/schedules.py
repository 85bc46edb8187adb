"""Schedules: a spec submitted as a run at each fire time (scheduling/schedules.py), and each fire's outcome."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Concurrency(models.TextChoices):
    """What a schedule does at a fire time while its last run is still active (Kubernetes
    CronJob's concurrencyPolicy)."""

    ALLOW = "allow", "start another run beside it"
    FORBID = "forbid", "skip this fire time"
    REPLACE = "replace", "cancel the active run, then start the new one"


class FireOutcome(models.TextChoices):
    SUBMITTED = "SUBMITTED", "a run was submitted"
    REPLACED = "REPLACED", "the active run was cancelled and a run submitted"
    SKIPPED_ACTIVE = "SKIPPED_ACTIVE", "skipped: the last run is still active (forbid)"
    SKIPPED_DEADLINE = "SKIPPED_DEADLINE", "skipped: later than starting_deadline_minutes"
    PAUSED = "PAUSED", "the schedule was suspended: its owner may no longer submit to its team"
    REFUSED = "REFUSED", "the submit was refused"


# The class body below has a field named `timezone`, which hides the module there.
_now = timezone.now


class Schedule(models.Model):
    """A spec submitted as a run at each fire time of `cron` in `timezone` (scheduling/schedules.py).
    `spec` is the normalized job spec as accepted (secret values as "***", their ciphertext
    apart, as on a job); `next_run_at` is the fire time the firers claim, in UTC."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="schedules")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="schedules")
    name = models.CharField(max_length=200)
    spec = models.JSONField()
    secret_env_ciphertext = models.TextField(blank=True, default="", editable=False)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    concurrency = models.CharField(max_length=8, choices=Concurrency.choices, default=Concurrency.ALLOW)
    starting_deadline_minutes = models.PositiveIntegerField(null=True, blank=True)
    suspended = models.BooleanField(default=False)
    suspended_reason = models.CharField(max_length=500, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_fire_at = models.DateTimeField(null=True, blank=True, help_text="the last fire time handled")
    last_outcome = models.CharField(max_length=16, choices=FireOutcome.choices, blank=True)
    last_job = models.ForeignKey("Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        ordering = ["team_id", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="schedule_team_name_unique")]
        indexes = [
            # The firers' one query: what is due now.
            models.Index(fields=["next_run_at"], condition=models.Q(suspended=False), name="schedule_due_idx"),
        ]

    def __str__(self) -> str:
        return f"schedule {self.pk} {self.name}"


class ScheduleFire(models.Model):
    """What one fire time of a schedule came to. Bounded: schedules.HISTORY_KEPT per schedule."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="fires")
    scheduled_for = models.DateTimeField()
    fired_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=FireOutcome.choices)
    job = models.ForeignKey("Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-fired_at", "-id"]
        indexes = [models.Index(fields=["schedule", "-fired_at", "-id"], name="schedule_fire_idx")]

    def __str__(self) -> str:
        return f"{self.scheduled_for:%Y-%m-%d %H:%M} {self.outcome}"
