"""The task lifecycle, declared once.

Every transition is one conditional UPDATE on the expected state (and, from the scheduler,
on its epoch still being current). Zero rows means another actor got there first: the
caller re-reads. A job's state is never written by hand: it is derived from its tasks in the
same transaction. A gang's tasks move together or not at all.
"""

from collections.abc import Iterable, Mapping

from django.db import transaction
from django.db.models import Case, Count, Exists, F, OuterRef, Value, When
from django.utils import timezone

from scheduling import ledger, signals
from scheduling.group_state import sync_group_state
from scheduling.models import FailureClass, Job, SchedulerLease, StartForecast, Task, TaskState
from scheduling.states import ENDED, JOB_FINISHED, ON_NODE
from teams.models import AuditEvent, EventKind

S = TaskState
TRANSITIONS: Mapping[str, frozenset[str]] = {
    # SKIPPED: a pipeline step whose condition can no longer be met.
    S.PENDING: frozenset({S.ASSIGNED, S.CANCELLED, S.FAILED, S.EARLY_STOPPED, S.SKIPPED}),
    # An agent may report a short task's exit before it reported the start.
    S.ASSIGNED: frozenset({S.RUNNING, S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED, S.PENDING, S.EARLY_STOPPED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.CANCELLED, S.EARLY_STOPPED}),
    # Only the scheduler requeues: a retry or a restart is a new attempt from PENDING.
    S.FAILED: frozenset({S.PENDING, S.CANCELLED, S.EARLY_STOPPED}),
    S.PREEMPTED: frozenset({S.PENDING, S.CANCELLED, S.FAILED, S.EARLY_STOPPED}),  # FAILED: no restart allowed
    # A rank that finished while another rank of its gang failed restarts with the gang.
    S.SUCCEEDED: frozenset({S.PENDING}),
    S.CANCELLED: frozenset(),
    S.EARLY_STOPPED: frozenset(),
    S.SKIPPED: frozenset(),
}


class IllegalTransition(ValueError):
    def __init__(self, from_state: str, to_state: str):
        allowed = ", ".join(sorted(TRANSITIONS.get(from_state, ()))) or "nothing"
        super().__init__(f"a task cannot go from {from_state} to {to_state} (from {from_state}: {allowed})")


def check_transition(from_state: str, to_state: str) -> None:
    if to_state not in TRANSITIONS.get(from_state, ()):
        raise IllegalTransition(from_state, to_state)


def derive_job_state(states: Iterable[str]) -> str:
    """A job's state from its tasks':
    1. any task RUNNING -> RUNNING; 2. any ASSIGNED -> ASSIGNED; 3. any PENDING -> PENDING;
    4. all SUCCEEDED -> SUCCEEDED; 5. any SKIPPED -> SKIPPED (a step skips all its tasks at once);
    6. any EARLY_STOPPED -> EARLY_STOPPED; 7. any CANCELLED -> CANCELLED; 8. any FAILED -> FAILED;
    9. otherwise PREEMPTED (between a preemption and its requeue)."""
    present = set(states)
    for state in (S.RUNNING, S.ASSIGNED, S.PENDING):
        if state in present:
            return state
    if present == {S.SUCCEEDED}:
        return S.SUCCEEDED
    for state in (S.SKIPPED, S.EARLY_STOPPED, S.CANCELLED, S.FAILED):
        if state in present:
            return state
    return S.PREEMPTED


def epoch_is_current(epoch: int):
    """A filter clause that holds only while `epoch` is the lease's: the store fences a
    deposed leader's writes."""
    return Exists(SchedulerLease.objects.filter(pk=1, epoch=epoch))


NO_STOP = {"stop_reason": "", "stop_signal": "", "stop_requested_at": None, "kill_at": None, "preempted_for": None}
# A new attempt has confirmed no checkpoint yet (the last attempt's lost work is recorded
# before its requeue: reconcile.do_settle).
NO_CHECKPOINT = {"last_checkpoint_at": None, "checkpoint_step": None}


