"""The node inventory. Liveness (heartbeats) lives in Redis, and in batches here (agents/liveness.py).

A node's `state` is what the scheduler reads: its health (NEW, READY, SUSPECT, LOST, from
heartbeats) unless it is READY, in which case an admin's CORDONED or DRAINING shows instead."""
from django.db import models
from django.utils import timezone

from scheduling.core.model import NodeState as CoreNodeState
from scheduling.core.model import resource_class


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
    state_changed_at = models.DateTimeField(default=timezone.now)
    registered_at = models.DateTimeField(default=timezone.now)
    first_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Written in batches by the web processes (agents/liveness.py), not per heartbeat: the
    # liveness that survives Redis losing its data.
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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
