"""The "why is this job pending?" panel: the reason, node histogram and fit count the last
pass stored with the job (read, never recomputed: the page re-renders on every push), and,
asked for, what would let it start sooner against the cluster as it is now."""

import re
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from scheduling.cluster import load_nodes, load_running, load_teams
from scheduling.core.fairshare import Ledger, in_flight_ledger
from scheduling.core.maintenance import Windows
from scheduling.core.model import JobShape
from scheduling.core.reasons import CATEGORY, ReasonCode
from scheduling.core.state import ClusterState
from scheduling.core.whatif import before_window, fits_now, suggestions
from scheduling.group_state import waiting_reasons
from scheduling.maintenance import load_windows
from scheduling.models import Job, JobState, StopReason
from scheduling.selectors import scheduler_state
from scheduling.services import job_shape
from scheduling.spec import gpu_types
from scheduling.states import JOB_FINISHED
from scheduling.stop_requests import stopping
from scheduling.web.borrowing import capacity
from teams.models import AuditEvent, EventKind


@dataclass
class Why:
    code: str
    message: str
    # The pass's count for the job's shape; () and "" where its reason is not about room on
    # the nodes (held, behind a reservation, over quota...) or no pass has looked at it yet.
    histogram: tuple[tuple[str, int], ...]
    fit_count: str

    @property
    def held(self) -> bool:
        return self.code == ReasonCode.HELD


@dataclass
class Help:
    """What would let a pending job start sooner, tried on the cluster at `at`."""

    at: datetime
    fits_as_is: bool
    suggestions: list[str]
    # The job's reason when it does not wait for room (its quota, a hold, a dependency, a
    # retry's back-off, its group's parallelism): then no reshape starts it sooner, and a
    # "fits the free room" would mislead.
    not_room: str = ""
    quota: bool = False  # `not_room` is its quota: `suggestions` says what would help, if anything


# The reasons a wait is not about room on the nodes.
NOT_ROOM = {ReasonCode.QUOTA, ReasonCode.HELD, ReasonCode.DEPENDENCY, ReasonCode.BACKOFF, ReasonCode.GROUP_LIMIT}


def cluster_now() -> tuple[ClusterState, tuple]:
    nodes, _ = load_nodes()
    return ClusterState(nodes, load_running(timezone.now())), tuple(nodes)


def explain_job(job: Job) -> Why:
    stored = job.pending_histogram or {}
    return Why(
        code=job.reason_code,
        message=job.reason_message,
        histogram=tuple((why, count) for why, count in stored.get("histogram", ())),
        fit_count=stored.get("fit", ""),
    )


# What would help a QUOTA wait, said only where it is true (QA: "asking fewer GPUs" to a 1-GPU
# job, "a higher borrowing limit" with every H100 in use). Put together by `quota_help`.
QUOTA_WAIT = "it waits for {quota}, not for room"
QUOTA_AND_ROOM_WAIT = "it waits for {quota} and for room ({free} {unit} free)"
FEWER = "asking {count} {unit} or fewer"
HIGHER_LIMIT = "a higher borrowing limit {lead}"
WOULD_START = ": {help} would start it sooner"
STARTS_AS_JOBS_END = ": it starts as {jobs} end, or as room frees up"
NO_ROOM_FOR_LIMIT = "; a higher borrowing limit would not, with no room for it"
OVER_LIMIT_HELP = (
    "{team} uses more than its limit ({used} of {limit} {unit}: the limit was lowered below its use): it waits "
    "until its running jobs bring its use down to {most} {unit} or less; neither fewer GPUs nor more room would "
    "start it sooner"
)
CEILING_HELP = "only fewer GPUs, or a larger quota from a lead of {team} (or above), let it start"
NOTHING_IDLE_HELP = (
    "its team holds its guarantee and nothing is idle to borrow: it starts as other teams' jobs end; a higher "
    "borrowing limit would not help"
)
NOTHING_IDLE_FEWER = ", asking {count} {unit} or fewer might"
PARENT_TEAM = re.compile(r"parent team (\S+)")
# explain.quota's and explain.nothing_to_borrow's figures.
QUOTA_FIGURES = re.compile(
    r"team (?P<team>\S+) uses (?P<used>\d+) \S+ \(at most (?P<limit>\d+): \d+ guaranteed \+ \d+ borrowing limit\)"
)
IDLE_FIGURES = re.compile(r"at \d+/\d+ guaranteed \S+, nothing idle to borrow \(needs \d+, (?P<free>\d+) free\)")