def _stamp_fields(to_state: str, now) -> dict:
    stamps = {"updated_at": now}
    if to_state == S.ASSIGNED:
        stamps.update(
            assigned_at=now,
            attempt=F("attempt") + 1,
            finished_at=None,
            exit_code=None,
            exit_signal="",
            exit_cause="",
            failure_class="",
            **NO_STOP,
            **NO_CHECKPOINT,
        )
    elif to_state == S.RUNNING:
        stamps["started_at"] = now
    elif to_state in ENDED:
        stamps.update(finished_at=now, kill_at=None)
    elif to_state == S.PENDING:
        # `preempted_for` stays until the next start: the requeued job yields to its preemptor.
        stamps.update(
            node=None,
            gpu_indices=[],
            assigned_at=None,
            started_at=None,
            **NO_CHECKPOINT,
            **{**NO_STOP, "preempted_for": F("preempted_for")},
        )
    return stamps


def _states(from_state: str | tuple[str, ...]) -> tuple[str, ...]:
    return (from_state,) if isinstance(from_state, str) else tuple(from_state)


def _states_now(job_id: int, from_state: str | tuple[str, ...]) -> str:
    """What a gang's event names as where it came from: the state, or of several allowed, those
    its tasks are in (it read "FAILED/PREEMPTED/SUCCEEDED" for a job that had only failed)."""
    if isinstance(from_state, str):
        return from_state
    found = set(Task.objects.filter(job_id=job_id, state__in=from_state).values_list("state", flat=True))
    return "/".join(state for state in from_state if state in found) or "/".join(from_state)


def _conditional_update(*, task_filter: dict, from_state, to_state: str, epoch, fields: dict, now) -> int:
    rows = Task.objects.filter(state__in=_states(from_state), **task_filter)
    if epoch is not None:
        rows = rows.filter(epoch_is_current(epoch))
    return rows.update(state=to_state, **_stamp_fields(to_state, now), **fields)


def sync_job_state(job_id: int, *, now=None, reason: str = "", message: str = "") -> tuple[str, str]:
    """Re-derive the job's state from its tasks; returns (before, after). A change is signalled
    (scheduling/signals.py) with the transition's `reason` and `message`."""
    now = now or timezone.now()
    job = Job.objects.only("state", "started_at", "parent_id").get(pk=job_id)
    after = derive_job_state(Task.objects.filter(job_id=job_id).values_list("state", flat=True))
    if after != job.state:
        fields = {"state": after, "updated_at": now}
        if after == S.RUNNING and job.started_at is None:
            fields["started_at"] = now
            # Its forecasts' outcome, kept with them (scheduling/forecast_accuracy.py).
            StartForecast.objects.filter(job_id=job_id, started_at__isnull=True).update(started_at=now)
        if after in JOB_FINISHED:
            fields["finished_at"] = now
        if after in ON_NODE or after in JOB_FINISHED:
            fields.update(pending_reason_code="", pending_reason_message="", pending_histogram={})
        if after == S.EARLY_STOPPED:
            # No verdict is due (a trial stopped by its sweep's rule is never retried): its
            # class is known now, and the job's page and API show it with its state.
            fields["failure_class"] = FailureClass.EARLY_STOPPED
        Job.objects.filter(pk=job_id).update(**fields)
        ledger.on_job_state(job_id, before=job.state, after=after, now=now)
        signals.job_state_changed.send(
            Job, job_id=job_id, before=job.state, after=after, reason=reason, message=message, now=now
        )
        if job.parent_id is not None:
            sync_group_state(job.parent_id, now=now)
    return job.state, after


def cancel_request_event(job_id: int, *, actor, actor_name: str, why: str, now) -> AuditEvent:
    """A cancel request's entry on the job's timeline (not yet saved): one cancel or many."""
    return AuditEvent(
        job_id=job_id,
        kind=EventKind.CANCEL_REQUESTED,
        actor=actor,
        actor_name=actor_name,
        reason="CANCELLED",
        message=why,
        created_at=now,
    )


