"""The submit page's dry run: for a spec that passed validation (so an empty cluster could
hold it), where it would go on the cluster as it is now, or why it would wait and what change
would let it start. Reads the cluster only; nothing is written."""

import dataclasses
from collections import Counter
from dataclasses import dataclass

from django.db.models import Case, Exists, OuterRef, Value, When
from django.utils import timezone

from mlqueue.errors import Conflict
from scheduling import groups, services, sweep_params
from scheduling.core.conditions import Condition, Edge, Status, Verdict, evaluate, never_message
from scheduling.core.fairshare import in_flight_ledger
from scheduling.core.feasibility import can_ever_run
from scheduling.core.maintenance import Windows
from scheduling.core.model import PendingJob
from scheduling.core.reasons import PendingReason, ReasonCode
from scheduling.core.scheduler import schedule
from scheduling.core.state import ClusterState
from scheduling.dependencies import ended_as
from scheduling.group_state import UNFINISHED
from scheduling.inventory import inventory
from scheduling.models import GroupKind, Job
from scheduling.pipeline_spec import normalized_step
from scheduling.services import job_shape
from scheduling.spec import dependency_edges
from scheduling.store_view import build_view
from scheduling.web.explanations import NOT_ROOM, reshapes


@dataclass(frozen=True)
class DryRun:
    shape: str  # what it asks for, e.g. "8 x 8 H100"
    placement: tuple[tuple[str, int], ...] = ()  # (node, tasks) if it fits the free room now
    reason: PendingReason | None = None  # why it would wait, if it does not
    suggestions: tuple[str, ...] = ()
    # Its `depends_on` can no longer be met (the reason says which and how it ended): a submit
    # is cancelled at once, as the leader's sweep ends such a job.
    never_runs: bool = False

    @property
    def fits_now(self) -> bool:
        return bool(self.placement)


def dry_run(spec: dict, *, noun: str = "job") -> DryRun:
    """A pass of the scheduler's own core over the cluster as it is now (its nodes, running
    jobs, waiting jobs, quotas, maintenance windows and policy), with this job added to the
    queue as if submitted now: where it would start, or the reason a pass would give it: its
    team's quota, jobs ahead of it that take the room or hold a reservation on it, the jobs it
    would preempt (a P0 starts by preemption on a full cluster), or the capacity story with
    what change would fit. The waiting jobs are the leader's view of them (single jobs and each
    group's head), so the answer is the next pass's, as far as nothing changes before it. Its
    `depends_on` as the pass sees it too: a dependency still to end is the pass's DEPENDENCY
    wait; one that ended the wrong way means it never runs (`noun`: what the sentence calls it)."""
    shape = job_shape(spec)
    verdict = dependency_verdict(spec.get("depends_on") or [])
    if verdict.status == Status.NEVER:
        message = NEVER_MET.format(why=never_message(verdict.broken, noun=noun))
        return DryRun(shape.describe(), reason=PendingReason(ReasonCode.DEPENDENCY, message), never_runs=True)
    now = timezone.now()
    view = build_view(now=now)
    nodes, running = view.snapshot.nodes, view.snapshot.running
    job = PendingJob(
        DRY_RUN_ID,
        spec["team"],
        spec["priority"],
        shape,
        now.timestamp(),
        spec["max_runtime_hours"] * 3600,
        waiting_on=tuple(edge.job_id for edge in verdict.waiting),
        checkpointing=spec.get("checkpoint") is not None,
        waiting_conditions=tuple(edge.condition for edge in verdict.waiting),
        queued_at=now.timestamp(),
    )
    snapshot = dataclasses.replace(view.snapshot, pending=(*view.snapshot.pending, job))
    decisions = schedule(snapshot)
    placed = next((p for p in decisions.placements if p.job_id == DRY_RUN_ID), None)
    if placed is not None:
        return DryRun(shape.describe(), tuple(sorted(Counter(task.node for task in placed.tasks).items())))
    victims = sorted(p.victim_job_id for p in decisions.preemptions if p.for_job_id == DRY_RUN_ID)
    if victims:
        why = {p.message.partition(": ")[2] for p in decisions.preemptions if p.for_job_id == DRY_RUN_ID}
        message = WOULD_PREEMPT.format(ids=", ".join(map(str, victims)), why="; ".join(sorted(why)))
        return DryRun(shape.describe(), reason=PendingReason(ReasonCode.PREEMPTING, message))
    reason = decisions.pending.get(DRY_RUN_ID)
    if reason is not None and reason.code in NOT_ROOM:
        return DryRun(shape.describe(), reason=reason)  # what frees room does not help it
    state, at = ClusterState(nodes, running), now.timestamp()
    windows = Windows(snapshot.maintenance, at)
    waiting = {other.job_id: (other.team, other.shape.resource_class, other.shape.units) for other in snapshot.pending}
    ledger = in_flight_ledger(snapshot.teams, tuple(running), state.fleet.capacity, waiting)
    found = reshapes(state, shape, windows, now=at, end_at=at + job.max_runtime_s, team=job.team, ledger=ledger)
    return DryRun(shape.describe(), reason=reason, suggestions=tuple(found))


# No job has it: the pass's decisions for the spec are found by it. Above every real id, so
# among equal waiting jobs it comes last, as the newest submit does.
DRY_RUN_ID = 2**62
WOULD_PREEMPT = "would preempt job(s) {ids} ({why}) and start once they have stopped"
NEVER_MET = "{why}: a submit would be cancelled at once"


