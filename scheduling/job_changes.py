"""Changes to a submitted job (name, priority, a shorter time limit) and cancelling many jobs
at once. `check_*` validates, `do_*` writes (and records why).

What may change, and when:
1. `name`: while the job is queued or running (PENDING, ASSIGNED, RUNNING).
2. `priority`: while the job is PENDING, and only to a priority the caller could submit at
   (P0: leads of the job's team or above, and site admins); a placed job keeps the priority
   it was placed with.
3. `max_runtime_hours`: only down, while the job is queued or running (the reconciler reads
   the limit live, so a running job is stopped at the new limit).
An attempt that ended (even one awaiting its retry) cannot be changed.
A group's parent (an array, a sweep) may change while the group is queued or running: a new
priority goes to every child still PENDING, a shorter time limit to every child queued or running
(placed children keep their priority, as a placed job does).
The submitted spec (`Job.spec`) stays as submitted; the columns hold what is in force."""

from django.db import transaction
from django.utils import timezone
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError

from mlqueue.errors import Conflict, FieldPermissionDenied
from mlqueue.serializer_fields import ChoiceField
from scheduling import notify
from scheduling.core.model import PRIORITIES
from scheduling.job_control import lock_children
from scheduling.models import Job
from scheduling.selectors import ME, NO_VISIBLE_TEAM, owner_filter_refusal, visible_jobs, visible_team_ids
from scheduling.services import P0_RESERVED, check_may_cancel, do_cancel_job
from scheduling.spec import (
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictStringField,
    checked_max_runtime,
)
from scheduling.states import QUEUED_OR_RUNNING, UNSUCCESSFUL, JobState
from teams.models import AuditEvent, EventKind
from teams.selectors import can_edit_quotas

NOTHING_TO_CHANGE = "give at least one of name, priority, max_runtime_hours."
REASON_LENGTH = 500  # as a cancel's
NOT_NOW = "job {job_id} is {state}: its {field} can change only while it is {states}."
RUNTIME_ONLY_DOWN = "may only go down: the job has {current:g} hours, you asked for {asked:g}."
CHANGED_MEANWHILE = "job {job_id} changed while this request ran ({field} is now {value!r}); look again and retry."

# The states each change needs, checked and then required again by the UPDATE.
WRITABLE_STATES = {
    "name": QUEUED_OR_RUNNING,
    "priority": (JobState.PENDING,),
    "max_runtime_hours": QUEUED_OR_RUNNING,
}


class JobChangeSerializer(StrictSerializer):
    name = StrictStringField(required=False, max_length=200, printable_only=True)
    priority = ChoiceField(PRIORITIES, required=False)
    max_runtime_hours = StrictFloatField(required=False)
    # Why, for the job's events (an incident, a deadline), as hold, cancel and requeue take one:
    # no invisible or control characters, as theirs.
    reason = StrictStringField(
        required=False, allow_blank=True, max_length=REASON_LENGTH, printable_only=True, help_text="why, for the events"
    )

    def validate_max_runtime_hours(self, value):
        return checked_max_runtime(value)  # the submit's range, then "only down" on the job

    def validate(self, attrs):
        if not set(attrs) - {"reason"}:
            raise ValidationError({"body": [NOTHING_TO_CHANGE]})
        return attrs


# What a change to a group's parent does to its children: the states it reaches them in.
GROUP_CHILD_STATES = {"priority": (JobState.PENDING,), "max_runtime_hours": QUEUED_OR_RUNNING}


def writable_states(job: Job, field: str) -> tuple:
    return QUEUED_OR_RUNNING if job.group_kind else WRITABLE_STATES[field]


