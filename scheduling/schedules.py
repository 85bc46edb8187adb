"""Schedules: a job spec submitted as a run at each fire time of a cron expression
(docs/schedules.md). `check_*` validates, `do_*` writes, `fire_due` is what the firers call.

Exactly once per fire time:
1. A firer lists the due schedules (one indexed query: `next_run_at <= now`, not suspended),
   with what a claim needs: cron, time zone, next_run_at and updated_at as seen.
2. It claims each with a conditional UPDATE: `WHERE id = .. AND next_run_at = <seen> AND
   updated_at = <seen>`, setting next_run_at to the first fire time after now; only then does
   it read the schedule's row (a firer that loses reads nothing more). Of two firers
   only one updates the row; the other's UPDATE waits for the first's transaction, then finds
   next_run_at changed and updates 0 rows: it does nothing. An edit in between changes
   updated_at, so a claim never fires by a cron or spec the schedule no longer has.
3. In the same transaction it submits the run through the ordinary submit service as the
   owner, with client_job_id `schedule-<id>-<fire time>`: a firer that dies mid-fire rolls the
   claim back with the run, and a replayed fire returns the job already submitted.
Missed fire times collapse: the claim jumps past all of them and fires once, for the latest.
"""

import logging
from datetime import UTC, timedelta

from django.db import Error as DatabaseError
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, Value, When
from django.http import Http404
from django.utils import timezone
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError

from mlqueue.api_errors import flatten_errors
from mlqueue.errors import Conflict
from scheduling import services
from scheduling.core.cron import latest_fire, next_fire
from scheduling.models import Concurrency, FireOutcome, Job, Schedule, ScheduleFire, TaskState

# The create's checks live with the spec; the re-exports keep the callers' names.
from scheduling.schedule_spec import CLIENT_JOB_ID_GIVEN as CLIENT_JOB_ID_GIVEN
from scheduling.schedule_spec import ScheduleChangeSerializer, check_nested_spec, differences, validated
from scheduling.schedule_spec import check_schedule_block as check_schedule_block
from scheduling.schedule_spec import check_schedule_create as check_schedule_create
from scheduling.schedule_spec import check_spec_with_schedule as check_spec_with_schedule
from scheduling.schedule_spec import next_fires as next_fires
from scheduling.secrets import SecretEnvUnreadable, decrypt_env, encrypt_env, masked
from teams.models import AuditEvent, EventKind, Team
from teams.selectors import can_edit_quotas, is_member, is_site_admin, team_ids_of

log = logging.getLogger(__name__)

# Fires kept per schedule (the page's history); older ones are deleted as new ones come.
HISTORY_KEPT = 100
# Schedules fired per call: a backlog after an outage is worked off over a few calls.
FIRE_BATCH = 200
# What fire_due lists of each due schedule: enough to claim it.
CLAIM_FIELDS = ("id", "cron", "timezone", "next_run_at", "updated_at")

NAME_TAKEN = (
    "team {team} already has schedule {id} named {name!r} with other settings ({differences}): "
    "PATCH /api/v1/schedules/{id} to change it, or choose another name."
)
SECRETS_UNREADABLE = (
    "the secret_env of schedule {id} ({name}; names: {names}) cannot be decrypted with any key in "
    "MLQ_SECRET_ENV_KEYS: list the key it was encrypted with again (after the new one), or PATCH the "
    "schedule's spec with its secret_env values to encrypt them with the current key (docs/secrets.md)"
)
TEAM_CHANGED = "a schedule stays in its team ({team}): create a new schedule for team {new}."
NOT_YOURS = "only the schedule's owner ({owner}), leads of {team} and site admins may {verb} schedule {id}."
OWNER_MAY_NOT_SUBMIT = "its owner {owner} may no longer submit to team {team} ({why})"
RESUME_REFUSED = (
    "schedule {id} cannot resume: {why}; delete it and create it again as someone who may submit to {team}."
)
SKIPPED_ACTIVE = "its last run, job {job_id}, is still {state} (concurrency: forbid)"
REPLACED = "replaced by the run of schedule {id} ({name}) for {time}"
PAST_DEADLINE = "{late} late, past starting_deadline_minutes ({deadline})"
SUBMITTED = "submitted job {job_id}"
ALREADY_SUBMITTED = "job {job_id} was already submitted for this fire time"
REFUSED = "the submit was refused: {why}"
FAILED = (
    "the fire failed with an internal error ({error}); this fire time is not retried, "
    "the next one is tried as usual: the admins have it in the log"
)
UNREADABLE = "its cron {cron!r} in time zone {zone} cannot be read ({error}): correct it and resume the schedule"
# get_object_or_404's words, answered as for any unknown id: "no such schedule: 14."
GONE = "No Schedule matches the given query."
RENAME_TAKEN = "team {team} already has schedule {id} named {name!r}: choose another name."
# Not finished: queued, placed, running, between a preemption and its requeue, or FAILED with
# the leader's verdict (a retry?) still to come.
ACTIVE_RUN = Q(state__in=[TaskState.PENDING, TaskState.ASSIGNED, TaskState.RUNNING, TaskState.PREEMPTED]) | Q(
    state=TaskState.FAILED, failure_class=""
)


