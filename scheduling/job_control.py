"""Holding, releasing and requeuing a job (POST /api/v1/jobs/{id}/hold, /release, /requeue).
`check_*` refuses, `do_*` writes (and records why). Who may: as for cancel (can_change_job).

1. hold: a PENDING job is not considered by the scheduler until it is released (the snapshot
   hands `held` to the core, which explains it as HELD). Holding a held job changes nothing.
2. release: a held job is considered again (whatever its state; 409 if it is not held).
3. requeue: a placed job (ASSIGNED or RUNNING) is stopped exactly as a drain stops it (SIGTERM,
   SIGKILL at its grace deadline) with the stop reason REQUEUED; when its ranks have exited it
   comes back PENDING as a new attempt, spending none of max_retries or max_restarts and
   counting no preemption (core/settle.py, rule 4). Requeuing a job already being requeued
   changes nothing.
Hold, release and requeue decide under the job's row lock (a group's: after its pending
children's, the order a child's transition takes them), so one racing another, a cancel or a
placement sees what the other did; a job that moved on first gets a 409 saying what it is now.

A group's parent (an array, a sweep): hold holds the group and every child still PENDING, so
none starts until the group is released (children placed already run on); release releases the
group and its held children; requeue is refused (requeue an element or trial itself)."""

from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import PermissionDenied

from mlqueue.errors import Conflict
from scheduling import notify
from scheduling.models import Job, StopReason, Task, held_message
from scheduling.selectors import can_change_job, can_edit_quotas
from scheduling.states import JOB_FINISHED, ON_NODE, JobState
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent, EventKind

NOT_YOURS = (
    "only the job's owner ({owner}), leads of {team} (or of a team above it) and site admins may {verb} job {job_id}."
)
HOLD_NOT_PENDING = "job {job_id} is {state}: only a PENDING job can be held."
NOT_HELD = "job {job_id} is not held: there is nothing to release."
STILL_HELD = "; still held with its group, job {group}"  # its own hold released, its group's stands
# As Slurm's admin hold, which its user cannot release: a member undid her lead's hold (QA).
HELD_ABOVE = (
    "job {job_id} was held by {holder}, not by its owner: only a lead of {team} (or of a team above it) "
    "or an admin may release it."
)
REQUEUE_NOT_PLACED = "job {job_id} is {state}: only an ASSIGNED or RUNNING job can be requeued."
REQUEUE_CANCELLING = "job {job_id} is being cancelled: it will not be requeued."
ALREADY_STOPPING = "job {job_id} is already being stopped ({reason}): it will not be requeued on request."
HOLD_GROUP_FINISHED = "job {job_id} is {state}: a finished group cannot be held."
REQUEUE_GROUP = (
    "job {job_id} is {kind}: requeue its {children} one by one (GET /api/v1/jobs/{job_id}/children lists them)."
)

PLACED = tuple(ON_NODE)
GROUP_CHILDREN = {"array": "elements", "sweep": "trials", "pipeline": "steps"}


def check_may_control(*, user, job: Job, verb: str) -> None:
    if not can_change_job(user, job):
        raise PermissionDenied(
            NOT_YOURS.format(owner=job.owner.get_username(), team=job.team.name, verb=verb, job_id=job.pk)
        )


def _event(job: Job, user, *, now, message: str, before: bool, after: bool) -> None:
    AuditEvent.objects.create(
        job=job,
        kind=EventKind.JOB_CHANGED,
        actor=user,
        actor_name=user.get_username(),
        message=message,
        data={"field": "held", "before": before, "after": after},
        created_at=now,
    )


def do_hold_job(*, user, job: Job, reason: str = "") -> Job:
    """Hold a PENDING job; a group, in any state but finished, together with its children still
    PENDING. Idempotent: a held job stays held, as it was; a child held with its group gets a
    hold of its own (the group's release leaves it held). Decided under the job's row lock,
    which a release and the placement's transition take too (QA: a hold racing a release saw
    the job still held, then released, and answered "only a PENDING job can be held")."""
    check_may_control(user=user, job=job, verb="hold")
    with transaction.atomic():
        lock_children(job)
        locked = Job.objects.select_for_update(no_key=True).only("state", "held", "held_with_group").get(pk=job.pk)
        if not locked.held or locked.held_with_group:
            if job.group_kind and locked.state in JOB_FINISHED:
                raise Conflict(HOLD_GROUP_FINISHED.format(job_id=job.pk, state=locked.state))
            if not job.group_kind and locked.state != JobState.PENDING:
                raise Conflict(HOLD_NOT_PENDING.format(job_id=job.pk, state=locked.state))
            _hold(user=user, job=job, reason=reason, now=timezone.now(), was_held=locked.held)
    job.refresh_from_db()
    return job


def lock_children(job: Job, states=(JobState.PENDING,)) -> None:
    """A group's children in `states` (None: every one not finished), locked in id order before
    the group's own row: the order a child's transition takes them (its row, then its group's:
    group_state), which a group's hold, release or change taking the group first reversed, and
    the two deadlocked (a review: a child's cancel against a hold of its group)."""
    if job.group_kind:
        children = Job.objects.select_for_update(no_key=True).filter(parent=job)
        children = children.exclude(state__in=JOB_FINISHED) if states is None else children.filter(state__in=states)
        list(children.order_by("pk").values_list("pk", flat=True))