def dependency_verdict(depends_on: list) -> Verdict:
    """The verdict on a spec's `depends_on` (core/conditions.py) as the jobs it names stand now,
    read as dependencies.edges_of reads a waiting job's: a group ends for its dependents once
    every child has."""
    edges = dependency_edges(depends_on)
    if not edges:
        return Verdict(Status.MET)
    busy = Exists(Job.objects.filter(UNFINISHED, parent_id=OuterRef("pk")))
    rows = (
        Job.objects.filter(pk__in=[job_id for job_id, _ in edges])
        .annotate(busy=Case(When(group_kind="", then=Value(False)), default=busy))
        .values_list("pk", "state", "failure_class", "busy")
    )
    ended = {pk: None if children_busy else ended_as(state, failure) for pk, state, failure, children_busy in rows}
    return evaluate([Edge(job_id, Condition(on), ended.get(job_id)) for job_id, on in edges])


NEVER_FITS = "NEVER_FITS"  # the dry run's code for a spec no empty cluster could hold


def dry_run_answer(spec: dict) -> dict:
    """The API's dry run of a spec that passed check_job_spec: whether an empty cluster could
    ever hold it (a submit would be a 400 if not), and if so the dry run against the cluster now.
    A pipeline is its steps' (its parent runs nothing): each one's answer under `steps`, and at
    the top the first step that could never run, else the first step's."""
    if spec.get("pipeline") is not None:
        return _pipeline_answer(spec)
    if spec.get("array") is not None or spec.get("sweep") is not None:
        return {**_job_answer(spec), "group": group_answer(spec)}
    return _job_answer(spec)


SAME_SPEC = (
    "team {team} already has job {job_id} ({state}) with client_job_id {client_job_id!r} and this spec: "
    "a submit answers with that job."
)


def resubmit_answer(*, team, spec: dict) -> dict:
    """What a submit would answer where the spec's client_job_id names a job already: `existing`,
    `{status: 200, job_id, message}` for the same spec (nothing new is made), `{status: 409,
    message}` with the submit's refusal for another spec; {} for an id no job has."""
    try:
        job = services.check_resubmit(team=team, spec=spec)
    except Conflict as refused:
        return {"existing": {"status": 409, "message": str(refused.detail)}}
    if job is None:
        return {}
    message = SAME_SPEC.format(team=team.name, job_id=job.pk, state=job.state, client_job_id=job.client_job_id)
    return {"existing": {"status": 200, "job_id": job.pk, "message": message}}


TRIALS_SHOWN = 20


def group_answer(spec: dict) -> dict:
    """An array's or a sweep's settings as a submit would keep them; the placement and reason
    beside it are one child's (each asks the same). A sweep's first TRIALS_SHOWN trials as its
    seed draws them, the seed drawn now when the spec gives none: submitted with that seed, the
    sweep runs these trials (QA: a dry run of a random sweep showed no trial to check)."""
    settings = groups.group_settings(spec)
    answer = {key: settings[key] for key in ("kind", "count", "parallelism", "max_failures")}
    if settings["kind"] == GroupKind.ARRAY:  # the indices as given, else 0 to count - 1
        last = settings["count"] - 1
        return {**answer, "indices": settings["indices"] or (f"0-{last}" if last else "0")}
    drawn = sweep_params.trials(spec["sweep"], seed=settings["seed"])
    return {
        **answer,
        "method": settings["method"],
        "seed": settings["seed"],
        "seed_drawn": spec["sweep"]["seed"] is None,
        "trials": [{"trial": trial, "params": params} for trial, params in enumerate(drawn[:TRIALS_SHOWN])],
    }


def _pipeline_answer(spec: dict) -> dict:
    """Each step as if it were next: after the steps before it, and after the pipeline's own
    `depends_on` (its first steps wait on it, the others on them)."""
    answers = []
    for index, step in enumerate(spec["pipeline"]["steps"]):
        answer = _job_answer({**normalized_step(spec, step), "depends_on": spec["depends_on"]}, noun="pipeline")
        if answer["reason"] and answer["reason"].get("field", "depends_on") != "depends_on":  # the pipeline's own
            answer["reason"]["field"] = f"pipeline.steps[{index}].{answer['reason']['field']}"
        answers.append({"step": step["name"], **answer})
    first = next((a for a in answers if not a["can_ever_run"]), answers[0])
    return {**{key: value for key, value in first.items() if key != "step"}, "steps": answers}


def _job_answer(spec: dict, *, noun: str = "job") -> dict:
    shape = job_shape(spec)
    verdict = can_ever_run(shape, inventory())
    if not verdict.ok:
        reason = {"code": NEVER_FITS, "message": verdict.message, "field": verdict.field}
        return _answer(shape.describe(), can_ever_run=False, placement=None, reason=reason, suggestions=())
    found = dry_run(spec, noun=noun)
    placement = {"nodes": [{"node": name, "tasks": count} for name, count in found.placement]}
    reason = found.reason and {
        "code": found.reason.code,
        "category": found.reason.category,
        "message": found.reason.message,
        **({"field": "depends_on"} if found.never_runs else {}),
    }
    return _answer(
        found.shape,
        can_ever_run=not found.never_runs,
        placement=placement if found.fits_now else None,
        reason=reason,
        suggestions=found.suggestions,
    )


def _answer(shape: str, *, can_ever_run: bool, placement, reason, suggestions) -> dict:
    return {
        "valid": True,
        "can_ever_run": can_ever_run,
        "shape": shape,
        "placement": placement,
        "reason": reason,
        "suggestions": list(suggestions),
    }
