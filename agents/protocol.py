"""The agent API's messages: what agents send (validated) and what the server answers.

Everything an agent reports is bounded: a node token is a credential like any other, and what
it sends ends up in the scheduler's snapshot (inventory) and in Postgres (integers, logs)."""

import re

from rest_framework import serializers

from mlqueue.metrics_report import MetricsError, check_values
from mlqueue.serializer_fields import ChoiceField
from scheduling.spec import (
    LABEL_KEY,
    StrictBooleanField,
    StrictFloatField,
    StrictIntegerField,
    StrictStringField,
    StringMapField,
)

INT32 = 2**31 - 1
INT64 = 2**63 - 1
# The largest machine the scheduler is planned for, with room: a node reporting more is lying.
MAX_GPUS, MAX_CPUS, MAX_MEMORY_GB, MAX_SCRATCH_GB = 16, 1024, 64 * 1024, 1_000_000
MAX_LABELS, MAX_LABEL_VALUE = 64, 63
MAX_LOG_CHUNK = 64 * 1024
# A host name: it becomes part of URLs (/api/v1/agents/NAME/...) and of the agent's workdir.
NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?\Z")
# Why a task exited when not by itself: its node's lease ran out, or it was lost in an agent restart.
EXIT_CAUSES = ["", "lease_expired", "lost", "no_task_user", "no_container_runtime"]
# A checkpoint's time, seconds since the epoch: up to the last second datetime can hold.
MAX_EPOCH_S = 253402300799
NODE_NAME_RULE = "letters, digits, '.', '_' and '-', starting and ending with a letter or digit (a host name)."


class RegisterSerializer(serializers.Serializer):
    name = StrictStringField(max_length=253, printable_only=True)
    zone = StrictStringField(max_length=63, printable_only=True)
    rack = StrictStringField(max_length=63, printable_only=True)
    gpu_type = StrictStringField(required=False, allow_blank=True, default="", max_length=20, printable_only=True)
    gpu_count = StrictIntegerField(min_value=0, max_value=MAX_GPUS, required=False, default=0)
    cpu_count = StrictIntegerField(min_value=1, max_value=MAX_CPUS)
    memory_gb = StrictIntegerField(min_value=1, max_value=MAX_MEMORY_GB)
    scratch_disk_gb = StrictIntegerField(min_value=0, max_value=MAX_SCRATCH_GB, required=False, default=0)
    labels = StringMapField(
        key_pattern=LABEL_KEY,
        key_rule="a label name",
        max_items=MAX_LABELS,
        required=False,
        default=dict,
        max_value_length=MAX_LABEL_VALUE,
        printable_values=True,
    )
    address = StrictStringField(required=False, allow_blank=True, default="", max_length=253, printable_only=True)
    task_isolation = ChoiceField(["uid", "none"], required=False, default="")
    # Whether the agent runs a job's image (a container runtime or hook); absent: not reported.
    runs_images = StrictBooleanField(required=False, allow_null=True, default=None)

    def validate_name(self, value):
        if not NODE_NAME.match(value) or ".." in value:
            raise serializers.ValidationError(NODE_NAME_RULE)
        return value

    def validate(self, attrs):
        if bool(attrs["gpu_type"]) != bool(attrs["gpu_count"]):
            raise serializers.ValidationError({"gpu_count": ["gpu_type and gpu_count go together (both or neither)."]})
        return attrs


class AttemptSerializer(serializers.Serializer):
    job_id = StrictIntegerField(min_value=1, max_value=INT64)
    rank = StrictIntegerField(min_value=0, max_value=INT32)
    attempt = StrictIntegerField(min_value=1, max_value=INT32)


class RunningSerializer(AttemptSerializer):
    state = ChoiceField(["starting", "running", "exited"])
    exit_code = StrictIntegerField(required=False, allow_null=True, default=None, min_value=-INT32 - 1, max_value=INT32)
    signal = StrictStringField(required=False, allow_blank=True, default="", max_length=10)
    cause = ChoiceField(EXIT_CAUSES, required=False, default="")


# A health sample (agents/node/telemetry.py): what the agent keeps of each kind is bounded too.
MAX_XIDS_PER_GPU, MAX_OUTPUT = 16, 300
HEALTH_PROVIDERS = ["nvml", "fake", "none"]


class XidSerializer(serializers.Serializer):
    code = StrictIntegerField(min_value=0, max_value=INT32)
    at = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S)


class GpuSampleSerializer(serializers.Serializer):
    index = StrictIntegerField(min_value=0, max_value=MAX_GPUS - 1)
    utilization = StrictIntegerField(min_value=0, max_value=100, required=False, allow_null=True, default=None)
    memory_used_mb = StrictIntegerField(min_value=0, max_value=INT32, required=False, allow_null=True, default=None)
    memory_total_mb = StrictIntegerField(min_value=0, max_value=INT32, required=False, allow_null=True, default=None)
    temperature_c = StrictIntegerField(min_value=-50, max_value=200, required=False, allow_null=True, default=None)
    ecc_correctable = StrictIntegerField(min_value=0, max_value=INT64, required=False, allow_null=True, default=None)
    ecc_uncorrectable = StrictIntegerField(min_value=0, max_value=INT64, required=False, allow_null=True, default=None)
    xids = XidSerializer(many=True, required=False, default=list, max_length=MAX_XIDS_PER_GPU)


