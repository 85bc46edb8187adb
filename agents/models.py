"""What lets a machine join: join tokens. The node inventory itself is the scheduler's
(scheduling/models/cluster.py `Node`)."""

from django.db import models
from django.utils import timezone


class JoinToken(models.Model):
    """A token that lets a new node register (`manage.py create_join_token`). Only its SHA-256
    is stored; the raw value is shown once. Bounded in time and uses, and revocable."""

    PREFIX = "mlqj_"

    name = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the first characters, to tell tokens apart")
    created_by = models.CharField(max_length=150, help_text="who made it (a user name or 'manage.py')")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True, help_text="empty: no limit")
    uses = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.hint}… ({self.name or 'join token'})"
