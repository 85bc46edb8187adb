"""The submit page's dry run: for a spec that passed validation (so an empty cluster could
hold it), where it would go on the cluster as it is now, or why it would wait and what change
would let it start. Reads the cluster only; nothing is written."""

import dataclasses
from collections import Counter
from dataclasses import dataclass

from django.utils import timezone

from mlqueue.errors import Conflict
from scheduling import groups, services, sweep_params
from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import PendingJob
from scheduling.core.reasons import PendingReason, ReasonCode
from scheduling.core.scheduler import schedule
from scheduling.core.state import ClusterState
from scheduling.core.whatif import suggestions
from scheduling.inventory import inventory
from scheduling.models import GroupKind
from scheduling.pipeline_spec import normalized_step
from scheduling.services import job_shape
from scheduling.spec import gpu_types
from scheduling.store_view import build_view
from scheduling.web.explanations import NOT_ROOM


@dataclass(frozen=True)
class DryRun:
    shape: str  # what it asks for, e.g. "8 x 8 H100"
    placement: tuple[tuple[str, int], ...] = ()  # (node, tasks) if it fits the free room now
    reason: PendingReason | None = None  # why it would wait, if it does not
    suggestions: tuple[str, ...] = ()

    @property
    def fits_now(self) -> bool:
        return bool(self.placement)


def dry_run(spec: dict) -> DryRun:
    """A pass of the scheduler's own core over the cluster as it is now (its nodes, running
    jobs, waiting jobs, quotas, maintenance windows and policy), with this job added to the
    queue as if submitted now: where it would start, or the reason a pass would give it: its
    team's quota, jobs ahead of it that take the room or hold a reservation on it, the jobs it
    would preempt (a P0 starts by preemption on a full cluster), or the capacity story with
    what change would fit. The waiting jobs are the leader's view of them (single jobs and each
    group's head), so the answer is the next pass's, as far as nothing changes before it."""
    now = timezone.now()
    view = build_view(now=now)
    nodes, running = view.snapshot.nodes, view.snapshot.running
    shape = job_shape(spec)
    job = PendingJob(
        DRY_RUN_ID,
        spec["team"],
        spec["priority"],
        shape,
        now.timestamp(),
        spec["max_runtime_hours"] * 3600,
        checkpointing=spec.get("checkpoint") is not None,
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
    state = ClusterState(nodes, running)
    return DryRun(shape.describe(), reason=reason, suggestions=tuple(suggestions(state, shape, gpu_types())))


# No job has it: the pass's decisions for the spec are found by it. Above every real id, so
# among equal waiting jobs it comes last, as the newest submit does.
DRY_RUN_ID = 2**62
WOULD_PREEMPT = "would preempt job(s) {ids} ({why}) and start once they have stopped"


NEVER_FITS = "NEVER_FITS"  # the dry run's code for a spec no empty cluster could hold


def dry_run_answer(spec: dict) -> dict:
    """The API's dry run of a spec that passed check_job_spec: whether an empty cluster could
    ever hold it (a submit would be a 400 if not), and if so the dry run against the cluster now.
    A pipeline is its steps' (its parent runs nothing): each one's answer under `steps`, and at
    the top the first step that could never run, else the first step's."""
    if spec.get("pipeline") is not None:
        return _pipeline_answer(spec)
    if spec.get("array") is not None or spec.get("sweep") is not None:
        return {**_job_answer(spec), "group": _group_answer(spec)}
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


def _group_answer(spec: dict) -> dict:
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
    answers = []
    for index, step in enumerate(spec["pipeline"]["steps"]):
        answer = _job_answer(normalized_step(spec, step))
        if answer["reason"] and "field" in answer["reason"]:
            answer["reason"]["field"] = f"pipeline.steps[{index}].{answer['reason']['field']}"
        answers.append({"step": step["name"], **answer})
    first = next((a for a in answers if not a["can_ever_run"]), answers[0])
    return {**{key: value for key, value in first.items() if key != "step"}, "steps": answers}


def _job_answer(spec: dict) -> dict:
    shape = job_shape(spec)
    verdict = can_ever_run(shape, inventory())
    if not verdict.ok:
        reason = {"code": NEVER_FITS, "message": verdict.message, "field": verdict.field}
        return _answer(shape.describe(), can_ever_run=False, placement=None, reason=reason, suggestions=())
    found = dry_run(spec)
    placement = {"nodes": [{"node": name, "tasks": count} for name, count in found.placement]}
    reason = found.reason and {
        "code": found.reason.code,
        "category": found.reason.category,
        "message": found.reason.message,
    }
    return _answer(
        found.shape,
        can_ever_run=True,
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
