"""Teams (a tree: division -> team), membership roles, quotas per resource class, API tokens,
and the audit log of who did what."""

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from mlqueue.text import validate_printable

# \Z, not $: "$" also matches before a trailing newline ("research\n").
TEAM_NAME_VALIDATOR = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,62}\Z", "lowercase letters, digits and dashes, starting with a letter or digit"
)


class Team(models.Model):
    """A node of the team tree. A team with no parent is a division."""

    name = models.CharField(max_length=63, unique=True, validators=[TEAM_NAME_VALIDATOR])
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    description = models.CharField(max_length=300, blank=True, validators=[validate_printable])
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_division(self) -> bool:
        return self.parent_id is None

    def ancestors(self) -> list["Team"]:
        """This team's parents, nearest first (up to a cycle, which `clean` refuses: one written
        around it must not hang every permission check that walks the tree)."""
        chain, node, seen = [], self.parent, {self.pk}
        while node is not None and node.pk not in seen:
            seen.add(node.pk)
            chain.append(node)
            node = node.parent
        return chain

    def clean(self):
        """The tree stays a tree: a team is not its own parent, nor its descendants' child."""
        super().clean()
        if self.parent_id is None or self.pk is None:
            return
        if self.parent_id == self.pk or self.pk in {team.pk for team in self.parent.ancestors()}:
            raise ValidationError(
                {"parent": f"{self.parent.name} is {self.name} or a team under it: a team tree has no cycles."}
            )


class Role(models.TextChoices):
    MEMBER = "member", "member"
    LEAD = "lead", "lead"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="membership_user_team_unique")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.team}"


class Quota(models.Model):
    """What a team is guaranteed of one resource class, and how far past it may borrow."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    # A plain string: the classes follow the configured GPU types and the registered nodes
    # (teams/resources.py), and the forms check against those.
    resource_class = models.CharField(max_length=24)
    guaranteed = models.PositiveIntegerField(default=0, help_text="GPUs (or CPU cores) the team is owed")
    borrowing_limit = models.PositiveIntegerField(
        default=0, help_text="how many more than the guarantee the team may borrow while others idle"
    )
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)], help_text="fair-share weight")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__name", "resource_class"]
        constraints = [
            models.UniqueConstraint(fields=["team", "resource_class"], name="quota_team_class_unique"),
            models.CheckConstraint(condition=models.Q(weight__gt=0), name="quota_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.resource_class}: {self.guaranteed} (+{self.borrowing_limit})"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the raw value is shown once, at creation."""

    PREFIX = "mlq_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="the first characters, to tell tokens apart")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="refused from then on; empty: never")

    def __str__(self) -> str:
        return f"{self.hint}… ({self.user})"

    @classmethod
    def issue(cls, *, user, name: str = "", expires_at: datetime | None = None) -> tuple["ApiToken", str]:
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, digest=hash_token(raw), hint=raw[:12], expires_at=expires_at)
        return token, raw

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


class ReportedGpuType(models.Model):
    """A GPU type a registered node has reported (teams/resources.py): its class can be given
    quotas even if MLQ_GPU_TYPES does not name it. Never removed, so a quota on it stays
    editable while its machines are away."""

    name = models.CharField(max_length=20, unique=True)
    first_reported_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EventKind(models.TextChoices):
    SUBMITTED = "SUBMITTED"
    TRANSITION = "TRANSITION"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    STOP_REQUESTED = "STOP_REQUESTED"
    RETRY = "RETRY"
    QUOTA_CHANGED = "QUOTA_CHANGED"
    NODE_STATE = "NODE_STATE"
    SECURITY = "SECURITY"  # tokens created, used, revoked or reset
    LEADER = "LEADER"  # a scheduler took the lead: `data.epoch`, recorded with the epoch bump itself
    CHECKPOINT = "CHECKPOINT"  # a rank confirmed a checkpoint (at most one a minute per job)
    JOB_CHANGED = "JOB_CHANGED"  # a name, priority or time limit changed after submit: `data.field`, before, after
    PRICE_CHANGED = "PRICE_CHANGED"  # an admin set or removed a price (scheduling/pricing.py)
    MAINTENANCE = "MAINTENANCE"  # a maintenance window scheduled, changed, started, ended or cancelled: `data.window`
    SCHEDULE = "SCHEDULE"  # a schedule created, changed, suspended, resumed, run now or deleted: `data.schedule`


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("the event log is append-only")

    def delete(self):
        raise PermissionError("the event log is append-only")


class AuditEvent(models.Model):
    """Who did what, when and why: a job's timeline (its `events`), and the changes to
    quotas, nodes and tokens. Append-only; a job's rows go away only with the job.

    It lives in the lowest app so every app can write it (teams records quota changes, the
    scheduler a job's transitions, the agents app nodes and tokens); the foreign keys name
    the other apps' models by string, so nothing here imports them."""

    job = models.ForeignKey("scheduling.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    team = models.ForeignKey("Team", null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    node = models.ForeignKey("scheduling.Node", null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, help_text="user name, 'scheduler' or 'agent:<node>'")
    from_state = models.CharField(max_length=40, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        db_table = "scheduling_jobevent"  # the table predates the model's move and name
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["job", "created_at"], name="event_job_time_idx"),
            models.Index(fields=["team", "created_at"], name="event_team_time_idx"),
            models.Index(fields=["node", "created_at"], name="event_node_time_idx"),
            # The admin console's recent preemptions and failures.
            models.Index(fields=["kind", "-created_at"], name="event_kind_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.kind} {self.message}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise PermissionError("the event log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("the event log is append-only")
