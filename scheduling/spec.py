"""The job spec: one validation for the API, the CLI and the form.

`JobSpecSerializer` checks each field and the fields together, fills defaults, and gives the
normalized spec whose digest decides whether a repeated submit is "the same job".
"""
import hashlib
import json
import re

from django.conf import settings
from rest_framework import serializers

from scheduling.core.model import PRIORITIES, Topology

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
CLIENT_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
RESERVED_ENV_PREFIX = "MLQ_"
DEFAULT_MAX_GPUS_PER_TASK = 8


class StrictIntegerField(serializers.IntegerField):
    """An integer in the JSON sense: "8", 8.0 and true are refused, not coerced."""

    default_error_messages = {"invalid": "must be an integer, not {kind}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid", kind=type(data).__name__ if not isinstance(data, str) else f"the string {data!r}")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    default_error_messages = {"invalid": "must be a number, not {kind}."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid", kind=type(data).__name__ if not isinstance(data, str) else f"the string {data!r}")
        return super().to_internal_value(data)


class StrictStringField(serializers.CharField):
    default_error_messages = {"not_a_string": "must be a string, not {kind}."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string", kind=type(data).__name__)
        return super().to_internal_value(data)


class StringMapField(serializers.DictField):
    """A mapping of names to strings (env, node_selector), with the keys checked by a regex."""

    def __init__(self, *, key_pattern: re.Pattern, key_rule: str, max_items: int, **kwargs):
        self.key_pattern, self.key_rule, self.max_items = key_pattern, key_rule, max_items
        super().__init__(child=StrictStringField(allow_blank=True, max_length=4096), **kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if len(value) > self.max_items:
            raise serializers.ValidationError(f"at most {self.max_items} entries, got {len(value)}.")
        bad = sorted(k for k in value if not self.key_pattern.match(k))
        if bad:
            raise serializers.ValidationError(f"{bad[0]!r} is not a valid name: {self.key_rule}.")
        return dict(sorted(value.items()))


class StrictSerializer(serializers.Serializer):
    """Refuses unknown fields, so a typo ("gpu_cont") is an error rather than a default."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field."] for name in unknown})
        return super().to_internal_value(data)


class ResourcesSerializer(StrictSerializer):
    gpu_count = StrictIntegerField(required=False, default=0, min_value=0, max_value=100_000)
    gpu_type = StrictStringField(required=False, allow_blank=True, allow_null=True, default="")
    gpus_per_task = StrictIntegerField(required=False, min_value=0, max_value=64)
    tasks = StrictIntegerField(required=False, min_value=1, max_value=10_000)
    cpu_per_rank = StrictIntegerField(required=False, default=1, min_value=1, max_value=4096)
    memory_per_rank_gb = StrictIntegerField(required=False, default=4, min_value=1, max_value=65_536)
    scratch_disk_gb = StrictIntegerField(required=False, default=0, min_value=0, max_value=1_000_000)

    def validate_gpu_type(self, value):
        value = value or ""
        if value and value not in settings.MLQ_GPU_TYPES:
            raise serializers.ValidationError(
                f"unknown GPU type {value!r}; known types: {', '.join(settings.MLQ_GPU_TYPES)}."
            )
        return value

    def validate(self, attrs):
        gpus, gpu_type = attrs["gpu_count"], attrs["gpu_type"]
        if gpus and not gpu_type:
            raise serializers.ValidationError({"gpu_type": [f"required when gpu_count is {gpus}."]})
        if gpu_type and not gpus:
            raise serializers.ValidationError(
                {"gpu_count": [f"is 0 but gpu_type is {gpu_type}; leave gpu_type out for a CPU job."]}
            )
        return self._validate_gpu_tasks(attrs) if gpus else self._validate_cpu_tasks(attrs)

    def _validate_gpu_tasks(self, attrs):
        gpus = attrs["gpu_count"]
        per_task = attrs.get("gpus_per_task") or min(gpus, DEFAULT_MAX_GPUS_PER_TASK)
        if gpus % per_task:
            raise serializers.ValidationError(
                {"gpu_count": [f"{gpus} GPUs cannot be split into tasks of {per_task} (gpus_per_task)."]}
            )
        tasks = gpus // per_task
        if attrs.get("tasks", tasks) != tasks:
            raise serializers.ValidationError(
                {"tasks": [f"{gpus} GPUs at {per_task} per task make {tasks} tasks, not {attrs['tasks']}."]}
            )
        return {**attrs, "gpus_per_task": per_task, "tasks": tasks}

    def _validate_cpu_tasks(self, attrs):
        if attrs.get("gpus_per_task"):
            raise serializers.ValidationError({"gpus_per_task": ["is only for GPU jobs (gpu_count > 0)."]})
        return {**attrs, "gpus_per_task": 0, "tasks": attrs.get("tasks", 1)}


class CheckpointSerializer(StrictSerializer):
    path = StrictStringField(max_length=1000)
    interval_minutes = StrictIntegerField(required=False, default=30, min_value=1, max_value=24 * 60)
    retain_last_n = StrictIntegerField(required=False, default=3, min_value=1, max_value=100)


RESTART_MODES = ("resume_from_checkpoint", "restart", "fail")


class RestartPolicySerializer(StrictSerializer):
    on_preemption = serializers.ChoiceField(RESTART_MODES, required=False, default="resume_from_checkpoint")
    on_node_failure = serializers.ChoiceField(RESTART_MODES, required=False, default="resume_from_checkpoint")
    max_restarts = StrictIntegerField(required=False, default=20, min_value=0, max_value=1000)
    max_retries = StrictIntegerField(required=False, default=2, min_value=0, max_value=100)


class JobSpecSerializer(StrictSerializer):
    client_job_id = StrictStringField(required=False, allow_null=True, default=None, max_length=128)
    name = StrictStringField(required=False, max_length=200)
    team = StrictStringField(max_length=63)
    image = StrictStringField(required=False, allow_blank=True, default="", max_length=500)
    command = serializers.ListField(child=StrictStringField(allow_blank=True, max_length=10_000),
                                    allow_empty=False, max_length=1000)
    resources = ResourcesSerializer(required=False)
    topology_hint = serializers.ChoiceField([t.value for t in Topology], required=False, default="none")
    node_selector = StringMapField(key_pattern=LABEL_KEY, key_rule="a label name such as 'ib' or 'example.com/fabric'",
                                   max_items=32, required=False, default=dict)
    priority = serializers.ChoiceField(PRIORITIES, required=False, default="P2")
    max_runtime_hours = StrictFloatField(required=False, default=168.0)
    grace_period_seconds = StrictIntegerField(required=False, default=120, min_value=0, max_value=3600)
    checkpoint = CheckpointSerializer(required=False, allow_null=True, default=None)
    restart_policy = RestartPolicySerializer(required=False)
    depends_on = serializers.ListField(child=StrictIntegerField(min_value=1), required=False, default=list,
                                       max_length=100)
    env = StringMapField(key_pattern=ENV_NAME, key_rule="letters, digits and underscores, not starting with a digit",
                         max_items=200, required=False, default=dict)

    def validate_client_job_id(self, value):
        if value is not None and not CLIENT_JOB_ID.match(value):
            raise serializers.ValidationError("use letters, digits and . _ : - (at most 128), starting with a letter or digit.")
        return value

    def validate_max_runtime_hours(self, value):
        limit = settings.MLQ_MAX_RUNTIME_HOURS
        if not 0 < value <= limit:
            raise serializers.ValidationError(f"must be more than 0 and at most {limit:g} hours, got {value:g}.")
        return value

    def validate_env(self, value):
        reserved = sorted(k for k in value if k.startswith(RESERVED_ENV_PREFIX))
        if reserved:
            raise serializers.ValidationError(f"{reserved[0]} is reserved: names starting with MLQ_ are set by mlqueue.")
        return value

    def validate_depends_on(self, value):
        return sorted(set(value))

    def validate(self, attrs):
        attrs["resources"] = attrs.get("resources") or ResourcesSerializer(data={}).run_validation({})
        attrs["restart_policy"] = attrs.get("restart_policy") or RestartPolicySerializer(data={}).run_validation({})
        if not attrs.get("name"):
            attrs["name"] = attrs["client_job_id"] or attrs["command"][0].rsplit("/", 1)[-1][:200] or "job"
        return attrs


SPEC_FIELD_ORDER = tuple(JobSpecSerializer._declared_fields)


def normalized(attrs: dict) -> dict:
    """The accepted spec as plain JSON, in the documented field order."""
    return json.loads(json.dumps({name: attrs[name] for name in SPEC_FIELD_ORDER}))


def spec_digest(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
