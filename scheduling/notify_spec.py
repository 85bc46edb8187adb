"""The `notify` block of a job spec (the notifications app sends what it subscribes to, and
takes the same fields as a user's defaults):

    notify: {on: [started, succeeded, failed, preempted], webhook: "https://hooks.example.com/x", email: true}

`on` defaults to how a job ends (succeeded, failed, cancelled); a webhook, an email or both.
A webhook's URL is checked here as far as it can be without DNS (mlqueue/webhook_addresses.py)."""

from django.conf import settings
from django.db.models import TextChoices
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mlqueue.serializer_fields import ChoiceField
from mlqueue.webhook_addresses import WebhookRefused, check_endpoint
from scheduling.spec import NotifyBlockField, StrictBooleanField, StrictSerializer, StrictStringField


class Event(TextChoices):
    STARTED = "started", "the job started running (each attempt)"
    SUCCEEDED = "succeeded", "the job succeeded"
    FAILED = "failed", "the job failed for good (no retry or restart left)"
    PREEMPTED = "preempted", "the job was preempted, drained or reclaimed (it requeues)"
    CANCELLED = "cancelled", "the job was cancelled"
    EARLY_STOPPED = "early_stopped", "the job was stopped early by its sweep's rule"


# What a subscription without `on` is told: how a job ended.
DEFAULT_EVENTS = [Event.SUCCEEDED.value, Event.FAILED.value, Event.CANCELLED.value]
NOWHERE = "give a webhook URL, email: true, or both: there is nowhere to send these notifications"
NO_EMAIL_ADDRESS = "your account has no email address; set one, or use a webhook"
EVENT_TWICE = "{event!r} is listed twice"


class EventsField(serializers.ListField):
    """A list of events, each once; errors name the entry (`notify.on.2`)."""

    def __init__(self, **kwargs):
        super().__init__(child=ChoiceField(Event.choices), max_length=len(Event.values), **kwargs)

    def to_internal_value(self, data):
        events = super().to_internal_value(data)
        for index, event in enumerate(events):
            if event in events[:index]:
                raise serializers.ValidationError({index: [EVENT_TWICE.format(event=event)]})
        return events


def check_webhook_url(value: str) -> str:
    """The URL, or a ValidationError saying why webhooks may not go there."""
    try:
        check_endpoint(
            value,
            allowed_hosts=settings.MLQ_WEBHOOK_ALLOWED_HOSTS,
            allowed_networks=settings.MLQ_WEBHOOK_ALLOWED_NETWORKS,
        )
    except WebhookRefused as exc:
        raise serializers.ValidationError(str(exc)) from None
    return value.strip()


def check_email(value: bool, user) -> bool:
    """email: true needs an address on the account to send to."""
    if value and user is not None and not user.email:
        raise serializers.ValidationError(NO_EMAIL_ADDRESS)
    return value


class NotifySerializer(StrictSerializer):
    """A job's `notify` block. Pass context={"user": ...} for `email: true` to be checked."""

    on = EventsField(required=False, default=lambda: list(DEFAULT_EVENTS), allow_empty=False)
    webhook = StrictStringField(required=False, max_length=2000)
    email = StrictBooleanField(required=False, default=False)

    def validate_webhook(self, value):
        return check_webhook_url(value)

    def validate_email(self, value):
        return check_email(value, self.context.get("user"))

    def validate(self, attrs):
        if not attrs.get("webhook") and not attrs["email"]:
            raise serializers.ValidationError({"webhook": [NOWHERE]})
        return attrs


def normalized_notify(attrs: dict) -> dict:
    """The block as stored: events in the documented order, only the channels given."""
    found = {"on": [event for event in Event.values if event in attrs["on"]]}
    if attrs.get("webhook"):
        found["webhook"] = attrs["webhook"]
    if attrs["email"]:
        found["email"] = True
    return found


extend_schema_field(NotifySerializer)(NotifyBlockField)  # the API reference's `notify` (see spec.py)