@dataclass(frozen=True)
class Asked:
    """What a job waiting on its quota asks, and the room of its class free now."""

    units: int  # GPUs (CPUs for a CPU job) in all
    fewest: int  # the fewest it could ask: one per task
    unit: str  # "H100", or "CPU"
    free: int  # free units of its class on the cluster now

    @classmethod
    def of(cls, shape: JobShape, free: int) -> "Asked":
        return cls(shape.units, shape.tasks, shape.unit_name, free)


def quota_help(message: str, asked: Asked) -> str:
    """What would help a QUOTA wait, by the limit its reason names (explain.quota's wordings):
    nothing idle to borrow, a team's ceiling below the job, a team over its (lowered) limit, a
    parent team's limit or its own. Fewer GPUs only where a count the job could ask fits under
    the limit and the free room now; a higher limit only where the free room holds the job."""
    if "nothing idle to borrow" in message:
        return _nothing_idle_help(message, asked)
    parent = PARENT_TEAM.search(message)
    if "may ever hold" in message:
        return CEILING_HELP.format(team=f"team {parent.group(1)}" if parent else "its team")
    figures = QUOTA_FIGURES.search(message)
    used, limit = (int(figures["used"]), int(figures["limit"])) if figures else (None, None)
    if figures and used > limit:
        team = f"{'parent ' if parent else ''}team {figures['team']}"
        most = limit - asked.units
        return OVER_LIMIT_HELP.format(team=team, used=used, limit=limit, unit=asked.unit, most=most)
    if parent:
        name = parent.group(1)
        whose = {
            "quota": f"the quota of team {name} (above its team)",
            "jobs": f"the running jobs of team {name}",
            "lead": f"for {name} from a lead of {name} (or above)",
        }
    else:
        whose = {"quota": "its team's quota", "jobs": "its team's running jobs", "lead": "from a lead of its team"}
    # Without figures (a parent's, where quotas are private) no count can be said to fit.
    fewer = min(limit - used, asked.free) if figures else 0
    return _quota_advice(whose, asked, fewer if asked.fewest <= fewer < asked.units else None)


def _quota_advice(whose: dict[str, str], asked: Asked, fewer: int | None) -> str:
    """The wait, then what would start it sooner: `fewer` GPUs or fewer (None: no count would),
    a higher limit where the free room holds the whole job; else what it waits for."""
    room = asked.free >= asked.units
    said = QUOTA_WAIT.format(**whose) if room else QUOTA_AND_ROOM_WAIT.format(**whose, free=asked.free, unit=asked.unit)
    helps = [FEWER.format(count=fewer, unit=asked.unit)] if fewer is not None else []
    if room:
        helps.append(HIGHER_LIMIT.format(**whose))
    if helps:
        said += WOULD_START.format(help=", or ".join(helps) + ("," if len(helps) > 1 else ""))
    else:
        said += STARTS_AS_JOBS_END.format(**whose)
    return said if room else said + NO_ROOM_FOR_LIMIT


def _nothing_idle_help(message: str, asked: Asked) -> str:
    """Asking no more than is free might start it, where a count it could ask is free (the
    reason's own figure, which the panel shows beside it)."""
    figures = IDLE_FIGURES.search(message)
    free = int(figures["free"]) if figures else 0
    if asked.fewest <= free < asked.units:
        return NOTHING_IDLE_HELP + NOTHING_IDLE_FEWER.format(count=free, unit=asked.unit)
    return NOTHING_IDLE_HELP


