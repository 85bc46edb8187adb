"""Applying a pass's decisions to the store, every write fenced by the leader's epoch.

Each placement is its own short transaction (a gang moves whole or not at all); preemptions
signal victims; reasons and reservations are written only where they changed."""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Q

from scheduling import lifecycle, notify
from scheduling.assignments import MasterPorts
from scheduling.core import explain
from scheduling.core.decisions import Decisions, Placement, Preemption
from scheduling.core.model import PendingJob
from scheduling.core.reasons import PendingReason, ReasonCode
from scheduling.fencing import fenced
from scheduling.leader import failpoints
from scheduling.models import Job, JobState, StopReason, TaskState
from scheduling.stopping import do_request_stop
from scheduling.store_view import StoreView
from scheduling.task_slots import Slots
from teams.models import AuditEvent, EventKind

REASON_BATCH = 500
SHARED_BATCH = 5000  # ids in one UPDATE of a reason many jobs share
REASON_FIELDS = [
    "pending_reason_code",
    "pending_reason_message",
    "reserved_nodes",
    "nominated_nodes",
    "pending_histogram",
]


@dataclass
class Applied:
    """What committed: the jobs placed and the victims signalled (the metrics count these,
    not the decisions, some of which lose their race with an agent or a user)."""

    placed_jobs: list[int] = field(default_factory=list)
    lost_races: int = 0
    preempted_jobs: list[int] = field(default_factory=list)
    reasons_written: int = 0

    @property
    def placed(self) -> int:
        return len(self.placed_jobs)

    @property
    def preempted(self) -> int:
        return len(self.preempted_jobs)


def apply_decisions(decisions: Decisions, view: StoreView, *, epoch: int, now) -> Applied:
    applied = Applied()
    slots = Slots() if decisions.placements else None
    ports = MasterPorts(_masters(decisions, view))
    submitted = {job.job_id: job.submitted_at for job in view.snapshot.pending} if decisions.placements else {}
    for placement in decisions.placements:
        # Never before its submit: a submit that takes its time after the pass took `now` and
        # commits before the store is read is in the snapshot (a negative queue wait, a
        # placement listed before the submit on the timeline; found by QA).
        at = max(now, datetime.fromtimestamp(submitted.get(placement.job_id, 0), UTC))
        if _place(placement, view, slots, ports, epoch=epoch, now=at):
            applied.placed_jobs.append(placement.job_id)
        else:
            applied.lost_races += 1
    for preemption in decisions.preemptions:
        if _preempt(preemption, epoch=epoch, now=now):
            applied.preempted_jobs.append(preemption.victim_job_id)
    failpoints.hit("apply.before_reasons")
    applied.reasons_written = _write_reasons(decisions, view, epoch=epoch, now=now)
    applied.reasons_written += _write_left_out_reasons(decisions, view, epoch=epoch, now=now)
    return applied


def _masters(decisions: Decisions, view: StoreView) -> dict[int, int]:
    """Each placed job -> the node its rank 0 (MASTER_ADDR) goes to."""
    return {
        placement.job_id: view.node_ids[task.node]
        for placement in decisions.placements
        for task in placement.tasks
        if task.rank == 0
    }


def _place(placement: Placement, view: StoreView, slots: Slots, ports: MasterPorts, *, epoch: int, now) -> bool:
    per_rank = {
        t.rank: {"node_id": view.node_ids[t.node], "gpu_indices": list(t.gpu_indices), "epoch": epoch}
        for t in placement.tasks
    }
    nodes = ", ".join(placement.nodes)
    with fenced(epoch):
        moved = lifecycle.transition_gang(
            placement.job_id,
            from_state=TaskState.PENDING,
            to_state=TaskState.ASSIGNED,
            epoch=epoch,
            per_rank=per_rank,
            unless_held=True,  # QA: a hold answered 200 between the pass's snapshot and here, and the job ran
            actor_name="scheduler",
            reason="PLACED",
            message=f"placed on {nodes}" + (" (borrowing idle capacity)" if placement.borrowed else ""),
            data={"nodes": list(placement.nodes), "borrowed": placement.borrowed, "epoch": epoch},
            now=now,
        )
        failpoints.hit("apply.inside_place")
        if moved:
            Job.objects.filter(pk=placement.job_id).update(
                run_slot=slots.slot_for(placement.job_id),
                master_port=ports.port_for(placement.job_id, per_rank[0]["node_id"]),
                borrowed=placement.borrowed,
                reserved_nodes=[],
                nominated_nodes=[],
                pending_histogram={},
                estimated_start=None,
                likely_start=None,
                not_before=None,
            )
            notify.jobs_changed([placement.job_id])
            notify.wake_agents(placement.nodes, "assignment")
    failpoints.hit("apply.after_place")
    return bool(moved)


def _preempt(preemption: Preemption, *, epoch: int, now) -> bool:
    grace = Job.objects.filter(pk=preemption.victim_job_id).values_list("grace_period_seconds", flat=True).first()
    if grace is None:
        return False
    with fenced(epoch):
        stopped = do_request_stop(
            job_id=preemption.victim_job_id,
            reason=StopReason.PREEMPTED,
            grace_s=grace,
            message=preemption.message,
            now=now,
            preempted_for=preemption.for_job_id,
            preemption=preemption.reason,
        )
        failpoints.hit("apply.inside_preempt")
        if stopped:
            AuditEvent.objects.create(
                job_id=preemption.for_job_id,
                kind=EventKind.STOP_REQUESTED,
                actor_name="scheduler",
                reason=preemption.reason,
                message=f"preempting job {preemption.victim_job_id} to make room",
                data={"victim": preemption.victim_job_id},
                created_at=now,
            )
    return bool(stopped)


