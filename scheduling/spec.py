"""The job spec: one validation for the API, the CLI and the form.

`JobSpecSerializer` checks each field and the fields together, fills defaults, and gives the
normalized spec whose digest decides whether a repeated submit is "the same job".
"""

import hashlib
import json
import math
import re
import unicodedata

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mlqueue.serializer_fields import NOT_A_STRING as NOT_A_STRING  # the specs' messages, as before
from mlqueue.serializer_fields import NOT_AN_INTEGER as NOT_AN_INTEGER
from mlqueue.serializer_fields import ChoiceField, FieldsBuiltOnce, NoUnknownFields
from mlqueue.serializer_fields import StrictIntegerField as StrictIntegerField
from mlqueue.serializer_fields import StrictStringField as StrictStringField
from mlqueue.text import INVISIBLE, INVISIBLE_CATEGORIES, invisible_char
from scheduling.core.model import PRIORITIES, Topology
from scheduling.secrets import MASK
from teams.models import ReportedGpuType

# \Z, not $: "$" also matches before a trailing newline, so "FOO\n" would pass as a name.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
LABEL_KEY = re.compile(r"^([a-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
CLIENT_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
# An image reference (registry/name:tag@digest): one word, never an option. The agent checks
# again before it puts one in a container runtime's command line (agents/node/runtime.py).
IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
IMAGE_RULE = "an image reference such as registry.example.com/team/train:2026-04 (no spaces, not starting with -)."
ENV_RULE = "letters, digits and underscores, not starting with a digit"
RESERVED_ENV_PREFIX = "MLQ_"
INVISIBLE_KEY = (
    "{key!r} must not contain {char}: invisible and control characters can make text read as something else."
)
OWNER_NOT_CALLER = "you cannot submit on behalf of {owner}; leave owner out or use your own user name or email."
RESERVED_ENV = "{name} is reserved: names starting with MLQ_ are set by mlqueue."
# What mlqueue sets for each task besides its MLQ_ names (scheduling/assignments.py): a
# user's value was accepted and then overridden unseen (QA).
PER_TASK_ENV = ("RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")
SET_PER_TASK = "{name} is reserved: mlqueue sets it for each task (docs/task-environment.md)."
IN_ENV_AND_SECRET_ENV = "{name} is in both env and secret_env: give each name in one of them."
SECRET_IS_MASK = (
    "{name} is '***', which stands for a secret value mlqueue never shows again (in the API, a clone or the "
    "YAML view): give the value itself, or leave {name} out."
)
SECRET_BLANK = "{name} has no value: give the secret's value, or leave {name} out."
DEFAULT_MAX_GPUS_PER_TASK = 8
NOT_FINITE = "must be a finite number, not {value}."
NOT_A_NUMBER = "must be a number, not {kind}."
NOT_A_BOOLEAN = "must be true or false, not {kind}."
TOO_MANY_ENTRIES = "at most {limit} entries, got {count}."
INVALID_NAME = "{name!r} is not a valid name: {rule}."
UNKNOWN_GPU_TYPE = "unknown GPU type {gpu_type!r}; known types: {known}."
# Types some node has reported (teams.ReportedGpuType), as this process has seen them: only
# ever added to, so a known one costs no query.
_SEEN_REPORTED: set[str] = set()


def gpu_type_known(gpu_type: str) -> bool:
    """A configured type (MLQ_GPU_TYPES), or one a node has reported: a node of a new type that
    joins is usable at once, as quotas may already name it (QA: a B200 node joined and went
    READY, and every job asking for B200 was refused as an unknown type)."""
    if gpu_type in settings.MLQ_GPU_TYPES or gpu_type in _SEEN_REPORTED:
        return True
    if gpu_type in _reported_gpu_types():
        _SEEN_REPORTED.add(gpu_type)
        return True
    return False


def gpu_types() -> list[str]:
    """Every GPU type a spec may name: the configured ones in their order, then those only
    nodes report, by name."""
    configured = list(settings.MLQ_GPU_TYPES)
    return [*configured, *sorted(_reported_gpu_types() - set(configured))]


def _reported_gpu_types() -> set[str]:
    return set(ReportedGpuType.objects.values_list("name", flat=True))


GPU_TYPE_REQUIRED = "required when gpu_count is {gpus}."
GPU_TYPE_WITHOUT_GPUS = "is 0 but gpu_type is {gpu_type}; leave gpu_type out for a CPU job."
GPUS_NOT_DIVISIBLE = "{gpus} GPUs cannot be split into tasks of {per_task} (gpus_per_task)."
TASKS_DISAGREE = "{gpus} GPUs at {per_task} per task make {tasks} tasks, not {asked}."
NO_GPUS_PER_TASK = "at least 1 for a job of {gpus} GPUs; leave it out for tasks of up to 8 GPUs each (whole nodes)"
GPUS_PER_TASK_WITHOUT_GPUS = "is only for GPU jobs (gpu_count > 0)."
CLIENT_JOB_ID_RULE = "use letters, digits and . _ : - (at most 128), starting with a letter or digit."
MAX_RUNTIME_RANGE = "must be at least 1 second (0.0003 hours) and at most {limit:g} hours, got {value:.12g}."
BLANK_PROGRAM = "the program to run may not be blank (the command's first element)."
MIN_RUNTIME_HOURS = 1 / 3600  # 1e-300 hours was taken: the job was placed and timed out at once
ONE_GROUP_KIND = "a job is at most one of an array, a sweep and a pipeline."
GROUP_BLOCKS = ("array", "sweep", "pipeline")
REQUIRED = "This field is required."
DEPENDENCY_TWICE = "job {job} is listed twice, on {first} and on {second}: give each job once."
DEPENDENCY_CONDITIONS = ("success", "failure", "any")
MAX_ID = 2**63 - 1  # ids are bigint columns: a larger one is no job, and Postgres refuses it


def refuse_invisible(value: str, field: str | None = None) -> str:
    """`value`, or a 400 (keyed by `field` when given) if it holds an invisible character: for
    names people read (job names, label keys and values, node names, team names)."""
    char = invisible_char(value)
    if char is None:
        return value
    message = INVISIBLE.format(char=char)
    raise serializers.ValidationError({field: [message]} if field else message)


def without_invisible(value: str) -> str:
    return "".join(char for char in value if unicodedata.category(char) not in INVISIBLE_CATEGORIES)


class BlockField(serializers.JSONField):
    """A block its own serializer checks (`validate_<name>`): JSON's types, where an infinity or
    NaN (JSON's 1e400) is left for that serializer to refuse naming the field within the block,
    not refused here as "not valid JSON" (the body was)."""

    def to_internal_value(self, data):
        try:
            json.dumps(data)  # JSON's types; inf and nan pass here
        except (TypeError, ValueError):
            self.fail("invalid")
        return data


# The group blocks, each checked by its own serializer (`validate_<name>`). The API reference's
# schema of each is declared where that serializer is (group_spec.py, pipeline_spec.py), with
# extend_schema_field on these classes: those modules import this one, not this one them.
class ArrayBlockField(BlockField):
    """`array:`: group_spec.ArraySerializer."""


class SweepBlockField(BlockField):
    """`sweep:`: group_spec.SweepSerializer."""


class PipelineBlockField(BlockField):
    """`pipeline:`: pipeline_spec.PipelineSerializer."""


class NotifyBlockField(BlockField):
    """`notify:`: notify_spec.NotifySerializer."""


class StrictFloatField(serializers.FloatField):
    """A number in the JSON sense. inf and nan are refused: JSON's 1e400, YAML's .inf and the
    form's "nan" all arrive as one, and nan passes every range check."""

    default_error_messages = {"invalid": NOT_A_NUMBER, "not_finite": NOT_FINITE}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid", kind=type(data).__name__ if not isinstance(data, str) else f"the string {data!r}")
        try:
            number = float(data)
        except OverflowError:  # an integer past the largest float
            number = math.inf if data > 0 else -math.inf
        if not math.isfinite(number):
            self.fail("not_finite", value=number)
        return super().to_internal_value(number)


class StrictBooleanField(serializers.BooleanField):
    """true or false in the JSON sense: "yes", 1 and "false" are refused, not coerced."""

    default_error_messages = {"invalid": NOT_A_BOOLEAN}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", kind=type(data).__name__ if not isinstance(data, str) else f"the string {data!r}")
        return data


class StringMapField(serializers.DictField):
    """A mapping of names to strings (env, node_selector), with the keys checked by a regex.
    Keys with invisible characters are refused before anything else, so no message or error
    path carries one; `printable_values=True` refuses them in the values too (labels)."""

    def __init__(
        self,
        *,
        key_pattern: re.Pattern,
        key_rule: str,
        max_items: int,
        max_value_length: int = 4096,
        printable_values: bool = False,
        trim_values: bool = True,
        **kwargs,
    ):
        self.key_pattern, self.key_rule, self.max_items = key_pattern, key_rule, max_items
        child = StrictStringField(
            allow_blank=True, max_length=max_value_length, printable_only=printable_values, trim_whitespace=trim_values
        )
        super().__init__(child=child, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            self._check_keys(data)
        value = super().to_internal_value(data)
        if len(value) > self.max_items:
            raise serializers.ValidationError(TOO_MANY_ENTRIES.format(limit=self.max_items, count=len(value)))
        bad = sorted(k for k in value if not self.key_pattern.fullmatch(k))
        if bad:
            raise serializers.ValidationError(INVALID_NAME.format(name=bad[0], rule=self.key_rule))
        return dict(sorted(value.items()))

    def _check_keys(self, data: dict) -> None:
        for key in sorted(map(str, data)):
            if char := invisible_char(key):
                raise serializers.ValidationError(INVISIBLE_KEY.format(key=key, char=char))


class StrictSerializer(NoUnknownFields, FieldsBuiltOnce, serializers.Serializer):
    """Refuses unknown fields, so a typo ("gpu_cont") is an error rather than a default. Its
    fields are built once per class (mlqueue/serializer_fields.py): a subclass declares them."""


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
        if value and not gpu_type_known(value):
            raise serializers.ValidationError(UNKNOWN_GPU_TYPE.format(gpu_type=value, known=", ".join(gpu_types())))
        return value

    def validate(self, attrs):
        gpus, gpu_type = attrs["gpu_count"], attrs["gpu_type"]
        if gpus and not gpu_type:
            raise serializers.ValidationError({"gpu_type": [GPU_TYPE_REQUIRED.format(gpus=gpus)]})
        if gpu_type and not gpus:
            raise serializers.ValidationError({"gpu_count": [GPU_TYPE_WITHOUT_GPUS.format(gpu_type=gpu_type)]})
        return self._validate_gpu_tasks(attrs) if gpus else self._validate_cpu_tasks(attrs)

    def _validate_gpu_tasks(self, attrs):
        gpus = attrs["gpu_count"]
        if attrs.get("gpus_per_task") == 0:  # it read as "the default" and became 8 unasked
            raise serializers.ValidationError({"gpus_per_task": [NO_GPUS_PER_TASK.format(gpus=gpus)]})
        per_task = attrs.get("gpus_per_task") or min(gpus, DEFAULT_MAX_GPUS_PER_TASK)
        if gpus % per_task:
            raise serializers.ValidationError({"gpu_count": [GPUS_NOT_DIVISIBLE.format(gpus=gpus, per_task=per_task)]})
        tasks = gpus // per_task
        if attrs.get("tasks", tasks) != tasks:
            raise serializers.ValidationError(
                {"tasks": [TASKS_DISAGREE.format(gpus=gpus, per_task=per_task, tasks=tasks, asked=attrs["tasks"])]}
            )
        return {**attrs, "gpus_per_task": per_task, "tasks": tasks}

    def _validate_cpu_tasks(self, attrs):
        if attrs.get("gpus_per_task"):
            raise serializers.ValidationError({"gpus_per_task": [GPUS_PER_TASK_WITHOUT_GPUS]})
        return {**attrs, "gpus_per_task": 0, "tasks": attrs.get("tasks", 1)}


class CheckpointSerializer(StrictSerializer):
    path = StrictStringField(max_length=1000)
    interval_minutes = StrictIntegerField(required=False, default=30, min_value=1, max_value=24 * 60)
    retain_last_n = StrictIntegerField(required=False, default=3, min_value=1, max_value=100)


RESTART_MODES = ("resume_from_checkpoint", "restart", "fail")


class RestartPolicySerializer(StrictSerializer):
    on_preemption = ChoiceField(RESTART_MODES, required=False, default="resume_from_checkpoint")
    on_node_failure = ChoiceField(RESTART_MODES, required=False, default="resume_from_checkpoint")
    max_restarts = StrictIntegerField(required=False, default=20, min_value=0, max_value=1000)
    max_retries = StrictIntegerField(required=False, default=2, min_value=0, max_value=100)


class DependencySerializer(StrictSerializer):
    job = StrictIntegerField(min_value=1, max_value=MAX_ID)
    on = ChoiceField(DEPENDENCY_CONDITIONS, required=False, default="success")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "description": "a job id: run after its success"},
            {
                "type": "object",
                "properties": {
                    "job": {"type": "integer", "minimum": 1},
                    "on": {"type": "string", "enum": list(DEPENDENCY_CONDITIONS), "default": "success"},
                },
                "required": ["job"],
            },
        ]
    }
)
class DependencyField(serializers.Field):
    """One `depends_on` entry: a job id (its success), or {job: 13, on: failure}."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            return _nested(DependencySerializer, data)
        return {"job": StrictIntegerField(min_value=1, max_value=MAX_ID).run_validation(data), "on": "success"}

    def to_representation(self, value):
        return value


def normalized_dependencies(entries: list[dict]) -> list:
    """The entries by job id, each once: a plain id for success (a spec from before conditions
    reads and digests as it did), {job, on} otherwise. One job under two conditions is refused."""
    found: dict[int, str] = {}
    for entry in entries:
        job, on = entry["job"], entry["on"]
        if found.setdefault(job, on) != on:
            raise serializers.ValidationError(DEPENDENCY_TWICE.format(job=job, first=found[job], second=on))
    return [job if on == "success" else {"job": job, "on": on} for job, on in sorted(found.items())]


def dependency_edges(depends_on: list) -> list[tuple[int, str]]:
    """(job id, condition) of each entry of a normalized `depends_on`."""
    return [(entry, "success") if isinstance(entry, int) else (entry["job"], entry["on"]) for entry in depends_on]


class JobSpecSerializer(StrictSerializer):
    """The spec. Pass context={"user": ...} for `owner` to be checked against the caller."""

    client_job_id = StrictStringField(
        required=False, allow_null=True, default=None, max_length=128, printable_only=True
    )
    name = StrictStringField(required=False, max_length=200, printable_only=True)
    team = StrictStringField(max_length=63, printable_only=True)
    # Accepted so the documented body works as it is; never stored: the owner is the caller.
    owner = StrictStringField(required=False, max_length=254, printable_only=True)
    image = StrictStringField(required=False, allow_blank=True, default="", max_length=500)
    # Required, except in a pipeline (its steps have theirs, or take this one): see `validate`.
    command = serializers.ListField(
        child=StrictStringField(allow_blank=True, max_length=10_000), allow_empty=False, max_length=1000, required=False
    )
    resources = ResourcesSerializer(required=False)
    topology_hint = ChoiceField([t.value for t in Topology], required=False, default="none")
    node_selector = StringMapField(
        key_pattern=LABEL_KEY,
        key_rule="a label name such as 'ib' or 'example.com/fabric'",
        max_items=32,
        required=False,
        default=dict,
        printable_values=True,
    )
    priority = ChoiceField(PRIORITIES, required=False, default="P2")
    max_runtime_hours = StrictFloatField(required=False, default=168.0)
    grace_period_seconds = StrictIntegerField(required=False, default=120, min_value=0, max_value=3600)
    checkpoint = CheckpointSerializer(required=False, allow_null=True, default=None)
    restart_policy = RestartPolicySerializer(required=False)
    # Job ids (wait for success), or {job: 12, on: success|failure|any} (core/conditions.py).
    depends_on = serializers.ListField(child=DependencyField(), required=False, default=list, max_length=100)
    env = StringMapField(key_pattern=ENV_NAME, key_rule=ENV_RULE, max_items=200, required=False, default=dict)
    # Write-only: encrypted at rest, "***" wherever it is shown (scheduling/secrets.py). Values
    # are kept as given (a PEM key ends in a newline).
    secret_env = StringMapField(
        key_pattern=ENV_NAME,
        key_rule=ENV_RULE,
        max_items=100,
        required=False,
        default=dict,
        max_value_length=8192,
        trim_values=False,
    )

    # Webhooks and emails when the job starts or ends (scheduling/notify_spec.py).
    notify = NotifyBlockField(required=False, allow_null=True, default=None)

    # At most one of these makes the job a group (scheduling/group_spec.py, groups.py).
    array = ArrayBlockField(required=False, allow_null=True, default=None)
    sweep = SweepBlockField(required=False, allow_null=True, default=None)
    pipeline = PipelineBlockField(required=False, allow_null=True, default=None)

    def validate_notify(self, value):
        from scheduling.notify_spec import NotifySerializer, normalized_notify

        if value is None:
            return None
        serializer = NotifySerializer(data=value, context=self.context)
        serializer.is_valid(raise_exception=True)
        return normalized_notify(serializer.validated_data)

    def validate_array(self, value):
        from scheduling.group_spec import ArraySerializer

        return None if value is None else _nested(ArraySerializer, value)

    def validate_sweep(self, value):
        from scheduling.group_spec import SweepSerializer

        return None if value is None else _nested(SweepSerializer, value)

    def validate_pipeline(self, value):
        from scheduling.pipeline_spec import PipelineSerializer

        return None if value is None else _nested(PipelineSerializer, value)

    def validate_command(self, value):
        if not value[0].strip():
            raise serializers.ValidationError({0: [BLANK_PROGRAM]})
        return value

    def validate_image(self, value):
        if value and not IMAGE_REFERENCE.match(value):
            raise serializers.ValidationError(f"{value[:100]!r} is not {IMAGE_RULE}")
        return value

    def validate_client_job_id(self, value):
        if value is not None and not CLIENT_JOB_ID.match(value):
            raise serializers.ValidationError(CLIENT_JOB_ID_RULE)
        return value

    def validate_max_runtime_hours(self, value):
        return checked_max_runtime(value)

    def validate_owner(self, value):
        user = self.context.get("user")
        email = (getattr(user, "email", "") or "").casefold()
        if user is None or (value != user.get_username() and not (email and value.casefold() == email)):
            raise serializers.ValidationError(OWNER_NOT_CALLER.format(owner=value))
        return value

    def validate_env(self, value):
        _refuse_reserved(value)
        return value

    def validate_secret_env(self, value):
        _refuse_reserved(value)
        for name, secret in value.items():
            if secret == MASK:
                raise serializers.ValidationError(SECRET_IS_MASK.format(name=name))
            if not secret.strip():
                raise serializers.ValidationError(SECRET_BLANK.format(name=name))
        return value

    def validate_depends_on(self, value):
        return normalized_dependencies(value)

    def validate(self, attrs):
        blocks = [name for name in GROUP_BLOCKS if attrs.get(name) is not None]
        if len(blocks) > 1:
            raise serializers.ValidationError({blocks[1]: [ONE_GROUP_KIND]})
        if "command" not in attrs and blocks != ["pipeline"]:
            raise serializers.ValidationError({"command": [REQUIRED]})
        both = sorted(set(attrs.get("env", {})) & set(attrs.get("secret_env", {})))
        if both:
            raise serializers.ValidationError({"secret_env": [IN_ENV_AND_SECRET_ENV.format(name=both[0])]})
        attrs["resources"] = attrs.get("resources") or ResourcesSerializer(data={}).run_validation({})
        attrs["restart_policy"] = attrs.get("restart_policy") or RestartPolicySerializer(data={}).run_validation({})
        if not attrs.get("name"):
            attrs["name"] = attrs["client_job_id"] or _name_from(attrs.get("command"))
        if attrs.get("pipeline") is not None:
            from scheduling.pipeline_spec import check_steps

            check_steps(attrs, context=self.context)
            attrs.setdefault("command", [])
        return attrs


def _name_from(command: list[str] | None) -> str:
    """A job's default name: its program's. The command may hold any character; a name made
    from it must not."""
    if not command:
        return "pipeline"
    return without_invisible(command[0].rsplit("/", 1)[-1])[:200] or "job"


def checked_max_runtime(value: float) -> float:
    """A job's time limit in hours, from a second to MLQ_MAX_RUNTIME_HOURS (a submit's, a change's)."""
    limit = settings.MLQ_MAX_RUNTIME_HOURS
    if not MIN_RUNTIME_HOURS <= value <= limit:
        raise serializers.ValidationError(MAX_RUNTIME_RANGE.format(limit=limit, value=value))
    return value


