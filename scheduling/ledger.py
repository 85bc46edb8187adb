"""The usage ledger's writes: an attempt's row opened when the job is placed and closed when
its last rank ends (scheduling.models.UsageRecord).

Both are called by lifecycle.sync_job_state, inside the transaction of the transition that
moved the job onto or off its nodes: a transition that rolls back leaves no ledger row, and
no attempt starts or ends without one. Nothing here reads the clock: `now` is the
transition's.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Max

from scheduling import rollup
from scheduling.core.model import HOUR, confirmed_checkpoint, lost_since, resource_class
from scheduling.core.settle import NOT_STARTED
from scheduling.models import FailureClass, Job, JobState, LostCause, StopReason, Task, TaskState, UsageRecord
from scheduling.states import JOB_FINISHED, ON_NODE
from scheduling.stop_requests import RECLAIM, requests_of, stop_cause

S = TaskState

# A stop the scheduler asked for, as the cause of the work it lost; None: the owner's choice.
STOP_CAUSES = {
    StopReason.PREEMPTED: LostCause.PREEMPTION,
    StopReason.DRAIN: LostCause.DRAIN,
    StopReason.TIMEOUT: LostCause.FAILURE,
    StopReason.CANCELLED: None,
    StopReason.REQUEUED: None,
    StopReason.EARLY_STOPPED: None,
}


@dataclass(frozen=True)
class EndedRank:
    """What one rank's row says as its attempt ends."""

    state: str
    stop_reason: str
    failure_class: str
    started_at: datetime | None
    finished_at: datetime | None
    last_checkpoint_at: datetime | None
    gpus: int
    node_reclaimed: bool
    checkpoint_step: int | None = None  # the step of `last_checkpoint_at`
    exit_cause: str = ""  # the agent's cause for an exit it made (Task.exit_cause)

    def lost_cause(self) -> str | None:
        """Why this rank's work was lost; None for a success or the owner's stop. PEER_FAILED
        says only that another rank failed: the caller looks at that rank."""
        if self.stop_reason == StopReason.DRAIN:
            return LostCause.RECLAIM if self.node_reclaimed else LostCause.DRAIN
        if self.stop_reason:
            return STOP_CAUSES.get(self.stop_reason, LostCause.FAILURE)
        if self.state in (S.SUCCEEDED, S.CANCELLED, S.EARLY_STOPPED, S.PENDING, S.ASSIGNED):
            return None
        # Failed with no stop asked: its agent could not start it (no container runtime, no
        # user: nothing was lost, QA read node_loss), the node was lost, its agent lost the task
        # or its lease ran out (INFRA), or the job's own exit (APP).
        if self.failure_class != FailureClass.INFRA:
            return LostCause.FAILURE
        return LostCause.NOT_STARTED if self.exit_cause in NOT_STARTED else LostCause.NODE_LOSS


def attempt_lost_cause(ranks: Iterable[EndedRank]) -> str | None:
    """The attempt's cause: the first rank to end with a cause of its own (a gang's other ranks
    are stopped because of it: PEER_FAILED); FAILURE if only stopped peers are left."""
    ordered = sorted(ranks, key=lambda r: (r.finished_at is None, r.finished_at or datetime.max.replace(tzinfo=UTC)))
    causes = [r.lost_cause() for r in ordered if r.stop_reason != StopReason.PEER_FAILED]
    if any(r.stop_reason == StopReason.PEER_FAILED for r in ordered):
        causes.append(LostCause.FAILURE)
    return next((cause for cause in causes if cause is not None), None)


