"""The submit page's dry run: for a spec that passed validation (so an empty cluster could
hold it), where it would go on the cluster as it is now, or why it would wait and what change
would let it start. Reads the cluster only; nothing is written."""

from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from scheduling.cluster import load_nodes, load_running, load_teams
from scheduling.core import explain
from scheduling.core.explain import CapacityExplainer
from scheduling.core.fairshare import Ledger
from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import PendingJob
from scheduling.core.placement import plan
from scheduling.core.reasons import PendingReason
from scheduling.core.state import ClusterState
from scheduling.core.whatif import suggestions
from scheduling.inventory import inventory
from scheduling.pipeline_spec import normalized_step
from scheduling.services import job_shape


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
    """Try the normalized spec against the free room now with the scheduler's own placement;
    when it does not fit, explain it the way the job page explains a pending job. First, as a
    pass does, the team's quota: a job over its borrowing limit (or one larger than its team
    may ever hold) waits whatever room is free."""
    now = timezone.now()
    nodes, _ = load_nodes()
    running = load_running(now)
    state = ClusterState(nodes, running)
    shape = job_shape(spec)
    over = Ledger.build(load_teams(), tuple(running), state.fleet.capacity).over_limit(
        spec["team"], shape.resource_class, shape.units
    )
    if over is not None:
        job = PendingJob(0, spec["team"], spec["priority"], shape, now.timestamp(), spec["max_runtime_hours"] * 3600)
        return DryRun(shape.describe(), reason=explain.quota(job, over))
    placement = plan(state, shape)
    if placement is not None:
        return DryRun(shape.describe(), tuple(sorted((slot.name, count) for slot, count in placement)))
    reason = CapacityExplainer(state, tuple(nodes)).explain_shape(shape)
    return DryRun(shape.describe(), reason=reason, suggestions=tuple(suggestions(state, shape, settings.MLQ_GPU_TYPES)))


NEVER_FITS = "NEVER_FITS"  # the dry run's code for a spec no empty cluster could hold


def dry_run_answer(spec: dict) -> dict:
    """The API's dry run of a spec that passed check_job_spec: whether an empty cluster could
    ever hold it (a submit would be a 400 if not), and if so the dry run against the cluster now.
    A pipeline is its steps' (its parent runs nothing): each one's answer under `steps`, and at
    the top the first step that could never run, else the first step's."""
    if spec.get("pipeline") is not None:
        return _pipeline_answer(spec)
    return _job_answer(spec)


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