def _nested(serializer_class, value):
    serializer = serializer_class(data=value)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _refuse_reserved(names) -> None:
    reserved = sorted(name for name in names if name.startswith(RESERVED_ENV_PREFIX))
    if reserved:
        raise serializers.ValidationError(RESERVED_ENV.format(name=reserved[0]))
    per_task = sorted(name for name in names if name in PER_TASK_ENV)
    if per_task:
        raise serializers.ValidationError({per_task[0]: [SET_PER_TASK.format(name=per_task[0])]})


# `owner` is checked, then dropped: the job's owner is the caller (a column, not the spec).
NOT_STORED = ("owner",)
SPEC_FIELD_ORDER = tuple(name for name in JobSpecSerializer._declared_fields if name not in NOT_STORED)
# Blocks a spec holds only when given: a spec without them reads (and digests) as before they existed.
ONLY_WHEN_GIVEN = ("notify", "array", "sweep", "pipeline")


def normalized(attrs: dict) -> dict:
    """The accepted spec as plain JSON, in the documented field order. `secret_env` still
    holds the values: do_submit_job encrypts them and stores the names only."""
    fields = {name: attrs[name] for name in SPEC_FIELD_ORDER}
    for name in ONLY_WHEN_GIVEN:
        if fields[name] is None:
            del fields[name]
    return json.loads(json.dumps(fields))


