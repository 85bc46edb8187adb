"""A job group's parallelism within one pass: at most `parallelism` of a group's children on nodes
at once (ClusterSnapshot.groups, PendingJob.group, RunningJob.group).

A slot is taken by:
1. a child running, starting, or being stopped (it holds its room until it is gone), and one that
   failed and awaits the leader's verdict (Group.settling);
2. a pending child that evicted to start: its victims are stopping, or it holds the nodes it was
   nominated to;
3. a child the pass places or evicts for.
A child whose group has no slot left waits GROUP_LIMIT, without a try: no placement, no eviction,
no reservation."""

from collections import defaultdict

from scheduling.core import explain
from scheduling.core.model import ClusterSnapshot, PendingJob
from scheduling.core.reasons import PendingReason


class GroupSlots:
    def __init__(self, snapshot: ClusterSnapshot):
        self.groups = snapshot.groups
        self.used: dict[int, int] = defaultdict(int, {key: group.settling for key, group in self.groups.items()})
        self.members: set[int] = set()  # pending children that hold a slot (rules 2 and 3)

    def count_running(self, group: int | None) -> None:
        """Rule 1, for each running job as the pass indexes them."""
        if group is not None:
            self.used[group] += 1

    def count_starters(self, pending, stopping_for) -> None:
        """Rule 2."""
        for job in pending:
            if job.group is not None and (job.job_id in stopping_for or job.nominated):
                self.take(job)

    def take(self, job: PendingJob) -> None:
        """Rule 3 (and 2): once per child."""
        if job.group is not None and job.job_id not in self.members:
            self.used[job.group] += 1
            self.members.add(job.job_id)

    def full(self, job: PendingJob) -> PendingReason | None:
        """GROUP_LIMIT when `job`'s group has no slot left for it (None: it may be tried)."""
        if job.group is None or job.job_id in self.members:
            return None
        group = self.groups.get(job.group)
        if group is None or self.used[job.group] < group.parallelism:
            return None
        return explain.group_limit(job, group)