def what_would_help(job: Job) -> Help:
    """Reshapes of the job that fit the free room now, off the nodes of any maintenance window
    its time limit would run into (and the limit that would fit before one): loads every node,
    running task and window, so it runs when a user asks, never on a render. A job that does
    not wait for room is told what it waits for instead."""
    if job.reason_code in NOT_ROOM:
        quota = job.reason_code == ReasonCode.QUOTA
        # The API's and mlq's answer too (the page words it around not_room): no reshape, but
        # for a quota what would help.
        said = [quota_help(job.reason_message, _asked(job))] if quota else []
        return Help(at=timezone.now(), fits_as_is=False, suggestions=said, not_room=job.reason_message, quota=quota)
    state, _ = cluster_now()
    shape = job_shape(job.spec)
    now = timezone.now()
    windows = Windows(load_windows(now), now.timestamp())
    end_at = now.timestamp() + job.max_runtime_hours * 3600
    if fits_now(state, shape, windows.limit(end_at, None)):  # a reshape would only wait for the same turn
        return Help(at=now, fits_as_is=True, suggestions=[])
    return Help(
        at=now,
        fits_as_is=False,
        suggestions=reshapes(
            state, shape, windows, now=now.timestamp(), end_at=end_at, team=job.team.name, ledger=_ledger(state)
        ),
    )


def reshapes(
    state: ClusterState, shape: JobShape, windows: Windows, *, now: float, end_at: float, team: str, ledger: Ledger
) -> list[str]:
    """Reshapes of a job (ending at `end_at`) that fit the free room now, off the nodes of any
    maintenance window it would run into, and the time limit that would fit before one: what
    `mlq why` and the dry run suggest (the dry run's ignored the windows, and suggested shapes
    that waited for them: QA stop 49). Only those `team`'s quotas let start (`ledger`, the
    teams' use as the pass counts it: fairshare.in_flight_ledger)."""

    def allowed(reshaped: JobShape) -> bool:
        return ledger.over_limit(team, reshaped.resource_class, reshaped.units) is None

    shorter = before_window(state, shape, windows, now=now, end_at=end_at)
    limit = windows.limit(end_at, None)
    return [*([shorter] if shorter else []), *suggestions(state, shape, gpu_types(), limit=limit, allowed=allowed)]


def _ledger(state: ClusterState) -> Ledger:
    """The teams' use as a pass counts it: what runs, and the preemptors whose victims stop."""
    ids = {victim.preempted_for for victim in state.running_jobs if victim.preempted_for is not None}
    preemptors = {}
    for job in Job.objects.filter(pk__in=ids, state=JobState.PENDING).select_related("team") if ids else ():
        shape = job_shape(job.spec)
        preemptors[job.pk] = (job.team.name, shape.resource_class, shape.units)
    return in_flight_ledger(load_teams(), state.running_jobs, state.fleet.capacity, preemptors)


def _asked(job: Job) -> Asked:
    """A quota wait's job against the free room now (loads the cluster, as a room wait's does):
    on ready nodes that no maintenance window its time limit runs into keeps it off (QA: a
    higher limit was offered with every free H100 in a window the job would reach)."""
    shape = job_shape(job.spec)
    state, _ = cluster_now()
    now = timezone.now()
    closed = Windows(load_windows(now), now.timestamp()).closed(now.timestamp() + job.max_runtime_hours * 3600)
    slots = state.by_class.get(shape.resource_class, ())
    return Asked.of(shape, sum(slot.free_units for slot in slots if slot.ready and slot.name not in closed))


