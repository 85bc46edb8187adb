"""The leader's failure detection, from heartbeat ages (never from one missed beat):

- SUSPECT after three missed heartbeats: nothing new is placed there;
- LOST once the last heartbeat is older than the agent's lease plus a margin: by then the
  agent has killed its own tasks (it does so when its lease lapses), so failing them as INFRA
  and requeueing cannot run anything twice;
- a spot node past its reclaim deadline: its remaining tasks are requeued as INFRA.
"""
from django.conf import settings

from agents import liveness
from agents.models import Node, NodeState
from agents.services import do_mark_health
from scheduling import lifecycle, notify
from scheduling.fencing import fenced
from scheduling.models import FailureClass, StopReason, Task, TaskState

ACTIVE = (TaskState.ASSIGNED, TaskState.RUNNING)


def detect(*, epoch: int, now) -> dict[str, int]:
    counts = {"suspect": 0, "lost": 0, "reclaimed": 0}
    nodes = list(Node.objects.filter(health__in=(NodeState.READY, NodeState.SUSPECT)))
    seen = liveness.last_seen([n.name for n in nodes])
    lost_after = settings.MLQ_AGENT_LEASE_S + settings.MLQ_LOST_MARGIN_S
    for node in nodes:
        # No record at all (a flushed cache): count from when the node last changed state.
        age = now.timestamp() - seen.get(node.name, node.state_changed_at.timestamp())
        if age > lost_after:
            with fenced(epoch):
                do_mark_health(node, NodeState.LOST, now=now, message=f"no heartbeat for {age:.0f} s "
                               f"(lease {settings.MLQ_AGENT_LEASE_S:g} s + margin {settings.MLQ_LOST_MARGIN_S:g} s)")
                counts["lost"] += _fail_tasks_on(node, "", f"node {node.name} was lost", now)
        elif age > settings.MLQ_SUSPECT_AFTER_S and node.health == NodeState.READY:
            with fenced(epoch):
                do_mark_health(node, NodeState.SUSPECT, now=now, message=f"no heartbeat for {age:.0f} s")
            counts["suspect"] += 1
    for node in Node.objects.filter(reclaim_deadline__lte=now, tasks__state__in=ACTIVE).distinct():
        with fenced(epoch):
            counts["reclaimed"] += _fail_tasks_on(node, StopReason.DRAIN, f"spot node {node.name} reclaimed", now)
    return counts


def _fail_tasks_on(node: Node, stop_reason: str, message: str, now) -> int:
    """The node's active tasks fail as INFRA (their gangs' other ranks are stopped by the next
    sweep, and the whole gang is requeued)."""
    failed = 0
    for task in Task.objects.filter(node=node, state__in=ACTIVE):
        failed += lifecycle.transition_task(task, to_state=TaskState.FAILED, attempt=task.attempt,
                                            actor_name="scheduler", reason="NODE_LOST", message=message, now=now,
                                            failure_class=FailureClass.INFRA, stop_reason=task.stop_reason or stop_reason)
        notify.jobs_changed([task.job_id])
    return failed