class HealthCheckSerializer(serializers.Serializer):
    status = ChoiceField(["ok", "failed"])
    exit_code = StrictIntegerField(min_value=-INT32 - 1, max_value=INT32, required=False, allow_null=True, default=None)
    output = StrictStringField(required=False, allow_blank=True, default="", max_length=MAX_OUTPUT)
    at = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S)
    # When the current run of failures began (the same while it goes on): one cordon per run.
    failed_since = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S, required=False, allow_null=True, default=None)


class HealthSerializer(serializers.Serializer):
    at = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S)
    provider = ChoiceField(HEALTH_PROVIDERS)
    error = StrictStringField(required=False, allow_blank=True, default="", max_length=MAX_OUTPUT)
    gpus = GpuSampleSerializer(many=True, required=False, default=list, max_length=MAX_GPUS)
    check = HealthCheckSerializer(required=False, allow_null=True, default=None)

    def validate_gpus(self, value):
        indices = [gpu["index"] for gpu in value]
        if len(set(indices)) != len(indices):
            raise serializers.ValidationError("each GPU index at most once.")
        return value


class HeartbeatSerializer(serializers.Serializer):
    """A heartbeat's tasks; its optional `health` sample is read by `health_of` first."""

    tasks = RunningSerializer(many=True, required=False, default=list, max_length=1000)
    highest_epoch = StrictIntegerField(min_value=0, max_value=INT64, required=False, default=0)


class DocumentedHeartbeatSerializer(HeartbeatSerializer):
    """The whole heartbeat, as /api/schema/ documents it."""

    health = HealthSerializer(required=False, allow_null=True)


def health_of(data) -> tuple[object, dict | None]:
    """The heartbeat without its health sample, and the sample validated (None if absent). A
    sample rides on one heartbeat in six or so: kept out of HeartbeatSerializer, whose nested
    fields every heartbeat would otherwise pay to build (a third more time per heartbeat)."""
    if not isinstance(data, dict) or data.get("health") is None:
        return data, None
    sample = HealthSerializer(data=data["health"])
    if not sample.is_valid():
        raise serializers.ValidationError({"health": sample.errors})
    return {key: value for key, value in data.items() if key != "health"}, sample.validated_data


def heartbeat_tasks(data) -> list[dict]:
    """The tasks a heartbeat body reports, validated by HeartbeatSerializer (raises its
    ValidationError). An idle heartbeat, no tasks and at most a valid epoch (the common case:
    2,500 nodes every 5 s), is recognised directly: building the serializer costs ~0.2 ms of
    CPU, most of a batched heartbeat. Anything else goes through the serializer, so the rules
    and their messages stay the serializer's."""
    if isinstance(data, dict) and data.get("tasks", []) == [] and _is_epoch(data.get("highest_epoch", 0)):
        return []
    body = HeartbeatSerializer(data=data)
    body.is_valid(raise_exception=True)
    return body.validated_data["tasks"]


def _is_epoch(value) -> bool:
    return type(value) is int and 0 <= value <= INT64


class MetricValuesField(serializers.DictField):
    """A report's values: 1 to 64 names (mlqueue.metrics_report.NAME) to finite numbers,
    checked by the same rules the job's helper and the agent apply."""

    default_error_messages = {"bad": "{why}"}

    def to_internal_value(self, data):
        try:  # the count is checked before any name is looked at
            return check_values(data)
        except MetricsError as exc:
            self.fail("bad", why=str(exc))

    def to_representation(self, value):
        return value


class EventSerializer(AttemptSerializer):
    type = ChoiceField(["started", "exited", "log", "checkpoint", "metric", "metric_skipped", "dropped"])
    exit_code = StrictIntegerField(required=False, allow_null=True, default=None, min_value=-INT32 - 1, max_value=INT32)
    signal = StrictStringField(required=False, allow_blank=True, default="", max_length=10)
    cause = ChoiceField(EXIT_CAUSES, required=False, default="")
    stream = ChoiceField(["stdout", "stderr"], required=False, default="stdout")
    offset = StrictIntegerField(min_value=0, max_value=INT64, required=False, default=0)  # in characters
    data = StrictStringField(
        required=False, allow_blank=True, default="", max_length=MAX_LOG_CHUNK, trim_whitespace=False
    )
    # A checkpoint: the epoch of the assignment, the step the job confirmed and when it saved it.
    epoch = StrictIntegerField(min_value=0, max_value=INT64, required=False, default=0)
    step = StrictIntegerField(min_value=0, max_value=INT64, required=False, default=None, allow_null=True)
    at = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S, required=False, default=None, allow_null=True)
    # A metric report: its line in the attempt's metrics file, its step (above), the job's time
    # of it and its values.
    seq = StrictIntegerField(min_value=1, max_value=INT32, required=False, default=None, allow_null=True)
    time = StrictFloatField(min_value=0, max_value=MAX_EPOCH_S, required=False, default=None, allow_null=True)
    values = MetricValuesField(required=False, default=None, allow_null=True)
    # A metric_skipped event: the line (seq) and why (data); `last`: the last the agent sends.
    last = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs):
        needed = REQUIRED.get(attrs["type"], ())
        missing = {name: [f"required in a {attrs['type']} event."] for name in needed if attrs[name] is None}
        if missing:
            raise serializers.ValidationError(missing)
        return attrs


# The fields an event of each type cannot do without (the others have defaults).
REQUIRED = {"checkpoint": ("step", "at"), "metric": ("seq", "step", "time", "values"), "metric_skipped": ("seq",)}


class EventsSerializer(serializers.Serializer):
    events = EventSerializer(many=True, max_length=1000)