def visible_schedules(user):
    """As for jobs: admins see every schedule, everyone else their teams' (and teams below)."""
    schedules = Schedule.objects.select_related("team", "owner", "last_job")
    if is_site_admin(user):
        return schedules
    return schedules.filter(team_id__in=team_ids_of(user))


def schedule_history(schedule: Schedule):
    """The schedule's own entries in its team's audit log (created, changed, suspended, resumed,
    run now), for whoever sees the schedule; newest first is the caller's ordering."""
    return AuditEvent.objects.filter(kind=EventKind.SCHEDULE, team_id=schedule.team_id, data__schedule=schedule.pk)


def can_change_schedule(user, schedule: Schedule) -> bool:
    """Edit, suspend, resume, run now, delete: its owner, leads of its team (or above), admins."""
    return user.is_authenticated and (schedule.owner_id == user.pk or can_edit_quotas(user, schedule.team))


def check_may_change(*, user, schedule: Schedule, verb: str) -> None:
    if not can_change_schedule(user, schedule):
        owner = schedule.owner.get_username()
        raise PermissionDenied(NOT_YOURS.format(owner=owner, team=schedule.team.name, verb=verb, id=schedule.pk))


# ---- create -------------------------------------------------------------------------------


def do_create_schedule(*, user, team: Team, timing: dict, spec: dict, now=None) -> tuple[Schedule, bool]:
    """Create the schedule, its first fire time computed. Idempotent on (team, name): the same
    timing and spec again return the schedule (created=False); other settings, a Conflict."""
    now = now or timezone.now()
    stored, ciphertext = _stored_spec(spec)
    secrets = spec.get("secret_env") or {}
    existing = Schedule.objects.filter(team=team, name=timing["name"]).first()
    if existing is not None:
        return _same_or_conflict(existing, timing, stored, secrets), False
    try:
        with transaction.atomic():
            schedule = Schedule.objects.create(
                team=team,
                owner=user,
                name=timing["name"],
                spec=stored,
                secret_env_ciphertext=ciphertext,
                **_timing_columns(timing, now=now),
                created_at=now,
                updated_at=now,
            )
            when = f"{schedule.cron!r} in {schedule.timezone}"
            message = f"{user.get_username()} created schedule {schedule.pk} {schedule.name!r}, {when}"
            _audit(schedule, user=user, action="created", message=message, now=now)
    except IntegrityError:  # an identical create won the race for (team, name)
        existing = Schedule.objects.get(team=team, name=timing["name"])
        return _same_or_conflict(existing, timing, stored, secrets), False
    return schedule, True


def _stored_spec(spec: dict) -> tuple[dict, str]:
    """The spec as stored, its secret values as "***", and their ciphertext (as on a job)."""
    secret_values = spec.get("secret_env") or {}
    return {**spec, "secret_env": masked(secret_values)}, encrypt_env(secret_values)


def _timing_columns(timing: dict, *, now) -> dict:
    suspended = timing.get("suspend", False)
    return dict(
        cron=timing["cron"],
        timezone=timing["timezone"],
        concurrency=timing["concurrency"],
        starting_deadline_minutes=timing["starting_deadline_minutes"],
        suspended=suspended,
        suspended_reason="created suspended" if suspended else "",
        next_run_at=next_fire(timing["cron"], timing["timezone"], now),
    )