def spec_digest(spec: dict, secret_mac: str = "") -> str:
    """What makes two submits "the same job". The secret values enter only as `secret_mac`
    (secrets.env_macs); a spec without secrets digests as it did before secret_env existed."""
    body = {name: value for name, value in spec.items() if name != "secret_env" or value}
    if secret_mac:
        body["secret_env"] = secret_mac
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def job_columns(spec: dict) -> dict:
    """A job's columns from its normalized spec: what the scheduler and the pages query."""
    res, policy = spec["resources"], spec["restart_policy"]
    return dict(
        client_job_id=spec["client_job_id"],
        name=spec["name"],
        image=spec["image"],
        command=spec["command"],
        env=spec["env"],
        gpu_type=res["gpu_type"],
        gpu_count=res["gpu_count"],
        gpus_per_task=res["gpus_per_task"],
        task_count=res["tasks"],
        cpu_per_rank=res["cpu_per_rank"],
        memory_per_rank_gb=res["memory_per_rank_gb"],
        scratch_disk_gb=res["scratch_disk_gb"],
        topology_hint=spec["topology_hint"],
        node_selector=spec["node_selector"],
        priority=spec["priority"],
        max_runtime_hours=spec["max_runtime_hours"],
        grace_period_seconds=spec["grace_period_seconds"],
        checkpoint=spec["checkpoint"],
        on_preemption=policy["on_preemption"],
        on_node_failure=policy["on_node_failure"],
        max_restarts=policy["max_restarts"],
        max_retries=policy["max_retries"],
        notify=spec.get("notify"),
    )
