"""Dependency edges in the store: loaded for the core's conditions (scheduling/core/conditions.py),
and the leader's sweep that ends a job whose conditions can no longer be met.

A plain job that can never run is CANCELLED; a pipeline's step is SKIPPED (docs/pipelines.md).
Either way its failure class is DEPENDENCY and its event names the dependency and how it ended.
"""

from collections import defaultdict

from django.db import transaction
from django.db.models import Case, Exists, OuterRef, Value, When

from scheduling import lifecycle, metrics, notify
from scheduling.core.conditions import Edge, Status, Verdict, evaluate, never_message
from scheduling.fencing import fenced
from scheduling.group_state import UNFINISHED, deferred_syncs, sync_group_state, sync_parent_of
from scheduling.models import FailureClass, GroupKind, Job, JobDependency, JobState
from scheduling.states import JOB_FINISHED

S = JobState
# Finished whatever its failure class: only a FAILED job may still be retried (no class yet).
FINAL_AT_ONCE = (S.SUCCEEDED, S.CANCELLED, S.EARLY_STOPPED, S.SKIPPED)
# Rounds of one sweep: a pipeline's longest chain of skips (pipeline_spec.MAX_STEPS); a longer
# chain of plain jobs goes on at the next pass.
MAX_CASCADE = 100


def ended_as(state: str, failure_class: str) -> str | None:
    """How a job ended, for its dependents; None while it may still run (a FAILED job waiting for
    the leader's verdict may be retried)."""
    if state in FINAL_AT_ONCE or state == S.FAILED and failure_class:
        return state
    return None


def edges_of(job_ids) -> dict[int, list[Edge]]:
    """job -> its edges with how their jobs ended, in one query. A group ends for its
    dependents once every child has: an array past its `max_failures` is FAILED at once, while
    the children it cancels may still be stopping (QA: an `on: any` cleanup ran beside elements
    still writing; Slurm's afterany on an array waits for every task too)."""
    busy = Exists(Job.objects.filter(UNFINISHED, parent_id=OuterRef("to_job_id")))
    rows = (
        JobDependency.objects.filter(from_job_id__in=job_ids)
        .annotate(busy=Case(When(to_job__group_kind="", then=Value(False)), default=busy))
        .values_list("from_job_id", "to_job_id", "condition", "to_job__state", "to_job__failure_class", "busy")
    )
    found: dict[int, list[Edge]] = defaultdict(list)
    for job_id, dependency, condition, state, failure_class, children_busy in rows:
        ended = None if children_busy else ended_as(state, failure_class)
        found[job_id].append(Edge(dependency, condition, ended))
    return found


def verdicts(job_ids) -> dict[int, Verdict]:
    """job -> its conditions' verdict, for each job that has edges."""
    return {job_id: evaluate(edges) for job_id, edges in edges_of(job_ids).items()}


def never_runnable() -> dict[int, Verdict]:
    """Pending jobs, not being cancelled, whose conditions can no longer be met: only those with an
    edge to a finished job are evaluated. A group's parent keeps its edges for the record (its
    children have their own) and is left out: its state follows its children's."""
    touched = (
        JobDependency.objects.filter(from_job__state=S.PENDING, from_job__cancel_requested_at__isnull=True)
        .filter(from_job__group_kind="")
        .filter(to_job__state__in=JOB_FINISHED)
        .values_list("from_job_id", flat=True)
        .distinct()
    )
    found = verdicts(list(touched))
    return {job_id: verdict for job_id, verdict in sorted(found.items()) if verdict.status == Status.NEVER}


def end_never_runnable(*, epoch: int, now) -> tuple[int, int]:
    """The leader's sweep: each pending job that can never run ends, fenced by `epoch`: a pipeline's
    step SKIPPED, any other job CANCELLED. Again while a round ended something (a skip or a cancel
    can break its own dependents' conditions: they cascade in one sweep), at most
    MAX_CASCADE rounds. Returns (cancelled, skipped)."""
    cancelled = skipped = 0
    for _ in range(MAX_CASCADE):
        ended = _end_round(epoch=epoch, now=now)
        cancelled, skipped = cancelled + ended[0], skipped + ended[1]
        if ended == (0, 0):
            break
    return cancelled, skipped


def _end_round(*, epoch: int, now) -> tuple[int, int]:
    found = never_runnable()
    broken = {edge.job_id for verdict in found.values() for edge in verdict.broken}
    rows = Job.objects.filter(pk__in=[*found, *broken]).values_list(
        "pk", "parent_id", "parent__group_kind", "step_name"
    )
    jobs = {pk: (parent, kind, step) for pk, parent, kind, step in rows}
    cancelled = skipped = 0
    for job_id, verdict in found.items():
        parent, kind, _ = jobs.get(job_id, (None, "", ""))
        is_step = kind == GroupKind.PIPELINE
        outside = tuple(edge for edge in verdict.broken if jobs.get(edge.job_id, (None,))[0] != parent)
        if is_step and outside:  # the pipeline's own dependency: none of its steps will run
            cancelled += _end_pipeline(parent, never_message(outside, noun="pipeline"), epoch=epoch, now=now)
            continue
        label = (lambda dep: _step_label(dep, jobs)) if is_step else None
        message = never_message(verdict.broken, label=label, noun="step" if is_step else "job")
        with fenced(epoch):
            moved = _end(job_id, to_state=S.SKIPPED if is_step else S.CANCELLED, message=message, now=now)
        cancelled += bool(moved) and not is_step
        skipped += bool(moved) and is_step
    return cancelled, skipped


def _step_label(job_id: int, jobs: dict) -> str:
    step = jobs.get(job_id, (None, "", ""))[2]
    return f"step {step} (job {job_id})" if step else f"dependency {job_id}"


def _end_pipeline(parent_id: int, message: str, *, epoch: int, now) -> int:
    """A pipeline whose own `depends_on` can no longer be met ends CANCELLED as a plain job or an
    array would: every step still waiting is CANCELLED with the reason (not SKIPPED: a skip is by
    the pipeline's design, and a pipeline of skips SUCCEEDED; QA: a job waiting on its success
    then ran). Its steps after the first wait on those, so none has started. Returns how many."""
    waiting = Job.objects.filter(parent_id=parent_id, state=S.PENDING).order_by("pk").values_list("pk", flat=True)
    ended = 0
    with fenced(epoch), deferred_syncs():
        for step_id in waiting:
            ended += bool(_end(step_id, to_state=S.CANCELLED, message=message, now=now))
    # The pipeline ends with the reason, as a job cancelled for a dependency does (QA: its own
    # timeline and webhook said only "2 steps: 2 cancelled").
    with fenced(epoch):
        sync_group_state(parent_id, now=now, cancelled_for=(FailureClass.DEPENDENCY, message))
    return ended


def _end(job_id: int, *, to_state: str, message: str, now) -> int:
    moved = lifecycle.transition_gang(
        job_id,
        from_state=S.PENDING,
        to_state=to_state,
        actor_name="scheduler",
        reason=FailureClass.DEPENDENCY,
        message=message,
        now=now,
        failure_class=FailureClass.DEPENDENCY,
    )
    if moved:
        Job.objects.filter(pk=job_id).update(failure_class=FailureClass.DEPENDENCY)
        sync_parent_of(Job.objects.only("parent_id").get(pk=job_id), now=now)
        # Counted once the fenced transaction commits: rolled back, it ended nothing.
        transaction.on_commit(metrics.OUTCOMES.labels(to_state.lower(), FailureClass.DEPENDENCY).inc)
        notify.jobs_changed([job_id])
    return moved
