"""The node inventory. Liveness (heartbeats) lives in Redis; only state changes land here."""
from django.db import models
from django.utils import timezone

from scheduling.core.model import NodeState as CoreNodeState


NodeState = models.TextChoices("NodeState", [(s.value, s.value) for s in CoreNodeState])


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
    state_changed_at = models.DateTimeField(default=timezone.now)
    registered_at = models.DateTimeField(default=timezone.now)
    first_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["zone", "rack", "name"]
        indexes = [models.Index(fields=["gpu_type", "state"], name="node_class_state_idx")]

    def __str__(self) -> str:
        return self.name

    @property
    def resource_class(self) -> str:
        return f"gpu:{self.gpu_type}" if self.gpu_type else "cpu"