def _same_or_conflict(existing: Schedule, timing: dict, stored: dict, secrets: dict) -> Schedule:
    """`existing` if `timing` (suspend included), the spec as stored and its secret values are
    its own; else a Conflict naming the differences."""
    if found := differences(existing, timing, stored, secrets):
        name, joined = existing.name, "; ".join(found)
        raise Conflict(NAME_TAKEN.format(team=existing.team.name, id=existing.pk, name=name, differences=joined))
    return existing


# ---- change, suspend, resume, delete -----------------------------------------------------


def check_schedule_change(*, user, schedule: Schedule, data) -> dict:
    """PATCH: the fields given, validated, in the schedule's team. A new spec is validated as
    the editor would submit it, and makes the editor the owner: the runs run as whoever wrote
    what they run. A lead editing a member's spec therefore never runs a command of their own
    under the member's name (and UID, where agents map users); the member's secrets do not
    carry over (a new spec brings its own `secret_env`). Every field given is kept: which of
    them change anything is decided against the row as it is when written (do_change_schedule)."""
    check_may_change(user=user, schedule=schedule, verb="change")
    changes = validated(ScheduleChangeSerializer, data, partial=True)
    if "spec" in changes:
        team, spec = check_nested_spec(user=user, data=changes["spec"])
        if team.pk != schedule.team_id:
            raise ValidationError({"spec": {"team": [TEAM_CHANGED.format(team=schedule.team.name, new=team.name)]}})
        changes["spec"] = spec
        if user.pk != schedule.owner_id:
            changes["owner"] = user
    if changes.get("suspended") is False and schedule.suspended:
        _check_may_resume(schedule, changes.get("owner"))
    return changes


def _changed_only(schedule: Schedule, changes: dict) -> dict:
    """The PATCH's fields less those that already have the value given (a suspend of a suspended
    schedule, a resume of an active one, the cron it has): those change nothing, so they neither
    recompute next_run_at nor reach the audit log. A new spec always counts (it is validated
    again, as its editor, who becomes the owner)."""
    return {
        key: value for key, value in changes.items() if key in ("spec", "reason") or getattr(schedule, key) != value
    }


def _check_may_resume(schedule: Schedule, new_owner=None) -> None:
    """Refused while the owner may not submit (a new owner taking it over in the same PATCH
    was checked as a submitter already)."""
    if new_owner is None and (why := owner_refusal(schedule)):
        raise Conflict(RESUME_REFUSED.format(id=schedule.pk, why=why, team=schedule.team.name))


def do_change_schedule(*, user, schedule: Schedule, changes: dict, now=None) -> Schedule:
    """Apply a checked PATCH in one UPDATE. A new cron or time zone, or a resume, recomputes
    next_run_at from now: a resumed schedule does not fire the times it was suspended for.
    The row is locked and read again first, and the changes kept are those against it: of two
    PATCHes at once the second sees the first's values (the same values again change nothing
    and write no entry; its entry's "before" is what it replaced, not what it read)."""
    now = now or timezone.now()
    try:
        with transaction.atomic():
            locked = Schedule.objects.select_for_update(of=("self",)).select_related("owner", "team")
            if (schedule := locked.filter(pk=schedule.pk).first()) is None:
                raise Http404(GONE)  # deleted since it was read: no entry for a change that did not happen
            changes = _changed_only(schedule, changes)
            if not set(changes) - {"reason"}:  # nothing to change (a reason alone is no change): no write, no entry
                return schedule
            if changes.get("suspended") is False:
                _check_may_resume(schedule, changes.get("owner"))
            Schedule.objects.filter(pk=schedule.pk).update(**_change_columns(schedule, user, changes, now))
            _audit_change(schedule, user=user, changes=changes, now=now)
            schedule.refresh_from_db()
    except IntegrityError:
        other = Schedule.objects.get(team_id=schedule.team_id, name=changes["name"])
        raise Conflict(RENAME_TAKEN.format(team=schedule.team.name, id=other.pk, name=other.name)) from None
    return schedule