def cancel_unplaced(job_ids: list[int], *, actor, actor_name: str, why: str, now) -> list[int]:
    """Cancel, in the caller's transaction, those of `job_ids` that are PENDING with every task
    PENDING (never placed this attempt) and no cancel requested yet, stamping the request, as
    `cancelling.do_cancel` would one by one: locked in id
    order, tasks CANCELLED, the job CANCELLED, one TRANSITION event each, the state change
    signalled. A few statements for the lot, where each job alone took a transaction of a dozen
    (a group's cancel: found by QA). Returns the ids it cancelled; the others are the caller's."""
    check_transition(S.PENDING, S.CANCELLED)
    placed = Task.objects.filter(job=OuterRef("pk")).exclude(state=S.PENDING)
    parents = dict(
        Job.objects.select_for_update(no_key=True)
        .filter(pk__in=job_ids, state=S.PENDING, cancel_requested_at__isnull=True)
        .exclude(Exists(placed))
        .order_by("pk")
        .values_list("pk", "parent_id")
    )
    ids = list(parents)
    if not ids:
        return []
    Task.objects.filter(job_id__in=ids, state=S.PENDING).update(
        state=S.CANCELLED, failure_class=FailureClass.CANCELLED, **_stamp_fields(S.CANCELLED, now)
    )
    cleared = {"pending_reason_code": "", "pending_reason_message": "", "pending_histogram": {}}
    Job.objects.filter(pk__in=ids).update(
        state=S.CANCELLED, cancel_requested_at=now, updated_at=now, finished_at=now, **cleared
    )
    tasks = dict(Task.objects.filter(job_id__in=ids).values("job_id").annotate(n=Count("*")).values_list("job_id", "n"))
    AuditEvent.objects.bulk_create(
        cancel_request_event(job_id, actor=actor, actor_name=actor_name, why=why, now=now) for job_id in ids
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(
            job_id=job_id,
            kind=EventKind.TRANSITION,
            actor=actor,
            actor_name=actor_name,
            from_state=S.PENDING,
            to_state=S.CANCELLED,
            reason="CANCELLED",
            message=why,
            data={"tasks": tasks.get(job_id, 0)},
            created_at=now,
        )
        for job_id in ids
    )
    for job_id in ids:  # the parent named: a group's child is told as its group, with no read of its row
        signals.job_state_changed.send(
            Job,
            job_id=job_id,
            before=S.PENDING,
            after=S.CANCELLED,
            reason="CANCELLED",
            message=why,
            now=now,
            parent_id=parents[job_id] or 0,
        )
    return ids


def _lock_job(job_id: int) -> bool:
    """Returns whether the job is held (False if it is gone), read under the lock."""
    # Serializes transitions of one job's tasks, so the derived job state is never stale. No key
    # update: rows that point at the job (events, logs, a schedule's fire) may still be written,
    # or their foreign-key checks would wait on it at commit (and deadlock with a transaction
    # that holds a row this one's own checks need).
    return any(Job.objects.select_for_update(no_key=True).filter(pk=job_id).values_list("held", flat=True))


def _record(*, job_id, rank, from_state, to_state, actor, actor_name, reason, message, data, now) -> None:
    AuditEvent.objects.create(
        job_id=job_id,
        kind=EventKind.TRANSITION,
        actor=actor,
        actor_name=actor_name,
        from_state=from_state,
        to_state=to_state,
        reason=reason,
        message=message,
        data={"rank": rank, **data} if rank is not None else data,
        created_at=now,
    )