def why_answer(job: Job) -> dict:
    """The API's "why": what the job page's panel shows, as data; the suggestions are computed
    now (what_would_help loads the cluster), for a pending job only. A group waits as its first
    waiting child does (no pass explains the parent, which has no tasks): that child answers,
    with the reason the group's page shows."""
    pending = job.state == JobState.PENDING
    child = _first_waiting_child(job) if pending and job.group_kind and not job.held else None
    subject = child or job
    why = explain_job(subject) if pending else None
    reason = why and {"code": why.code, "category": _category(why.code), "message": why.message}
    found = waiting_reasons([job.pk]).get(job.pk) if child is not None else None
    if found is not None:  # None: the child started since it was read; its own reason stands
        code, message = found
        reason = {"code": code, "category": _category(code), "message": message}
    return {
        "job_id": job.pk,
        "child_id": child.pk if child is not None else None,
        "state": job.state,
        "reason": reason,
        "histogram": (
            {"fit": why.fit_count, "rejections": [{"why": reason, "nodes": count} for reason, count in why.histogram]}
            if why and why.histogram
            else None
        ),
        "reservation": _reservation(subject) if pending else None,
        "latest_start": subject.estimated_start if pending else None,
        "likely_start": subject.likely_start if pending else None,
        **_forecast_age(subject if pending else None),
        "suggestions": what_would_help(subject).suggestions if pending else [],
        "stopping": stopping(job, job.tasks.all()),
        "capacity": capacity(job),
        "ended": ended(job),
    }


def ended(job: Job) -> dict | None:
    """How a job that has finished ended: the transition into its final state (who, when, its
    reason code and message), as its timeline records it. `mlq why` of a job a dependency
    cancelled said only `CANCELLED` (QA): the reason was in its events alone. None while it
    has not finished (FAILED without a failure class awaits the leader's verdict)."""
    if job.state not in JOB_FINISHED or job.state == JobState.FAILED and not job.failure_class:
        return None
    # A cancel's own words: a running job's ranks end later, by the signal that stopped them
    # (QA: "by agent:node-3: rank 1 ended (signal SIGTERM)" for a user's cancel, reason and all).
    events = AuditEvent.objects.filter(job=job).order_by("-created_at", "-id")
    request = None
    if job.state == JobState.CANCELLED and job.cancel_requested_at is not None:
        request = events.filter(kind=EventKind.CANCEL_REQUESTED).first()
    elif job.state == JobState.EARLY_STOPPED:  # its rule's words, not the signal that stopped it (QA)
        request = events.filter(kind=EventKind.STOP_REQUESTED, reason=StopReason.EARLY_STOPPED).first()
    event = request or events.filter(kind=EventKind.TRANSITION, to_state=job.state).first()
    answer = {"state": job.state, "at": job.finished_at, "by": "", "reason": "", "message": ""}
    if event is not None:
        answer.update(at=job.finished_at or event.created_at, by=event.actor_name, reason=event.reason)
        answer["message"] = event.message
    if request is not None and request.kind == EventKind.CANCEL_REQUESTED:  # as a pending job's cancel says it
        answer.update(reason="CANCELLED", message=request.message or f"cancelled by {request.actor_name}")
    return answer


def _forecast_age(job: Job | None) -> dict:
    """As the job's own answer says it (`estimated_start_as_of`, `estimated_start_stale`): when
    the forecast of its starts was taken and whether it is no longer being refreshed; null and
    false for a job with no forecast start."""
    if job is None or (job.estimated_start is None and job.likely_start is None):
        return {"estimated_start_as_of": None, "estimated_start_stale": False}
    lease = scheduler_state()
    return {"estimated_start_as_of": lease.forecast_at, "estimated_start_stale": lease.forecast_stale}


def _first_waiting_child(parent: Job) -> Job | None:
    """The child `group_state.waiting_reasons` reads a group's reason from."""
    return Job.objects.filter(parent=parent, state=JobState.PENDING).order_by("group_index").first()


def _category(code: str) -> str | None:
    try:
        return CATEGORY[ReasonCode(code)]
    except (ValueError, KeyError):  # a code the core no longer has
        return None


def _reservation(job: Job) -> dict | None:
    if not job.reserved_nodes and not job.nominated_nodes:
        return None
    return {"reserved_nodes": list(job.reserved_nodes), "nominated_nodes": list(job.nominated_nodes)}