def lost_work(ranks: list[EndedRank], *, now: datetime) -> dict:
    """What an ended attempt lost, by the core's rule (RunningJob.hours_lost_if_stopped): its
    GPUs x the time from its start, or from the checkpoint every rank confirmed if later, to
    its last rank's end; and that checkpoint's step (where the next attempt resumes), if any.
    Read before a requeue clears the attempt's placement and checkpoints."""
    starts = [r.started_at for r in ranks if r.started_at is not None]
    if not starts:  # it never started: nothing ran, nothing lost
        return {"lost_gpu_hours": 0.0, "lost_since": None, "since_checkpoint": False, "checkpoint_step": None}
    started = min(starts).timestamp()
    checkpoint = confirmed_checkpoint(r.last_checkpoint_at.timestamp() if r.last_checkpoint_at else None for r in ranks)
    since = lost_since(started, checkpoint)
    ended = max((r.finished_at for r in ranks if r.finished_at is not None), default=now).timestamp()
    gpus = sum(r.gpus for r in ranks)
    since_checkpoint = checkpoint is not None and checkpoint >= started
    # The confirmed checkpoint is the oldest rank's: its step is the one every rank saved.
    oldest = min((r for r in ranks if r.last_checkpoint_at), key=lambda r: r.last_checkpoint_at, default=None)
    return {
        "lost_gpu_hours": round(gpus * max(0.0, ended - since) / HOUR, 4),
        "lost_since": datetime.fromtimestamp(since, UTC).isoformat(),
        "since_checkpoint": since_checkpoint,
        "checkpoint_step": oldest.checkpoint_step if since_checkpoint and oldest else None,
    }


def lost_work_text(lost: dict) -> str:
    """`lost_work` in words, as the job page's timeline puts it: "lost 0.81 GPU-hours since the
    checkpoint of step 300 at 09:24:00 UTC" ("" when nothing ran)."""
    if not lost.get("lost_since"):
        return ""
    if lost.get("since_checkpoint"):
        step = lost.get("checkpoint_step")
        since = "the checkpoint" + (f" of step {step}" if step is not None else "")
    else:
        since = "the attempt's start"
    at = datetime.fromisoformat(lost["lost_since"]).astimezone(UTC)
    return f"lost {lost['lost_gpu_hours']:.2f} GPU-hours since {since} at {at:%H:%M:%S} UTC"


# A task's row as an EndedRank reads it (`ended_rank`).
RANK_FIELDS = (
    "state",
    "stop_reason",
    "failure_class",
    "started_at",
    "finished_at",
    "last_checkpoint_at",
    "gpu_indices",
    "last_node__reclaim_deadline",
    "checkpoint_step",
    "exit_cause",
)


# An attempt a user requeued (`mlq requeue`): its ranks end PREEMPTED, as a preemption's do, but
# it counts as no preemption anywhere (the job's counters, usage, reports).
REQUEUED = "REQUEUED"
# Every outcome a closed row may hold (`on_job_state`): the job's state as it left its nodes, or
# REQUEUED; PENDING (a placement withdrawn before it ran) last. The usage CSV's columns are
# these, so an outcome added here or to the job's states is never left out of them.
OUTCOMES = (
    *(state for state in JobState.values if state not in ON_NODE and state != JobState.PENDING),
    REQUEUED,
    JobState.PENDING.value,
)


def ended_rank(row: tuple) -> EndedRank:
    state, stop, failure, started, finished, checkpoint, indices, reclaim, step, cause = row
    gpus = len(indices or ())
    return EndedRank(state, stop, failure, started, finished, checkpoint, gpus, reclaim is not None, step, cause)


def ended_ranks(job_id: int) -> list[EndedRank]:
    return [ended_rank(row) for row in Task.objects.filter(job_id=job_id).values_list(*RANK_FIELDS)]


def on_job_state(job_id: int, *, before: str, after: str, now: datetime) -> None:
    """The ledger's part of a job's state change: placed -> open its attempt's row; off its
    nodes -> close it; from PREEMPTED (off its nodes, the leader's verdict to come) to an end ->
    its last attempt ended the job so."""
    if after in ON_NODE and before not in ON_NODE:
        do_open_attempt(job_id, now=now)
    elif before in ON_NODE and after not in ON_NODE:
        do_close_attempt(job_id, outcome=after, now=now)
    elif before == TaskState.PREEMPTED and after in JOB_FINISHED:  # the verdict, or a cancel, ended it there
        rollup.do_end_preempted(job_id, after, left_as=(TaskState.PREEMPTED, REQUEUED))


