"""An admin's tools: quota what-ifs (scheduling/whatif.py) and maintenance windows
(scheduling/maintenance.py)."""

from datetime import UTC

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduling.models.cluster import AdminState


class PreviewState(models.TextChoices):
    QUEUED = "QUEUED", "waiting for a worker"
    RUNNING = "RUNNING", "replaying"
    DONE = "DONE", "done"
    FAILED = "FAILED", "failed"


class QuotaPreview(models.Model):
    """A what-if (scheduling/whatif.py): one team's quota in one class as proposed, replayed
    on the cluster's own history of a window under the current quotas and the proposed ones.
    `progress` (0-1) is what the page polls; `result` holds both replays' figures once DONE;
    `message` says why it FAILED."""

    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="quota_previews")
    resource_class = models.CharField(max_length=24)
    current = models.JSONField(help_text="the quota as it was asked for: guaranteed, borrowing_limit, weight")
    proposed = models.JSONField(help_text="the quota proposed, same fields")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    state = models.CharField(max_length=8, choices=PreviewState.choices, default=PreviewState.QUEUED)
    progress = models.FloatField(default=0.0)
    message = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"preview {self.pk} {self.resource_class} ({self.state})"


class MaintenanceState(models.TextChoices):
    SCHEDULED = "SCHEDULED", "scheduled"
    ACTIVE = "ACTIVE", "active: its nodes are drained"
    DONE = "DONE", "done: its nodes were uncordoned"
    CANCELLED = "CANCELLED", "cancelled"


class MaintenanceWindow(models.Model):
    """An admin's maintenance window (docs/maintenance.md): its nodes drain at `starts_at` and
    are uncordoned at `ends_at`, those it drained only. Jobs whose time limit would run into it
    do not start on its nodes before (scheduling/core/maintenance.py)."""

    target = models.CharField(max_length=300, help_text='what it drains, as named: "rack z1-r3", "3 nodes"')
    nodes = models.JSONField(default=list, help_text="node names, resolved when it was scheduled")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=300)
    state = models.CharField(max_length=10, choices=MaintenanceState.choices, default=MaintenanceState.SCHEDULED)
    # The nodes it drained at its start (not those an admin had cordoned or drained already):
    # the only ones its end uncordons.
    drained = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["starts_at", "id"]
        indexes = [models.Index(fields=["state", "starts_at"], name="maintenance_state_start_idx")]

    def __str__(self) -> str:
        return f"maintenance #{self.pk} ({self.target})"

    @property
    def drain_reason(self) -> str:
        """What its nodes show (and carry as admin_reason) while it drains them."""
        return f"maintenance #{self.pk}: {self.reason} (until {self.ends_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC)"

    def holds(self, node) -> bool:
        """Whether its drain still holds `node`: it drained the node, and the node still carries
        its reason. An admin's cordon or drain since, or a health fault's cordon, replaced the
        reason: the node is theirs, and the window's end leaves it as it is."""
        return (
            node.name in self.drained and node.admin_state != AdminState.NONE and node.admin_reason == self.drain_reason
        )
