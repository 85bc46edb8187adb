"""Task-user slots: which pooled UID a job's tasks run as (agents/node/isolation.py).

An agent that runs tasks as users from its pool (`--task-uids`) gives every task of one job,
each rank and each attempt, the UID its slot names: `FIRST + slot`. So an attempt after a
preemption, a drain or a lost node reads the checkpoints the attempt before it wrote (its
directory is 0700, its files the job's own), on a shared file system from any node. No two jobs
that are not over hold the same slot, so no two such jobs share a UID anywhere.

The leader hands out slots as it places jobs (scheduling/leader/apply.py): a job keeps its
slot from its first placement until it is over (succeeded, cancelled, stopped early, skipped,
or failed for good); the lowest free slot goes to a job without one. Only the leader places,
so a pass's one read of the slots held is the truth until its next.
"""

from django.db.models import Q

from scheduling.models import Job, JobState
from scheduling.states import ON_NODE

# A job that is over: none of its tasks will run again, so its slot may go to another job.
OVER = Q(state__in=(JobState.SUCCEEDED, JobState.CANCELLED, JobState.EARLY_STOPPED, JobState.SKIPPED)) | Q(
    state=JobState.FAILED, failure_class__gt=""
)
HELD = Q(run_slot__isnull=False) & ~OVER


class Slots:
    """The slots held now, read once (one indexed query) for a pass's placements."""

    def __init__(self):
        self.holder: dict[int, int] = {}  # slot -> the job that holds it
        self.given: dict[int, int] = {}  # job -> its slot
        rows = Job.objects.filter(HELD).values_list("id", "run_slot", "state").order_by("id")
        for job_id, slot, state in rows:
            self.given[job_id] = slot
            # Two jobs on one slot: a job over came back (a retry) after its slot went to
            # another. The one with tasks on nodes keeps it; the other gets a new one.
            if slot not in self.holder or state in ON_NODE:
                self.holder[slot] = job_id
        self._lowest = 0

    def slot_for(self, job_id: int) -> int:
        """`job_id`'s slot: the one it was given if it still holds it, else the lowest free."""
        current = self.given.get(job_id)
        if current is not None and self.holder.get(current, job_id) == job_id:
            self.holder[current] = job_id
            return current
        while self._lowest in self.holder:
            self._lowest += 1
        self.holder[self._lowest], self.given[job_id] = job_id, self._lowest
        return self._lowest