def check_job_change(*, user, job: Job, data) -> dict:
    """The changes `data` asks for, keeping only those that differ; refuses any the caller may
    not make or the job's state does not allow (a 400, 403 or 409 naming the field)."""
    check_may_cancel(user=user, job=job, verb="change")
    body = JobChangeSerializer(data=data)
    body.is_valid(raise_exception=True)
    asked = dict(body.validated_data)
    reason = asked.pop("reason", "")
    changes = {field: value for field, value in asked.items() if getattr(job, field) != value}
    for field in changes:
        if job.state not in writable_states(job, field):
            states = ", ".join(writable_states(job, field))
            raise Conflict(NOT_NOW.format(job_id=job.pk, state=job.state, field=field, states=states))
    if changes.get("priority") == "P0" and not can_edit_quotas(user, job.team):
        raise FieldPermissionDenied("priority", P0_RESERVED.format(name=job.team.name))
    if "max_runtime_hours" in changes and changes["max_runtime_hours"] > job.max_runtime_hours:
        raise ValidationError(
            {
                "max_runtime_hours": [
                    RUNTIME_ONLY_DOWN.format(current=job.max_runtime_hours, asked=changes["max_runtime_hours"])
                ]
            }
        )
    return {**changes, "reason": reason} if changes and reason else changes


def do_change_job(*, user, job: Job, changes: dict) -> Job:
    """Write check_job_change's changes, each as a conditional UPDATE on the value and state the
    check saw (0 rows: someone else changed the job first, and nothing is written), with one
    event per field holding before and after, and the `reason` given (not a field: why)."""
    now = timezone.now()
    changes = dict(changes)
    reason = changes.pop("reason", "")
    with transaction.atomic():
        lock_children(job, states=None)  # a group's, before its own row (the UPDATE below)
        for field, value in changes.items():
            before = getattr(job, field)
            written = Job.objects.filter(pk=job.pk, state__in=writable_states(job, field), **{field: before}).update(
                **{field: value, "updated_at": now}
            )
            if not written:
                current = Job.objects.filter(pk=job.pk).values_list(field, flat=True).first()
                raise Conflict(CHANGED_MEANWHILE.format(job_id=job.pk, field=field, value=current))
            children = _change_children(job, field, value, now=now)
            message = f"{field} changed from {before!r} to {value!r} by {user.get_username()}"
            message += f", and for {children} of its children" if children else ""
            data = {"field": field, "before": before, "after": value, **({"children": children} if children else {})}
            AuditEvent.objects.create(
                job=job,
                kind=EventKind.JOB_CHANGED,
                actor=user,
                actor_name=user.get_username(),
                message=message + (f": {reason}" if reason else ""),
                data={**data, "reason": reason} if reason else data,
                created_at=now,
            )
        if changes:
            notify.wake_scheduler("change")
            notify.jobs_changed([job.pk])
    job.refresh_from_db()
    return job


def _change_children(job: Job, field: str, value, *, now) -> int:
    """A group's change reaches the children in GROUP_CHILD_STATES (a time limit only down)."""
    if not job.group_kind or field not in GROUP_CHILD_STATES:
        return 0
    children = Job.objects.filter(parent=job, state__in=GROUP_CHILD_STATES[field]).exclude(**{field: value})
    if field == "max_runtime_hours":
        children = children.filter(max_runtime_hours__gt=value)
    return children.update(**{field: value, "updated_at": now})


# --- cancelling many jobs ------------------------------------------------------------------

MAX_BULK_CANCEL = 1000
IDS_OR_FILTER = "give exactly one of ids and filter."
EMPTY_FILTER = "give at least one of owner, state, team: an empty filter would match every job you can see."
TOO_MANY_MATCH = "the filter matches {count} jobs not yet ended; cancel at most {limit} per call (narrow the filter)."
NOT_VISIBLE = "job {id} does not exist or is not visible to you."
ALREADY_CANCELLED = "job {id} is already CANCELLED."


class CancelFilterSerializer(StrictSerializer):
    owner = StrictStringField(required=False, max_length=150, help_text='a user name, or "me"')
    state = ChoiceField(JobState.choices, required=False)
    team = StrictStringField(required=False, max_length=100)  # checked with the owner: check_bulk_cancel

    def validate(self, attrs):
        if not attrs:
            raise ValidationError(EMPTY_FILTER)
        return attrs