def _change_columns(schedule: Schedule, user, changes: dict, now) -> dict:
    """The columns a PATCH's changes write."""
    columns = {key: changes[key] for key in ("name", "cron", "timezone", "concurrency") if key in changes}
    if "starting_deadline_minutes" in changes:
        columns["starting_deadline_minutes"] = changes["starting_deadline_minutes"]
    if "spec" in changes:
        columns["spec"], columns["secret_env_ciphertext"] = _stored_spec(changes["spec"])
    if "owner" in changes:
        columns["owner"] = changes["owner"]
    if "suspended" in changes:
        columns["suspended"] = changes["suspended"]
        columns["suspended_reason"] = _suspend_reason(user, changes) if changes["suspended"] else ""
    cron, zone = columns.get("cron", schedule.cron), columns.get("timezone", schedule.timezone)
    if {"cron", "timezone"} & set(columns) or columns.get("suspended") is False:
        columns["next_run_at"] = next_fire(cron, zone, now)
    return {**columns, "updated_at": now}


def _audit_change(schedule: Schedule, *, user, changes: dict, now) -> None:
    """The PATCH's entry: the fields it changed (the timing's before and after; a spec by its
    digest, never its secrets), and an owner taken over by the editor."""
    fields = sorted(key for key in changes if key not in ("reason", "owner"))
    timing = {key: (getattr(schedule, key), changes[key]) for key in TIMING_FIELDS if key in changes}
    said = ", ".join(f"{key} {before!r} -> {after!r}" for key, (before, after) in timing.items())
    if "spec" in changes:
        said = ", ".join(filter(None, [said, "a new spec"]))
    if "owner" in changes:
        said += f"; it now runs as {user.get_username()} (was {schedule.owner.get_username()})"
    verb = {True: "suspended", False: "resumed"}.get(changes.get("suspended"), "changed")
    why = f": {changes['reason']}" if changes.get("reason") else ""
    message = f"{user.get_username()} {verb} schedule {schedule.pk} {schedule.name!r}{why}" + (
        f" ({said})" if said else ""
    )
    _audit(schedule, user=user, action=verb, message=message, now=now, fields=fields, timing=timing)


# Columns a PATCH changes that the audit entry shows before and after.
TIMING_FIELDS = ("name", "cron", "timezone", "concurrency", "starting_deadline_minutes", "suspended")


def _audit(schedule: Schedule, *, user, action: str, message: str, now=None, **data) -> None:
    """One entry in the audit log (its team's events) about the schedule, by `user`."""
    AuditEvent.objects.create(
        kind=EventKind.SCHEDULE,
        team_id=schedule.team_id,
        actor=user,
        actor_name=user.get_username(),
        reason=action,
        message=message[:2000],
        data={"schedule": schedule.pk, "name": schedule.name, **data},
        created_at=now or timezone.now(),
    )


def _suspend_reason(user, changes: dict) -> Case:
    """Who suspended it and why; a schedule already suspended keeps the reason it has (a pause
    for an owner who left, or the first admin's words, is not overwritten by a second suspend)."""
    reason = changes.get("reason") or ""
    by = f"suspended by {user.get_username()}"
    return Case(When(suspended=True, then=F("suspended_reason")), default=Value(f"{by}: {reason}" if reason else by))


def do_delete_schedule(*, user, schedule: Schedule) -> None:
    """Delete the schedule and its fire history; its runs stay (their `schedule` becomes null).
    A conditional DELETE: of two deletes at once only the one that deleted the row writes the
    entry; the other (its DELETE waited for the first's commit and found no row) is a 404."""
    check_may_change(user=user, schedule=schedule, verb="delete")
    with transaction.atomic():
        # The row locked first: Django deletes its fires and unlinks its runs before the row
        # itself, and a fire committed meanwhile (a run now, the firer's claim holding the row)
        # would fail the DELETE's foreign-key check at commit, a 500 (a review).
        if not Schedule.objects.select_for_update().filter(pk=schedule.pk).exists():
            raise Http404(GONE)
        _, deleted = Schedule.objects.filter(pk=schedule.pk).delete()
        if not deleted.get(Schedule._meta.label):
            raise Http404(GONE)
        message = f"{user.get_username()} deleted schedule {schedule.pk} {schedule.name!r}"
        _audit(schedule, user=user, action="deleted", message=message)


# ---- firing --------------------------------------------------------------------------------


def fire_due(*, now=None) -> list[ScheduleFire]:
    """Fire every schedule due at `now` (each once, however many of its times were missed).
    Safe to call from any number of processes at once: see the module's docstring."""
    now = now or timezone.now()
    due = (
        Schedule.objects.filter(suspended=False, next_run_at__lte=now)
        .order_by("next_run_at", "id")
        .values(*CLAIM_FIELDS)[:FIRE_BATCH]
    )
    fired = []
    for seen in list(due):
        try:
            fire = fire_one(seen, now=now)
        except Exception:  # its transaction rolled back: retried next time; the others go on
            log.exception("schedule %s: firing failed", seen["id"])
            continue
        if fire is not None:
            fired.append(fire)
    return fired