def transition_task(
    task: Task,
    *,
    to_state: str,
    from_state: str | None = None,
    epoch: int | None = None,
    attempt: int | None = None,
    actor=None,
    actor_name: str = "system",
    reason: str = "",
    message: str = "",
    now=None,
    **fields,
) -> bool:
    """Move one task from `from_state` (default: the state it was read in), and only while it
    is still `attempt` when given. False when zero rows matched: another actor moved it first,
    a newer attempt replaced it, or `epoch` is no longer the lease's."""
    from_state = from_state or task.state
    check_transition(from_state, to_state)
    now = now or timezone.now()
    match = {"pk": task.pk} if attempt is None else {"pk": task.pk, "attempt": attempt}
    with transaction.atomic():
        _lock_job(task.job_id)
        moved = _conditional_update(
            task_filter=match, from_state=from_state, to_state=to_state, epoch=epoch, fields=fields, now=now
        )
        if not moved:
            return False
        _record(
            job_id=task.job_id,
            rank=task.rank,
            from_state=from_state,
            to_state=to_state,
            actor=actor,
            actor_name=actor_name,
            reason=reason,
            message=message,
            data={},
            now=now,
        )
        sync_job_state(task.job_id, now=now, reason=reason, message=message)
    return True


def _with_last_node(fields: dict) -> dict:
    """A rank placed on a node also remembers it as `last_node`, which a requeue keeps."""
    node = fields.get("node", fields.get("node_id"))
    return fields if node is None else {**fields, "last_node_id": getattr(node, "pk", node)}


def _set_per_rank(job_id: int, per_rank: Mapping[int, dict]) -> None:
    """Each rank's own fields (node, GPUs) in one UPDATE, on rows this transaction holds."""
    per_rank = {rank: _with_last_node(fields) for rank, fields in per_rank.items()}
    names = sorted({name for fields in per_rank.values() for name in fields})
    for name in names:
        field = Task._meta.get_field(name)
        stored_as = field.target_field if field.is_relation else field
        whens = [
            When(rank=rank, then=Value(getattr(fields[name], "pk", fields[name]), output_field=stored_as))
            for rank, fields in per_rank.items()
            if name in fields
        ]
        Task.objects.filter(job_id=job_id, rank__in=list(per_rank)).update(
            **{field.attname: Case(*whens, default=F(field.attname), output_field=stored_as)}
        )


class GangMoved(Exception):
    """Raised inside the transaction to undo a partial gang move."""


def transition_gang(
    job_id: int,
    *,
    from_state: str | tuple[str, ...],
    to_state: str,
    epoch: int | None = None,
    per_rank: Mapping[int, dict] | None = None,
    require_all: bool = True,
    unless_held: bool = False,
    actor=None,
    actor_name: str = "system",
    reason: str = "",
    message: str = "",
    data: dict | None = None,
    now=None,
    **fields,
) -> int:
    """Move the tasks of a job that are in `from_state` (one state or several) to `to_state`,
    recording one event. With `require_all` (a gang), every task must move or none does.
    `per_rank` gives each rank its own fields (its node and GPUs). `unless_held`: nothing moves
    if the job is held (a placement: a hold can land between a pass's snapshot and its apply
    step). Returns how many moved: 0 when a task was not in `from_state` (with `require_all`),
    the job was held (with `unless_held`) or the epoch is stale; then nothing changed."""
    for state in _states(from_state):
        check_transition(state, to_state)
    now = now or timezone.now()
    try:
        with transaction.atomic():
            if _lock_job(job_id) and unless_held:
                raise GangMoved
            total = Task.objects.filter(job_id=job_id).count()
            before = _states_now(job_id, from_state)
            moved = _conditional_update(
                task_filter={"job_id": job_id},
                from_state=from_state,
                to_state=to_state,
                epoch=epoch,
                fields=fields,
                now=now,
            )
            if require_all and moved != total or not moved:
                raise GangMoved
            if per_rank:
                _set_per_rank(job_id, per_rank)
            _record(
                job_id=job_id,
                rank=None,
                from_state=before,
                to_state=to_state,
                actor=actor,
                actor_name=actor_name,
                reason=reason,
                message=message,
                data={"tasks": moved, **(data or {})},
                now=now,
            )
            sync_job_state(job_id, now=now, reason=reason, message=message)
    except GangMoved:
        return 0
    return moved
