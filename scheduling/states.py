"""Task and job states, and the named sets of them: one name per meaning.

A job's state is derived from its tasks' (lifecycle.derive_job_state), under the same names.
Only Django's choices enum is imported here (no ORM, no settings), so that models.py can
declare its partial indexes with these very sets.
"""

from django.db.models import TextChoices


class TaskState(TextChoices):
    PENDING = "PENDING"
    ASSIGNED = "ASSIGNED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"
    # A sweep trial its rule stopped for doing worse than the others (scheduling/sweeps.py):
    # ended on purpose, neither a failure nor a success, and never retried.
    EARLY_STOPPED = "EARLY_STOPPED"
    # A pipeline step whose `when` condition can no longer be met (docs/pipelines.md): it never
    # ran, by design or because a step before it did not end as it needed. Steps only: a plain
    # job whose dependency went the wrong way is CANCELLED.
    SKIPPED = "SKIPPED"


JobState = TaskState

# Placed on a node and not ended: the node's GPUs and CPUs are the task's (ASSIGNED: placed,
# its process starting). Tuples keep the order the partial indexes were declared in.
ON_NODE = (TaskState.ASSIGNED, TaskState.RUNNING)
# Waiting in the queue or on a node: what the queue page's "active" filter shows.
QUEUED_OR_RUNNING = (TaskState.PENDING, *ON_NODE)
# Not started yet: queued, or placed with its process starting (the queue page's "waiting").
NOT_STARTED = (TaskState.PENDING, TaskState.ASSIGNED)
# An attempt that is over (finished_at is stamped); the leader may still requeue it.
ENDED = (
    TaskState.SUCCEEDED,
    TaskState.FAILED,
    TaskState.PREEMPTED,
    TaskState.CANCELLED,
    TaskState.EARLY_STOPPED,
    TaskState.SKIPPED,
)
# An attempt that ended without success: the leader's verdict is due while failure_class is blank.
UNSUCCESSFUL = (TaskState.FAILED, TaskState.PREEMPTED, TaskState.CANCELLED)
# A job that has finished (PREEMPTED is only the moment between a preemption and its requeue;
# FAILED without a failure class still awaits the leader's verdict).
JOB_FINISHED = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.EARLY_STOPPED, TaskState.SKIPPED)
