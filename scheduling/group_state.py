"""A job group's state, derived from its children's (scheduling/groups.py has the rest of groups).

Kept apart from groups.py because the lifecycle re-derives it inside every child's transition:
this module needs only the models."""

from contextlib import contextmanager
from contextvars import ContextVar

from django.db.models import Count, OuterRef, Q, Subquery
from django.utils import timezone

from scheduling import signals
from scheduling.core.reasons import NOT_YET_SCHEDULED_MESSAGE as NOT_YET_MESSAGE
from scheduling.core.reasons import ReasonCode
from scheduling.models import FailureClass, GroupKind, Job, JobState
from scheduling.states import JOB_FINISHED, NOT_STARTED, ON_NODE
from teams.models import AuditEvent, EventKind

S = JobState
NOT_YET = ReasonCode.NOT_YET_SCHEDULED
# A job not finished for good: FAILED without a failure class awaits the leader's verdict, and
# may be retried.
UNFINISHED = ~Q(state__in=JOB_FINISHED) | Q(state=S.FAILED, failure_class="")


def child_counts(parent_ids: list[int]) -> dict[int, dict[str, int]]:
    """parent -> {state: children in it}, in one query. A child FAILED or PREEMPTED that awaits
    the leader's verdict (no failure class yet) counts as PENDING: it may well run again."""
    rows = (
        Job.objects.filter(parent_id__in=parent_ids)
        .values_list("parent_id", "state", "failure_class")
        .annotate(n=Count("*"))  # not Count("id"): counting rows lets Postgres answer from the index
        .order_by()
    )
    found: dict[int, dict[str, int]] = {}
    for parent_id, state, failure_class, n in rows:
        if state in (S.FAILED, S.PREEMPTED) and not failure_class:
            state = S.PENDING
        counts = found.setdefault(parent_id, {})
        counts[state] = counts.get(state, 0) + n
    return found


def derive_group_state(group: dict, counts: dict[str, int], *, cancel_requested: bool) -> tuple[str, str]:
    """(state, failure class) of a group from its children's states, the first rule that holds:
    1. more children FAILED than `max_failures` allows -> FAILED (the rest are cancelled);
       a sweep with no `max_failures` fails only when every trial has failed;
    2. a child on a node -> RUNNING; 3. a child waiting -> PENDING (also between a child's
       preemption and its requeue);
    4. all finished: cancelled on request, or a child CANCELLED and none SUCCEEDED -> CANCELLED;
       otherwise SUCCEEDED (failures within `max_failures`, trials stopped early, and
       children cancelled one by one do not fail the group)."""
    if group["kind"] == GroupKind.PIPELINE:
        return derive_pipeline_state(counts, cancel_requested=cancel_requested)
    failed = counts.get(S.FAILED, 0)
    limit = group["max_failures"]
    total = sum(counts.values())
    if limit is not None and failed > limit or limit is None and total and failed == total:
        return S.FAILED, FailureClass.GROUP
    if any(counts.get(state) for state in ON_NODE):
        return S.RUNNING, ""
    if any(counts.get(state) for state in (*NOT_STARTED, S.PREEMPTED)):
        return S.PENDING, ""
    if cancel_requested or counts.get(S.CANCELLED) and not counts.get(S.SUCCEEDED):
        return S.CANCELLED, FailureClass.CANCELLED
    return S.SUCCEEDED, ""


def derive_pipeline_state(counts: dict[str, int], *, cancel_requested: bool) -> tuple[str, str]:
    """(state, failure class) of a pipeline from its steps', the first rule that holds:
    1. a step on a node -> RUNNING; 2. a step waiting (or retrying) -> PENDING (a failed step does
       not end the pipeline: the steps that run on its failure still have to);
    3. all finished: cancelled on request -> CANCELLED; a step FAILED -> FAILED; a step CANCELLED
       -> CANCELLED; otherwise (every step SUCCEEDED or SKIPPED) -> SUCCEEDED. A step skips only
       because of how the steps before it ended: with none failed or cancelled, every skip was by
       design (a `when: failure` step after a success)."""
    if any(counts.get(state) for state in ON_NODE):
        return S.RUNNING, ""
    if any(counts.get(state) for state in (*NOT_STARTED, S.PREEMPTED)):
        return S.PENDING, ""
    if cancel_requested:
        return S.CANCELLED, FailureClass.CANCELLED
    if counts.get(S.FAILED):
        return S.FAILED, FailureClass.GROUP
    if counts.get(S.CANCELLED):
        return S.CANCELLED, FailureClass.CANCELLED
    return S.SUCCEEDED, ""


# Groups whose state a caller re-derives once when it is done (see `deferred_syncs`).
_deferred: ContextVar[set[int] | None] = ContextVar("deferred_group_syncs", default=None)


