"""A user's default subscription (the account page, /api/v1/notifications/settings): the fields
of a job spec's `notify` block (scheduling/notify_spec.py), where `on: []` subscribes to nothing."""

from rest_framework import serializers

from scheduling.notify_spec import NOWHERE, Event, EventsField, StrictBooleanField, check_email, check_webhook_url
from scheduling.spec import StrictSerializer, StrictStringField


class NotificationSettingsSerializer(StrictSerializer):
    """A user's defaults: `on: []` (the default) subscribes them to nothing."""

    on = EventsField(required=False, allow_empty=True)
    webhook = StrictStringField(required=False, allow_blank=True, max_length=2000)
    email = StrictBooleanField(required=False)

    def validate_webhook(self, value):
        return check_webhook_url(value) if value else ""

    def validate_email(self, value):
        return check_email(value, self.context.get("user"))

    def validate(self, attrs):
        instance = self.instance
        merged = {
            "on": attrs.get("on", instance.on if instance else []),
            "webhook": attrs.get("webhook", instance.webhook if instance else ""),
            "email": attrs.get("email", instance.email if instance else False),
        }
        if merged["on"] and not merged["webhook"] and not merged["email"]:
            raise serializers.ValidationError({"webhook": [NOWHERE]})
        merged["on"] = [event for event in Event.values if event in merged["on"]]
        return merged