def _hold(*, user, job: Job, reason: str, now, was_held: bool = False) -> None:
    """Hold the job (its row locked by the caller) and a group's children not yet placed that
    are not held by a hold of their own, and record it (`was_held`: a child held with its group,
    now by a hold of its own)."""
    name = user.get_username()
    held = {"held": True, "held_by_name": name, "held_reason": reason, "pending_histogram": {}, "updated_at": now}
    Job.objects.filter(pk=job.pk).update(**held, held_with_group=False)
    message = held_message(name, reason)
    if job.group_kind:
        children = Job.objects.filter(parent=job, state=JobState.PENDING, held=False)
        message += f" (with {children.update(**held, held_with_group=True)} of its children not yet placed)"
    _event(job, user, now=now, message=message, before=was_held, after=True)
    notify.jobs_changed([job.pk])
    notify.wake_scheduler("hold")


def hold_with_group(job: Job, *, now) -> bool:
    """A child back in the queue (a retry, a requeue) while its group is held is held with it,
    by the group's hold: holding a group holds every child not yet placed, and one that comes
    back was not placed (QA: a held array's requeued element started at once). In the caller's
    transaction, which holds the child's row lock and has moved it to PENDING; the parent is
    locked whatever it is, then read (a child's transition takes it next), so a hold committing
    meanwhile either sees the child PENDING or is seen here. Locked only where held, a parent
    whose hold was not committed yet was passed over without waiting for it, and the child ran
    under a held group (a review). Returns whether it held the child."""
    if job.parent_id is None:
        return False
    group = Job.objects.select_for_update(no_key=True).only("held", "held_by_name", "held_reason").get(pk=job.parent_id)
    if not group.held:
        return False
    held = {"held": True, "held_by_name": group.held_by_name, "held_reason": group.held_reason}
    held_now = Job.objects.filter(pk=job.pk, state=JobState.PENDING, held=False)
    return bool(held_now.update(**held, held_with_group=True, updated_at=now))


def do_release_job(*, user, job: Job) -> Job:
    """Release a held job: the next pass considers it again. A group releases the children its
    hold held (one held by a hold of its own stays held); a child released from a hold of its
    own while its group is held stays held, with its group (QA: it ran while its array said
    "held")."""
    check_may_control(user=user, job=job, verb="release")
    now = timezone.now()
    with transaction.atomic():
        lock_children(job)
        hold = Job.objects.select_for_update(no_key=True).filter(pk=job.pk, held=True)
        if (found := hold.values_list("held_by_name", "held_with_group").first()) is None:
            raise Conflict(NOT_HELD.format(job_id=job.pk))
        holder, with_group = found
        _check_may_release(user=user, job=job, holder=holder)
        hold.update(**RELEASED, updated_at=now)
        message, still_held = f"released by {user.get_username()}", False
        if job.group_kind:
            with_it = Job.objects.filter(parent=job, held=True, held_with_group=True)
            children = with_it.update(**RELEASED, updated_at=now)
            message += f" with {children} of its children" if children else ""
        elif not with_group and (still_held := hold_with_group(job, now=now)):
            message += STILL_HELD.format(group=job.parent_id)
        _event(job, user, now=now, message=message, before=True, after=still_held)
        notify.jobs_changed([job.pk])
        notify.wake_scheduler("release")
    job.refresh_from_db()
    return job


def _check_may_release(*, user, job: Job, holder: str) -> None:
    """A hold its owner (or the releaser) set is anyone's who may control the job to release;
    one a lead or an admin set on someone else's job is theirs and their peers'."""
    if holder in (job.owner.get_username(), user.get_username()) or can_edit_quotas(user, job.team):
        return
    raise PermissionDenied(HELD_ABOVE.format(job_id=job.pk, holder=holder, team=job.team.name))


# Not yet scheduled again, until the next pass.
RELEASED = {
    "held": False,
    "held_with_group": False,
    "held_by_name": "",
    "held_reason": "",
    "pending_reason_code": "",
    "pending_reason_message": "",
    "pending_histogram": {},
}


def do_requeue_job(*, user, job: Job, reason: str = "") -> Job:
    """Stop a placed job gracefully, as a drain does, to come back PENDING as a new attempt."""
    check_may_control(user=user, job=job, verb="requeue")
    if job.group_kind:
        article = "an" if job.group_kind[:1] in "aeiou" else "a"
        children = GROUP_CHILDREN.get(job.group_kind, "children")
        raise Conflict(REQUEUE_GROUP.format(job_id=job.pk, kind=f"{article} {job.group_kind}", children=children))
    name = user.get_username()
    with transaction.atomic():
        # Under the job's row lock, which a cancel's request takes too: of a cancel and a
        # requeue at once, one waits for the other and sees it (QA: both answered 200).
        locked = Job.objects.select_for_update(no_key=True).only("state", "cancel_requested_at").get(pk=job.pk)
        if locked.state not in PLACED:
            raise Conflict(REQUEUE_NOT_PLACED.format(job_id=job.pk, state=locked.state))
        if locked.cancel_requested_at is not None:
            raise Conflict(REQUEUE_CANCELLING.format(job_id=job.pk))
        stopped = do_request_stop(
            job_id=job.pk,
            reason=StopReason.REQUEUED,
            grace_s=job.grace_period_seconds,
            message=reason or f"requeued by {name}",
            actor_name=name,
        )
        if not stopped:
            _check_already_requeued(job)
    job.refresh_from_db()
    return job


def _check_already_requeued(job: Job) -> None:
    """Nothing was signalled: fine if the job is being requeued already; a 409 saying why if it
    is being stopped for another reason or is no longer placed."""
    pending = set(Task.objects.filter(job_id=job.pk, state__in=ON_NODE).values_list("stop_reason", flat=True))
    if pending == {StopReason.REQUEUED}:
        return
    if pending:
        raise Conflict(ALREADY_STOPPING.format(job_id=job.pk, reason=", ".join(sorted(pending))))
    state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
    raise Conflict(REQUEUE_NOT_PLACED.format(job_id=job.pk, state=state))
