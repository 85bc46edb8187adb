"""Notifications: a user's defaults (NotificationSettings) and one row per message to send
(Delivery), written in the transaction that changed the job's state (an outbox) and sent by
Celery after it commits (notifications/services.py)."""

import secrets
import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from scheduling.notify_spec import DEFAULT_EVENTS, Event  # noqa: F401 (the events are the spec's)
from scheduling.secrets import decrypt_text, encrypt_text


class Channel(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", "waiting to be sent (or to be tried again at next_try_at)"
    SENDING = "SENDING", "a worker is sending it"
    DELIVERED = "DELIVERED", "the receiver answered 2xx (or the mail server took it)"
    FAILED = "FAILED", "gave up after the last attempt"
    REFUSED = "REFUSED", "not sent: the destination is not allowed"


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def new_secret_ciphertext() -> str:
    return encrypt_text(new_secret())


class NotificationSettings(models.Model):
    """A user's default subscription, for every job of theirs whose spec has no `notify`, and
    the secret their webhooks are signed with (per-job webhooks too)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="notification_settings"
    )
    on = models.JSONField(default=list, blank=True)  # events; [] = no default subscription
    webhook = models.CharField(max_length=2000, blank=True)
    email = models.BooleanField(default=False)
    # The signing secret, encrypted at rest with the secret_env keys (scheduling/secrets.py): the
    # account page must show it, so it cannot be a digest.
    secret_ciphertext = models.TextField(default=new_secret_ciphertext, editable=False)
    secret_rotated_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"notification settings of {self.user_id}"

    @property
    def secret(self) -> str | None:
        """None when no configured key reads it any more (services.settings_of makes a new one)."""
        return decrypt_text(self.secret_ciphertext)


class Delivery(models.Model):
    """One message about one event of one job to one destination, with its attempts. `uuid` is
    sent as the X-MLQ-Delivery header: the same on every attempt, for the receiver to dedupe.
    Kept when the job is deleted (`job_ref` keeps its id)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="deliveries")
    job = models.ForeignKey("scheduling.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    job_ref = models.PositiveBigIntegerField()
    event = models.CharField(max_length=16, choices=Event.choices)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=2000)  # the webhook URL or the email address
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # When it is due: PENDING, its next attempt; SENDING, when its worker's claim lapses (a
    # worker that died mid-send leaves it to the sweep).
    next_try_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["user", "-id"], name="delivery_user_idx"),
            models.Index(fields=["job_ref", "-id"], name="delivery_job_idx"),
            # The sweep: rows still to send, by when they are due.
            models.Index(
                fields=["next_try_at"],
                condition=models.Q(status__in=["PENDING", "SENDING"]),
                name="delivery_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.uuid} ({self.event} of job {self.job_ref} by {self.channel})"