def stored_histogram(reason: PendingReason) -> dict:
    """The reason's node histogram and fit count as `Job.pending_histogram` holds them ({}
    for a reason that is not about room on the nodes)."""
    if not reason.fit_count:
        return {}
    return {"histogram": [[why, count] for why, count in reason.histogram], "fit": reason.fit_count}


def _write_reasons(decisions: Decisions, view: StoreView, *, epoch: int, now) -> int:
    """Pending reasons with their node histograms, reserved and nominated nodes, only where
    they changed, and only on jobs still PENDING: one cancelled or placed since the snapshot
    keeps its own (cleared) reason. Jobs given the same reason (the core words one per kind: the
    waiting elements of an array share theirs) are written by one UPDATE ... WHERE id IN (...);
    the rest by bulk_update, one statement per batch: 10,000 new elements cost a few statements,
    not a CASE of 10,000 arms. Start times are the forecast's (scheduling/leader/forecasting.py)."""
    reservations = {r.job_id: r for r in decisions.reservations}
    by_value: dict[str, tuple[dict, list[int]]] = {}
    for job_id, reason in decisions.pending.items():
        reservation = reservations.get(job_id)
        nodes = list(reservation.nodes) if reservation else []
        nominated = list(decisions.nominations.get(job_id, ()))
        histogram = stored_histogram(reason)
        values = (reason.code.value, reason.message, nodes, nominated, histogram)
        if view.reasons.get(job_id) != values:
            fields = dict(zip(REASON_FIELDS, values, strict=True))
            by_value.setdefault(json.dumps(fields, sort_keys=True), (fields, []))[1].append(job_id)
    shared = [(fields, ids) for fields, ids in by_value.values() if len(ids) > 1]
    alone = [Job(pk=ids[0], **fields) for fields, ids in by_value.values() if len(ids) == 1]
    written = 0
    for fields, ids in shared:
        for first in range(0, len(ids), SHARED_BATCH):
            with fenced(epoch):
                written += Job.objects.filter(state=TaskState.PENDING, pk__in=ids[first : first + SHARED_BATCH]).update(
                    **fields
                )
    for first in range(0, len(alone), REASON_BATCH):
        with fenced(epoch):
            # bulk_update on a filtered queryset keeps its filter: UPDATE ... WHERE state =
            # 'PENDING' AND id IN (...), one statement per batch.
            written += Job.objects.filter(state=TaskState.PENDING).bulk_update(
                alone[first : first + REASON_BATCH], REASON_FIELDS
            )
    notify.jobs_changed(job_id for _, ids in by_value.values() for job_id in ids)
    return written


def sibling_reason(loaded: list[PendingJob], decisions: Decisions, view: StoreView) -> PendingReason:
    """What a group's children left out of the snapshot (`StoreView.left_out`) wait for, read
    off its loaded children (`loaded`, head first), who have the same team and shape:
    1. GROUP_LIMIT when the group is full: a loaded child got it, or none of them waits as a
       plain sibling (each started, evicts, or holds nodes it was nominated to: they are as
       many as the parallelism, or some child would have been left waiting);
    2. otherwise the reason its last plain waiting child got, less that child's own
       reservation (INSUFFICIENT_CAPACITY with its histogram, QUOTA, DEPENDENCY, ...)."""
    plain = [job for job in loaded if _waits_plainly(job, decisions)]
    full = [job for job in plain if decisions.pending[job.job_id].code == ReasonCode.GROUP_LIMIT]
    if full:
        return decisions.pending[full[0].job_id]
    if not plain:
        group = view.snapshot.groups[loaded[0].group]
        return explain.group_limit(loaded[0], group)
    last = plain[-1].job_id
    reservation = next((r for r in decisions.reservations if r.job_id == last), None)
    return explain.without_reservation(decisions.pending[last], reservation, view.snapshot.now)


def _waits_plainly(job: PendingJob, decisions: Decisions) -> bool:
    reason = decisions.pending.get(job.job_id)
    return reason is not None and not job.nominated and reason.code != ReasonCode.PREEMPTING


def _write_left_out_reasons(decisions: Decisions, view: StoreView, *, epoch: int, now) -> int:
    """The reason of each group's children left out of the snapshot that may start now (not
    held, not in back-off: those keep the reason their hold or requeue wrote), as
    `sibling_reason` finds it: one fenced UPDATE per group, only on PENDING rows whose stored
    reason differs, so a steady pass over a deep array writes nothing. The group's row is
    what live views are told changed (its reason is its first waiting child's)."""
    if not view.left_out:
        return 0
    pending = {job.job_id: job for job in view.snapshot.pending}
    written, changed = 0, []
    for group_id, loaded_ids in view.left_out.items():
        loaded = [pending[job_id] for job_id in loaded_ids if job_id in pending]
        if len(loaded) < len(loaded_ids):
            # A head cancelled between the ranking and the reading of its row: the group's rule
            # reads a full head; its siblings keep their reason until the next pass.
            continue
        reason = sibling_reason(loaded, decisions, view)
        fields = dict(
            zip(REASON_FIELDS, (reason.code.value, reason.message, [], [], stored_histogram(reason)), strict=True)
        )
        with fenced(epoch):
            count = (
                Job.objects.filter(
                    parent_id=group_id, state=JobState.PENDING, cancel_requested_at__isnull=True, held=False
                )
                .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
                .exclude(pk__in=loaded_ids)
                .exclude(**fields)
                .update(**fields)
            )
        written += count
        if count:
            changed.append(group_id)
    notify.jobs_changed(changed)
    return written