def do_open_attempt(job_id: int, *, now: datetime) -> None:
    job = Job.objects.select_related("team", "owner").get(pk=job_id)
    attempt = Task.objects.filter(job_id=job_id).aggregate(n=Max("attempt"))["n"] or 1
    before = (
        UsageRecord.objects.filter(job_id=job_id, attempt__lt=attempt, ended_at__isnull=False)
        .order_by("-attempt")
        .values_list("ended_at", flat=True)
        .first()
    )
    row = UsageRecord(
        job_id=job_id,
        attempt=attempt,
        job_name=job.name,
        team_id=job.team_id,
        team_name=job.team.name,
        owner_id=job.owner_id,
        owner_name=job.owner.get_username(),
        resource_class=resource_class(job.gpu_type),
        priority=job.priority,
        gpus=job.gpu_count if job.gpu_type else 0,
        cpus=job.task_count * job.cpu_per_rank,
        queued_at=max(job.submitted_at, before) if before else job.submitted_at,
        started_at=now,
    )
    # The same attempt placed twice cannot happen (a placement bumps the attempt); if it ever
    # did, the first row stands rather than failing the transition.
    UsageRecord.objects.bulk_create([row], ignore_conflicts=True)
    rollup.do_supersede(job_id, attempt)


def preemption_cause(job_id: int, *, since: datetime) -> str:
    """PREEMPTION, or QUOTA_RECLAIM where the scheduler stopped the attempt (placed at `since`)
    to reclaim capacity another team is guaranteed: its stop request's cause, as `mlq status`
    and `mlq why` read it (stop_requests.stop_cause)."""
    found = requests_of(job_id, (StopReason.PREEMPTED,)).filter(created_at__gte=since).first()
    reclaimed = found is not None and stop_cause(found["request"]) == RECLAIM
    return LostCause.QUOTA_RECLAIM if reclaimed else LostCause.PREEMPTION


def first_to_end(ranks: list[EndedRank]) -> EndedRank | None:
    """The rank whose end says how the attempt ended: the first to end other than by succeeding
    (the others were stopped after it); the first of all if every rank succeeded. A gang rank
    that had succeeded before its peers were requeued said nothing of the requeue, and the
    attempt read PREEMPTED with no stop reason (QA)."""
    ended = sorted((r for r in ranks if r.finished_at), key=lambda r: r.finished_at)
    return next((r for r in ended if r.state != S.SUCCEEDED), ended[0] if ended else None)


def do_close_attempt(job_id: int, *, outcome: str, now: datetime) -> int:
    """Close the job's open row: its end, how it ended, and the work it lost and why; and add
    it to the usage rollup (scheduling/rollup.py), in the same transaction."""
    ranks = ended_ranks(job_id)
    cause = attempt_lost_cause(ranks)
    lost = lost_work(ranks, now=now) if cause else {"lost_gpu_hours": 0.0, "lost_since": None}
    first = first_to_end(ranks)
    if outcome == TaskState.PREEMPTED and first is not None and first.stop_reason == StopReason.REQUEUED:
        outcome = REQUEUED  # the user's requeue: no preemption (QA: the reports counted it as one)
    # Locked first so that the rows this update closes are the ones added to the rollup.
    open_rows = UsageRecord.objects.select_for_update().filter(job_id=job_id, ended_at__isnull=True)
    opened = dict(open_rows.values_list("id", "started_at"))
    open_ids = list(opened)
    if not open_ids:
        return 0
    if cause == LostCause.PREEMPTION:
        cause = preemption_cause(job_id, since=min(opened.values()))
    closed = UsageRecord.objects.filter(id__in=open_ids).update(
        ended_at=now,
        outcome=outcome,
        stop_reason=first.stop_reason if first else "",
        failure_class=first.failure_class if first else "",
        lost_gpu_hours=lost["lost_gpu_hours"],
        lost_cause=cause or "",
        lost_since=datetime.fromisoformat(lost["lost_since"]) if lost["lost_since"] else None,
    )
    rollup.do_add_closed(open_ids)
    return closed
