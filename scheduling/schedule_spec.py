"""What a schedule is made of, validated: its timing (cron, timezone, concurrency, deadline,
suspend) and the job spec it submits at each fire time. Two ways in, one validation:

    POST /api/v1/schedules   {"name": .., "cron": .., "timezone": .., ..., "spec": {<job spec>}}
    POST /api/v1/jobs        {<job spec>, "schedule": {"cron": .., "timezone": .., ...}}

Errors name the field the way the body spelled it: `spec.resources.gpu_count` in the first,
`resources.gpu_count` and `schedule.cron` in the second. A create under a name the team has
already is the same schedule only with the very same settings: `differences` says how it is not.
"""

from datetime import datetime

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from mlqueue.errors import FieldPermissionDenied
from mlqueue.serializer_fields import ChoiceField
from scheduling import services
from scheduling.core.cron import cron_error, next_fire, timezone_error
from scheduling.models import Concurrency, Schedule
from scheduling.secrets import SecretEnvUnreadable, decrypt_env
from scheduling.spec import StrictBooleanField, StrictIntegerField, StrictSerializer, StrictStringField, spec_digest
from teams.models import Team

DEADLINE_LIMIT_MINUTES = 7 * 24 * 60
CLIENT_JOB_ID_GIVEN = (
    "a schedule's runs take their client_job_id from the schedule and the fire time "
    "(schedule-<id>-<time>): leave client_job_id out."
)
# What NAME_TAKEN names: how the schedule differs from what was sent (never a secret value).
DIFFERENT_TIMING = "its {field} is {theirs!r}, not {yours!r}"
DIFFERENT_SUSPEND = {True: "it is suspended, not active", False: "it is active, not suspended"}
DIFFERENT_SPEC = "its spec differs"
DIFFERENT_SECRETS = "its secret_env values differ"


class ScheduleTimingSerializer(StrictSerializer):
    """When a schedule fires and what it does when a run is still active. `partial=True` (a
    PATCH) checks only the fields given."""

    cron = StrictStringField(max_length=200, help_text="five fields, e.g. '0 3 * * *', or @daily, @hourly ...")
    timezone = StrictStringField(required=False, default="UTC", max_length=64, help_text="IANA name")
    concurrency = ChoiceField(Concurrency.choices, required=False, default=Concurrency.FORBID)
    starting_deadline_minutes = StrictIntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=DEADLINE_LIMIT_MINUTES
    )
    suspend = StrictBooleanField(required=False, default=False)

    def validate_cron(self, value):
        if error := cron_error(value):
            raise serializers.ValidationError(error)
        return " ".join(value.split())

    def validate_timezone(self, value):
        if error := timezone_error(value):
            raise serializers.ValidationError(error)
        return value


class ScheduleBlockSerializer(ScheduleTimingSerializer):
    """The `schedule:` block of a job spec; `name` defaults to the spec's."""

    name = StrictStringField(required=False, max_length=200, printable_only=True)


class ScheduleCreateSerializer(ScheduleBlockSerializer):
    """POST /api/v1/schedules. `spec` is checked by the submit's own validation (services)."""

    spec = serializers.JSONField(help_text="a job spec, as POST /api/v1/jobs takes it")


class ScheduleChangeSerializer(ScheduleBlockSerializer):
    """PATCH /api/v1/schedules/{id}: any of the fields; `suspended` with a `reason` suspends."""

    suspend = None  # a PATCH says `suspended`, as the schedule reads
    suspended = StrictBooleanField(required=False)
    # Stored after "suspended by <user>: " in a column of 500.
    reason = StrictStringField(required=False, allow_blank=True, max_length=300, printable_only=True)
    spec = serializers.JSONField(required=False)