def fire_one(seen: dict, *, now) -> ScheduleFire | None:
    """Claim the fire time due in `seen` (a row of fire_due's list: CLAIM_FIELDS) and handle it,
    in one transaction. None: another firer claimed it first, or the schedule changed since it
    was listed (suspended, edited: the next call lists it as it is).
    An unexpected error handling it (a bug, not the spec's fault: it would fail the same way at
    every try) is recorded as REFUSED in a savepoint, so the claim still commits; a cron or time
    zone that cannot be read any more (edited by hand) pauses the schedule. Only the database's
    own errors roll the claim back, to be tried again by the next call."""
    with transaction.atomic():
        try:
            following = next_fire(seen["cron"], seen["timezone"], now)
        except Exception as exc:  # any error of the cron library: the schedule cannot fire
            return _unreadable(seen, now, exc)
        claimed = Schedule.objects.filter(
            pk=seen["id"], next_run_at=seen["next_run_at"], updated_at=seen["updated_at"], suspended=False
        ).update(next_run_at=following)
        if not claimed:
            return None
        schedule = Schedule.objects.select_related("owner", "team").get(pk=seen["id"])
        fire_time = latest_fire(schedule.cron, schedule.timezone, first=seen["next_run_at"], until=now)
        if (handled := _handled(schedule, fire_time)) is not None:
            return handled  # a run now at this fire time (the claim's UPDATE holds the row: see _fire)
        try:
            with transaction.atomic():
                return _fire(schedule, fire_time=fire_time, now=now, deadline=True)
        except DatabaseError:
            raise
        except Exception as exc:
            log.exception("schedule %s: the fire for %s failed", schedule.pk, fire_time)
            return _record(schedule, fire_time, now, FireOutcome.REFUSED, FAILED.format(error=type(exc).__name__))


def _unreadable(seen: dict, now, exc: Exception) -> ScheduleFire | None:
    """Pause a schedule whose cron or time zone cannot be read (unless it changed since it was
    listed: an edit may have mended it)."""
    why = UNREADABLE.format(cron=seen["cron"], zone=seen["timezone"], error=exc)
    paused = Schedule.objects.filter(pk=seen["id"], updated_at=seen["updated_at"], suspended=False).update(
        suspended=True, suspended_reason=f"paused: {why}"[:500], updated_at=now
    )
    if not paused:
        return None
    log.warning("schedule %s paused: %s", seen["id"], why)
    schedule = Schedule.objects.get(pk=seen["id"])
    return _record(schedule, seen["next_run_at"], now, FireOutcome.PAUSED, f"paused: {why}"[:500])


def do_run_now(*, user, schedule: Schedule, now=None) -> tuple[ScheduleFire, bool]:
    """An ordinary run with scheduled_for = now, honouring the schedule's concurrency; it runs
    as the schedule's owner, whoever asks. next_run_at is left as it is. The schedule's row is
    locked first, as a firer's claim locks it: a run now and a fire time at once take turns, so
    forbid sees the other's run. Only the schedule's row: locking its owner's and team's rows
    too (select_related) made every transaction that writes a row naming that user wait at
    commit, and a pass doing so while it held this schedule's last run deadlocked with it.
    Returns the fire and whether this call made it: a repeat in the same second (a double
    click, a retried request) gets the fire already made, and writes no second entry."""
    check_may_change(user=user, schedule=schedule, verb="run")
    pressed = now or timezone.now()
    now = pressed.replace(microsecond=0)  # the fire time, in whole seconds as a cron's are
    with transaction.atomic():
        locked = Schedule.objects.select_for_update(of=("self",)).select_related("owner", "team")
        if (schedule := locked.filter(pk=schedule.pk).first()) is None:
            raise Http404(GONE)  # deleted since it was read
        if (handled := _handled(schedule, now)) is not None:
            return handled, False
        fire = _fire(schedule, fire_time=now, now=now, deadline=False)
        # When it was pressed (QA: in whole seconds it listed before a change made just before it).
        _audit_run_now(schedule, user=user, fire=fire, now=pressed)
        return fire, True


