"""Reads about the stops asked of a job's running tasks (scheduling/stopping.py writes them): why,
as a cause code and the request's sentence, and when the stop is forced. The job's API answer,
`mlq status` and `mlq why` show a job that is being stopped; a preemption's notification tells
why it was (notifications/services.py)."""

from django.db.models import QuerySet
from django.db.models.functions import JSONObject

from scheduling.core.decisions import PreemptionReason
from scheduling.models import Job, Signal, StopReason, Task
from scheduling.nodes import HEALTH_ACTOR
from scheduling.states import ON_NODE
from teams.models import AuditEvent, EventKind

RECLAIM = "RECLAIM"  # a stop to give a team back capacity it is guaranteed
# `stop_cause`'s answers: a stop reason, but RECLAIM and NODE_HEALTH told apart.
CAUSES = (
    "PREEMPTED",
    RECLAIM,
    "DRAIN",
    "NODE_HEALTH",
    *(r for r in StopReason.values if r not in ("PREEMPTED", "DRAIN")),
)


def requests_of(job_id: int, reasons) -> QuerySet:
    """The job's stop requests for `reasons`, newest first, each one column, `request`:
    {reason, message, actor, preemption}; so that its first row serves as a subquery too."""
    return (
        AuditEvent.objects.filter(job_id=job_id, kind=EventKind.STOP_REQUESTED, reason__in=reasons)
        .order_by("-created_at", "-id")
        .values(
            request=JSONObject(reason="reason", message="message", actor="actor_name", preemption="data__preemption")
        )
    )


def stop_cause(request: dict) -> str:
    """The cause of a stop request (a `requests_of` row's `request`): its stop reason, but a
    reclaim told from a priority preemption, and a node's fault from a drain (an admin's, a
    maintenance window's, a spot node's notice)."""
    if request["reason"] == StopReason.PREEMPTED:
        return RECLAIM if request["preemption"] == PreemptionReason.RECLAIM else StopReason.PREEMPTED
    if request["reason"] == StopReason.DRAIN and request["actor"] == HEALTH_ACTOR:
        return "NODE_HEALTH"
    return request["reason"]


def stopping(job: Job, tasks: list[Task]) -> dict | None:
    """The stop asked of the job's tasks still on their nodes (`tasks`: all the job's, as loaded),
    or None if none is asked: what the job page's Stop column shows, with when the SIGKILL comes
    (the latest `kill_at`) and the request's sentence. A query only for a job being stopped."""
    asked = [task for task in tasks if task.state in ON_NODE and task.stop_reason] if job.state in ON_NODE else []
    if not asked:
        return None
    reason = asked[0].stop_reason
    found = requests_of(job.pk, [reason]).first()
    request = found["request"] if found else {"reason": reason, "message": "", "actor": "", "preemption": None}
    requested = [task.stop_requested_at for task in asked if task.stop_requested_at is not None]
    kill_at = [task.kill_at for task in asked if task.kill_at is not None]
    return {
        "cause": stop_cause(request),
        "message": request["message"],
        "preempted_for": asked[0].preempted_for_id,
        "signal": "SIGKILL" if any(task.stop_signal == Signal.KILL for task in asked) else "SIGTERM",
        "requested_at": min(requested, default=None),
        "kill_at": max(kill_at, default=None),
    }