def validated(serializer_class, data, **kwargs) -> dict:
    """`data` through the serializer; its errors as a 400."""
    serializer = serializer_class(data=data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def check_schedule_block(data: dict) -> tuple[dict, dict]:
    """A submit body's `schedule:` block, validated (a 400 naming `schedule.<field>`), and the
    rest of the body: the spec each run submits, which may not fix its own client_job_id."""
    try:
        timing = validated(ScheduleBlockSerializer, data["schedule"])
    except ValidationError as exc:
        raise ValidationError({"schedule": exc.detail}) from None
    if data.get("client_job_id") is not None:
        raise ValidationError({"client_job_id": [CLIENT_JOB_ID_GIVEN]})
    return timing, {key: value for key, value in data.items() if key != "schedule"}


def differences(existing: Schedule, timing: dict, stored: dict, secrets: dict) -> list[str]:
    """How `existing` differs from a create of `timing` and `stored`. A create that leaves out
    `suspend` asks for an active schedule (its default), so a suspended one differs from it. The
    stored spec masks the secret values, so they are compared apart: a rotated token sent again
    must not be answered "the same" and dropped."""
    fields = ("cron", "timezone", "concurrency", "starting_deadline_minutes")
    found = [
        DIFFERENT_TIMING.format(field=field, theirs=getattr(existing, field), yours=timing[field])
        for field in fields
        if getattr(existing, field) != timing[field]
    ]
    if existing.suspended != timing.get("suspend", False):
        found.append(DIFFERENT_SUSPEND[existing.suspended])
    if spec_digest(existing.spec) != spec_digest(stored):
        found.append(DIFFERENT_SPEC)
    elif not _same_secrets(existing, secrets):
        found.append(DIFFERENT_SECRETS)
    return found


def _same_secrets(existing: Schedule, secrets: dict) -> bool:
    if not secrets and not existing.secret_env_ciphertext:
        return True
    try:
        return decrypt_env(existing.secret_env_ciphertext) == secrets
    except SecretEnvUnreadable:  # its key is gone: whatever was sent, it cannot be the same
        return False


SCHEDULE_BLOCK_HELP = (
    "POST /api/v1/jobs and /jobs/dry-run only: makes a schedule that submits the rest of the spec at "
    "each fire time, instead of a job (docs/schedules.md). Not in a batch, a pipeline step or a schedule's spec."
)


class JobSpecWithSchedule(OpenApiSerializerExtension):
    """The API reference's JobSpec with the `schedule:` block POST /api/v1/jobs takes. The view
    takes the block off before the spec is checked (scheduling/schedules.py), so it is no field of
    JobSpecSerializer, which refuses it wherever else a spec goes."""

    target_class = "scheduling.spec.JobSpecSerializer"

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        block = auto_schema.resolve_serializer(ScheduleBlockSerializer, direction)
        schema["properties"]["schedule"] = {"allOf": [block.ref], "description": SCHEDULE_BLOCK_HELP}
        return schema


# ---- the two ways in, validated as a submit ------------------------------------------------


def check_schedule_create(*, user, data) -> tuple[Team, dict, dict]:
    """POST /api/v1/schedules: the timing and the spec, validated as a submit validates it.
    Returns the team, the timing (with `name`) and the spec to store (_check_spec)."""
    timing = validated(ScheduleCreateSerializer, data)
    team, spec = check_nested_spec(user=user, data=timing.pop("spec"))
    return team, _named(timing, spec), spec


def check_spec_with_schedule(*, user, data: dict) -> tuple[Team, dict, dict]:
    """POST /api/v1/jobs with a `schedule:` block: the block is the timing, the rest the spec."""
    timing, spec_data = check_schedule_block(data)
    team, spec = _check_spec(user=user, data=spec_data)
    return team, _named(timing, spec), spec


def next_fires(timing: dict, now, count: int = 3) -> list[datetime]:
    """The first `count` fire times of a schedule created now (what a dry run shows)."""
    found = [next_fire(timing["cron"], timing["timezone"], now)]
    while len(found) < count:
        found.append(next_fire(timing["cron"], timing["timezone"], found[-1]))
    return found


def _named(timing: dict, spec: dict) -> dict:
    return {**timing, "name": timing.get("name") or spec["name"]}


def _check_spec(*, user, data) -> tuple[Team, dict]:
    """The spec validated as a submit by `user` would be; returns the team and the spec to
    store: as given (each fire validates it again, as the owner then), with its name filled in
    and its secret values, in the clear until do_create_schedule encrypts them. Not the
    normalized spec: that is a submit's output, not always valid input again."""
    if isinstance(data, dict) and data.get("client_job_id") is not None:
        raise ValidationError({"client_job_id": [CLIENT_JOB_ID_GIVEN]})
    team, spec = services.check_job_submission(user=user, data=data)
    given = {key: value for key, value in data.items() if key not in ("owner", "client_job_id")}
    return team, {**given, "name": spec["name"], "secret_env": spec["secret_env"]}


def check_nested_spec(*, user, data) -> tuple[Team, dict]:
    """_check_spec of a body's `spec`: its refusals, 400s and 403s alike (a team the user is not
    in, a P0 of a member), name the field's path in the body, `spec.<field>`."""
    try:
        return _check_spec(user=user, data=data)
    except ValidationError as exc:
        raise ValidationError({"spec": exc.detail}) from None
    except FieldPermissionDenied as exc:
        fields = {f"spec.{field}": messages for field, messages in exc.fields.items()}
        raise FieldPermissionDenied(f"spec.{exc.field}", str(exc.detail), also=fields) from None