class BulkCancelSerializer(StrictSerializer):
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        allow_empty=False,
        max_length=MAX_BULK_CANCEL,
    )
    filter = CancelFilterSerializer(required=False)
    reason = StrictStringField(required=False, allow_blank=True, max_length=500, default="", printable_only=True)

    def validate(self, attrs):
        if ("ids" in attrs) == ("filter" in attrs):
            raise ValidationError({"body": [IDS_OR_FILTER]})
        return attrs


def check_bulk_cancel(*, user, data) -> tuple[list[int], str]:
    """The job ids a bulk cancel names (by `ids`, in their order, or the visible jobs not yet
    ended that `filter` matches, oldest first) and its reason; at most MAX_BULK_CANCEL."""
    body = BulkCancelSerializer(data=data)
    body.is_valid(raise_exception=True)
    params = body.validated_data
    if "ids" in params:
        return list(dict.fromkeys(params["ids"])), params["reason"]
    wanted = params["filter"]
    jobs = visible_jobs(user).exclude(state__in=(JobState.SUCCEEDED, JobState.CANCELLED))
    jobs = jobs.exclude(state__in=UNSUCCESSFUL, failure_class__gt="")  # over for good; blank: awaiting a retry
    # An owner or a team that is a typo (or not the caller's to see) is a 400, as in the jobs
    # list: it cancelled nothing and answered 200 as if no job had matched.
    if "owner" in wanted:
        if why := owner_filter_refusal(user, wanted["owner"]):
            raise ValidationError({"filter": {"owner": [why]}})
        jobs = jobs.filter(owner__username=user.get_username() if wanted["owner"] == ME else wanted["owner"])
    if "state" in wanted:
        jobs = jobs.filter(state=wanted["state"])
    if "team" in wanted:
        if not (team_ids := visible_team_ids(user, wanted["team"])):
            raise ValidationError({"filter": {"team": [NO_VISIBLE_TEAM.format(name=wanted["team"])]}})
        jobs = jobs.filter(team_id__in=team_ids)
    ids = list(jobs.order_by("id").values_list("id", flat=True)[: MAX_BULK_CANCEL + 1])
    if len(ids) > MAX_BULK_CANCEL:
        count = jobs.count()
        raise ValidationError({"filter": [TOO_MANY_MATCH.format(count=count, limit=MAX_BULK_CANCEL)]})
    return ids, params["reason"]


def do_cancel_jobs(*, user, job_ids: list[int], reason: str) -> dict[str, list]:
    """Cancel each job through do_cancel_job (each audited, each in its own transaction); a job
    the caller cannot see or cancel, or that already ended, is skipped with why, not an error.
    `stopping`: those of `cancelled` whose tasks are still stopping on their nodes (a running job
    is CANCELLED once they have), as the one-job cancel's answer says with its state."""
    by_id = visible_jobs(user).select_related("owner", "team").in_bulk(job_ids)
    cancelled, stopping, skipped = [], [], []
    for job_id in job_ids:
        job = by_id.get(job_id)
        why = _why_not_cancel(user, job_id, job)
        if not why:
            try:
                job = do_cancel_job(job=job, user=user, reason=reason)
            except (PermissionDenied, Conflict) as exc:  # the job moved on between the read and the write
                why = str(exc.detail)
        if why:
            skipped.append({"id": job_id, "why": why})
            continue
        cancelled.append(job_id)
        if job.state != JobState.CANCELLED:
            stopping.append(job_id)
    return {"cancelled": cancelled, "stopping": stopping, "skipped": skipped}


def _why_not_cancel(user, job_id: int, job: Job | None) -> str:
    if job is None:
        return NOT_VISIBLE.format(id=job_id)
    if job.state == JobState.CANCELLED:
        return ALREADY_CANCELLED.format(id=job_id)
    try:
        check_may_cancel(user=user, job=job)
    except PermissionDenied as exc:
        return str(exc.detail)
    return ""