def _audit_run_now(schedule: Schedule, *, user, fire: ScheduleFire, now) -> None:
    """Who pressed "run now" (the run itself is the owner's, and says so on its timeline)."""
    run = f" (job {fire.job_id})" if fire.job_id else ""
    message = (
        f"{user.get_username()} ran schedule {schedule.pk} {schedule.name!r} now, "
        f"as its owner {schedule.owner.get_username()}: {fire.outcome}{run}"
    )
    _audit(schedule, user=user, action="run now", message=message, now=now, job=fire.job_id)


def _fire(schedule: Schedule, *, fire_time, now, deadline: bool) -> ScheduleFire:
    """One fire time not handled yet, in the caller's transaction: the checks in order, then
    the submit. Each fire time leaves one row: the callers hold the schedule's row lock (the
    claim's UPDATE, run now's SELECT FOR UPDATE) and look for a fire at that time first (run
    now twice in one second, or at a cron fire time), so the second finds the first's row.
    1. later than the starting deadline -> SKIPPED_DEADLINE;
    2. the owner may no longer submit to the team -> PAUSED (the schedule is suspended);
    3. a run still active: forbid -> SKIPPED_ACTIVE, replace -> cancel it, allow -> nothing;
    4. submit as the owner -> SUBMITTED (or REPLACED), or REFUSED with the submit's reason."""
    if deadline and (late := _late(schedule, fire_time, now)) is not None:
        deadline_minutes = schedule.starting_deadline_minutes
        return _record(
            schedule,
            fire_time,
            now,
            FireOutcome.SKIPPED_DEADLINE,
            PAST_DEADLINE.format(late=late, deadline=deadline_minutes),
        )
    if why := owner_refusal(schedule):
        return _pause(
            schedule,
            fire_time,
            now,
            OWNER_MAY_NOT_SUBMIT.format(owner=schedule.owner.get_username(), team=schedule.team.name, why=why),
        )
    active = _active_runs(schedule)
    outcome = FireOutcome.SUBMITTED
    if active and schedule.concurrency == Concurrency.FORBID:
        message = SKIPPED_ACTIVE.format(job_id=active[0].pk, state=active[0].state)
        return _record(schedule, fire_time, now, FireOutcome.SKIPPED_ACTIVE, message, job=active[0])
    replacing = active if schedule.concurrency == Concurrency.REPLACE else []
    return _submit(schedule, fire_time, now, FireOutcome.REPLACED if replacing else outcome, replacing=replacing)


def _handled(schedule: Schedule, fire_time) -> ScheduleFire | None:
    return ScheduleFire.objects.filter(schedule=schedule, scheduled_for=fire_time).order_by("id").first()


def _active_runs(schedule: Schedule) -> list[Job]:
    """The schedule's runs not finished, newest first, as far as its concurrency needs them:
    none under allow (a schedule firing for months would read every run still queued on each
    fire), the newest under forbid, every one under replace."""
    if schedule.concurrency == Concurrency.ALLOW:
        return []
    runs = Job.objects.filter(ACTIVE_RUN, schedule=schedule, parent__isnull=True).order_by("-id")
    return list(runs[:1] if schedule.concurrency == Concurrency.FORBID else runs)


def _late(schedule: Schedule, fire_time, now) -> str | None:
    """How late past the fire time, when that is past the starting deadline ("1 min 15 s": in
    whole minutes it read "1 min late, past starting_deadline_minutes (1)", QA); None otherwise."""
    if schedule.starting_deadline_minutes is None:
        return None
    late = now - fire_time
    if late <= timedelta(minutes=schedule.starting_deadline_minutes):
        return None
    minutes, seconds = divmod(int(late.total_seconds()), 60)
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


def owner_refusal(schedule: Schedule) -> str:
    """Why the owner may no longer submit to the schedule's team ("" if they may)."""
    owner = schedule.owner
    if not owner.is_active:
        return "the account is deactivated"
    if not is_member(owner, schedule.team):
        return "no longer a member"
    return ""


def _pause(schedule: Schedule, fire_time, now, why: str) -> ScheduleFire:
    Schedule.objects.filter(pk=schedule.pk).update(suspended=True, suspended_reason=f"paused: {why}", updated_at=now)
    log.warning("schedule %s paused: %s", schedule.pk, why)
    return _record(schedule, fire_time, now, FireOutcome.PAUSED, f"paused: {why}")