@contextmanager
def deferred_syncs():
    """Within it, a child's transition leaves its group's state to the caller, who derives it
    once at the end (`sync_group_state`): cancelling a 6,000-element array derived the parent
    from a count over every child once per child, O(N^2) (found by QA: 601 s)."""
    token = _deferred.set(set())
    try:
        yield
    finally:
        _deferred.reset(token)


def sync_group_state(parent_id: int, *, now, cancelled_for: tuple[str, str] | None = None) -> tuple[str, str]:
    """Re-derive a group's state from its children's; returns (before, after). Locks the parent
    row first, so two children ending at once derive in turn, each seeing the other's end.
    `cancelled_for`: (failure class, message) of a group its caller cancelled for a reason of
    its own (a pipeline's dependency), said instead of the children's tally if it ends CANCELLED."""
    deferred = _deferred.get()
    if deferred is not None:
        deferred.add(parent_id)
        return "", ""
    parent = (
        Job.objects.select_for_update(no_key=True)
        .only("state", "started_at", "group", "cancel_requested_at")
        .get(pk=parent_id)
    )
    counts = child_counts([parent_id]).get(parent_id, {})
    state, failure_class = derive_group_state(
        parent.group, counts, cancel_requested=parent.cancel_requested_at is not None
    )
    if state == parent.state:
        return parent.state, state
    message = _group_message(parent.group, counts, state)
    if cancelled_for is not None and state == S.CANCELLED:
        failure_class, message = cancelled_for
    fields = {"state": state, "updated_at": now, "failure_class": failure_class}
    if state == S.RUNNING and parent.started_at is None:
        fields["started_at"] = now
    fields["finished_at"] = now if state in JOB_FINISHED else None
    Job.objects.filter(pk=parent_id).update(**fields)
    AuditEvent.objects.create(
        job_id=parent_id,
        kind=EventKind.TRANSITION,
        actor_name="system",
        from_state=parent.state,
        to_state=state,
        reason=failure_class if cancelled_for is not None and state == S.CANCELLED else "GROUP",
        message=message,
        data={"children": counts},
        # When it is written, not the pass's start: a child's transition written meanwhile
        # would otherwise list after the group's change it caused.
        created_at=max(now, timezone.now()),
    )
    signals.group_state_changed.send(
        Job,
        job_id=parent_id,
        before=parent.state,
        after=state,
        first_start="started_at" in fields,
        message=message,
        now=now,
    )
    return parent.state, state


def sync_parent_of(job: Job, *, now) -> None:
    """After a change to a child that is not a transition of its tasks (the leader's verdict that
    a failed child is failed for good): its group's state again."""
    if job.parent_id is not None:
        sync_group_state(job.parent_id, now=now)


MEMBERS = {GroupKind.ARRAY: "element", GroupKind.SWEEP: "trial", GroupKind.PIPELINE: "step"}


def _members(kind: str, n: int) -> str:
    return f"{n} {MEMBERS[kind]}" + ("" if n == 1 else "s")


def _group_message(group: dict, counts: dict[str, int], state: str) -> str:
    tally = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()) if n)
    failed = counts.get(S.FAILED, 0)
    if state == S.FAILED and group["kind"] == GroupKind.PIPELINE:
        return f"{failed} of {_members(group['kind'], group['count'])} failed ({tally})"
    if state == S.FAILED:
        allowed = group["max_failures"]
        bound = f"more than max_failures ({allowed})" if allowed is not None else "every one"
        return f"{_members(group['kind'], failed)} failed, {bound}; the rest are cancelled ({tally})"
    return f"{_members(group['kind'], group['count'])}: {tally}"


def waiting_reasons(parent_ids: list[int]) -> dict[int, tuple[str, str]]:
    """parent -> (code, message) of why its first waiting child waits: a group's own pending reason
    (it has no tasks for the scheduler to explain). One query; children not yet explained by a pass
    say so."""
    first = Job.objects.filter(parent=OuterRef("pk"), state=S.PENDING).order_by("group_index")
    rows = (
        Job.objects.filter(pk__in=parent_ids)
        .annotate(
            child_index=Subquery(first.values("group_index")[:1]),
            child_held=Subquery(first.values("held")[:1]),
            child_code=Subquery(first.values("pending_reason_code")[:1]),
            child_message=Subquery(first.values("pending_reason_message")[:1]),
            child_step=Subquery(first.values("step_name")[:1]),
        )
        .values_list("pk", "group_kind", "child_index", "child_held", "child_code", "child_message", "child_step")
    )
    found = {}
    for parent_id, kind, index, held, code, message, step in rows:
        if index is None:
            continue
        if held:
            code, message = "HELD", "held: it will not start until it is released"
        found[parent_id] = (code or NOT_YET, f"{MEMBERS[kind]} {step or index}: {message or NOT_YET_MESSAGE}")
    return found
