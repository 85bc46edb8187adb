"""What a job's state changes tell the apps above scheduling (the notifications app listens),
sent inside the transaction that made the change: a receiver's writes commit or roll back with
it. scheduling never imports those apps.

1. job_state_changed: a job's own state, re-derived from its tasks (lifecycle.sync_job_state);
2. job_failed: the leader's verdict that a job failed for good (reconcile._end_failed);
3. group_state_changed: a group's state, derived from its children's (group_state.sync_group_state)."""

from django.dispatch import Signal

# job_id, before, after, reason, message, now; parent_id where the sender knows it (0: none)
job_state_changed = Signal()
# job_id, reason, message, now
job_failed = Signal()
# job_id, before, after, first_start, message, now
group_state_changed = Signal()