def _cancel_runs(schedule: Schedule, runs: list[Job], fire_time) -> None:
    """Cancel the active runs through the ordinary cancel (a group's children with it), as the
    owner (whose runs they are). A run that ended meanwhile needs no cancel."""
    why = REPLACED.format(id=schedule.pk, name=schedule.name, time=f"{fire_time:%Y-%m-%d %H:%M} UTC")
    for run in runs:
        try:
            services.do_cancel_job(job=run, user=schedule.owner, reason=why)
        except Conflict:
            pass


def run_client_job_id(schedule: Schedule, fire_time) -> str:
    return f"schedule-{schedule.pk}-{fire_time.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def _submit(schedule: Schedule, fire_time, now, outcome: str, *, replacing: list[Job] = ()) -> ScheduleFire:
    """Submit the run as the owner, through the submit's own validation (the owner's rights at
    fire time); `replacing`: the active runs it replaces, cancelled only once the new one passed
    (a refused spec killed them and started nothing). A refusal is recorded, in a savepoint so
    the claim still commits: a spec the cluster cannot hold any more must not be retried every pass."""
    try:
        with transaction.atomic():
            secret_env = _secret_values(schedule)
            data = {**schedule.spec, "client_job_id": run_client_job_id(schedule, fire_time), "secret_env": secret_env}
            team, spec = services.check_job_submission(user=schedule.owner, data=data)
            if replacing:
                _cancel_runs(schedule, replacing, fire_time)
            job, created = services.do_submit_job(
                user=schedule.owner, team=team, spec=spec, schedule=schedule, scheduled_for=fire_time
            )
    except PermissionDenied as exc:
        return _pause(schedule, fire_time, now, REFUSED.format(why=_reason(exc)))
    except ValidationError as exc:
        if isinstance(exc.detail, dict) and "team" in exc.detail:  # its team takes no jobs (a division now)
            return _pause(schedule, fire_time, now, REFUSED.format(why=_reason(exc)))
        return _record(schedule, fire_time, now, FireOutcome.REFUSED, REFUSED.format(why=_reason(exc)))
    except SecretEnvUnreadable as exc:  # nothing was submitted: the message is the whole story
        return _record(schedule, fire_time, now, FireOutcome.REFUSED, str(exc))
    except APIException as exc:
        return _record(schedule, fire_time, now, FireOutcome.REFUSED, REFUSED.format(why=_reason(exc)))
    message = (SUBMITTED if created else ALREADY_SUBMITTED).format(job_id=job.pk)
    return _record(schedule, fire_time, now, outcome, message, job=job)


def _secret_values(schedule: Schedule) -> dict[str, str]:
    """The spec's secret values; unreadable (its key dropped from MLQ_SECRET_ENV_KEYS): an error
    naming the schedule and the variables, never a value. A schedule keeps its ciphertext for
    good, so it needs its key listed until its spec is saved again."""
    try:
        return decrypt_env(schedule.secret_env_ciphertext)
    except SecretEnvUnreadable:
        names = ", ".join(sorted(schedule.spec.get("secret_env") or {}))
        why = SECRETS_UNREADABLE.format(id=schedule.pk, name=schedule.name, names=names)
        log.error("schedule %s: %s", schedule.pk, why)
        raise SecretEnvUnreadable(why) from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{field}: {messages[0]}" for field, messages in flatten_errors(exc.detail).items())
    if isinstance(exc, APIException):
        return str(exc.detail)
    return str(exc)


def _record(schedule: Schedule, fire_time, now, outcome: str, message: str, *, job: Job | None = None) -> ScheduleFire:
    """The fire's history row and the schedule's last outcome; the oldest rows past HISTORY_KEPT go."""
    fire = ScheduleFire.objects.create(
        schedule=schedule, scheduled_for=fire_time, fired_at=now, outcome=outcome, job=job, message=message
    )
    last = {"last_fire_at": fire_time, "last_outcome": outcome, **({"last_job": job} if job else {})}
    Schedule.objects.filter(pk=schedule.pk).update(**last)
    # One DELETE whatever the count: the rows past the newest HISTORY_KEPT, found by the index.
    older = ScheduleFire.objects.filter(schedule=schedule).order_by("-fired_at", "-id").values("pk")[HISTORY_KEPT:]
    ScheduleFire.objects.filter(pk__in=older).delete()
    return fire
