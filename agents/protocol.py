"""The agent API's messages: what agents send (validated) and what the server answers."""
from rest_framework import serializers

from scheduling.spec import LABEL_KEY, StrictIntegerField, StrictStringField, StringMapField


class RegisterSerializer(serializers.Serializer):
    name = StrictStringField(max_length=253)
    zone = StrictStringField(max_length=63)
    rack = StrictStringField(max_length=63)
    gpu_type = StrictStringField(required=False, allow_blank=True, default="", max_length=20)
    gpu_count = StrictIntegerField(min_value=0, max_value=64, required=False, default=0)
    cpu_count = StrictIntegerField(min_value=1, max_value=100_000)
    memory_gb = StrictIntegerField(min_value=1, max_value=10_000_000)
    scratch_disk_gb = StrictIntegerField(min_value=0, required=False, default=0)
    labels = StringMapField(key_pattern=LABEL_KEY, key_rule="a label name", max_items=64, required=False,
                            default=dict)
    address = StrictStringField(required=False, allow_blank=True, default="", max_length=253)

    def validate(self, attrs):
        if bool(attrs["gpu_type"]) != bool(attrs["gpu_count"]):
            raise serializers.ValidationError({"gpu_count": ["gpu_type and gpu_count go together (both or neither)."]})
        return attrs


class AttemptSerializer(serializers.Serializer):
    job_id = StrictIntegerField(min_value=1)
    rank = StrictIntegerField(min_value=0)
    attempt = StrictIntegerField(min_value=1)


class RunningSerializer(AttemptSerializer):
    state = serializers.ChoiceField(["starting", "running", "exited"])
    exit_code = StrictIntegerField(required=False, allow_null=True, default=None)
    signal = StrictStringField(required=False, allow_blank=True, default="", max_length=10)


class HeartbeatSerializer(serializers.Serializer):
    tasks = RunningSerializer(many=True, required=False, default=list)
    highest_epoch = StrictIntegerField(min_value=0, required=False, default=0)


class EventSerializer(AttemptSerializer):
    type = serializers.ChoiceField(["started", "exited", "log", "checkpoint"])
    exit_code = StrictIntegerField(required=False, allow_null=True, default=None)
    signal = StrictStringField(required=False, allow_blank=True, default="", max_length=10)
    stream = serializers.ChoiceField(["stdout", "stderr"], required=False, default="stdout")
    offset = StrictIntegerField(min_value=0, required=False, default=0)  # in characters of the stream
    data = StrictStringField(required=False, allow_blank=True, default="", max_length=64 * 1024,
                             trim_whitespace=False)


class EventsSerializer(serializers.Serializer):
    events = EventSerializer(many=True, max_length=1000)
