"""What the simulated scheduler sees (part of `engine.Simulation`): the snapshot of each pass,
its waiting jobs' views (made again only for the jobs whose state changed) and its running
jobs with their latest checkpoints."""

import functools
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from scheduling.core import model as core
from scheduling.core.conditions import Condition, Edge
from scheduling.sim.trace import TraceJob

if TYPE_CHECKING:
    from scheduling.sim.engine import Record, Run


class SchedulerViews:
    """`Simulation`'s views for the policy, read off its records, runs and clock."""

    def _told(self, job: TraceJob, record: "Record") -> float:
        """The runtime the scheduler believes: the estimate, less the work already saved."""
        return max(60.0, (job.max_runtime or job.duration) - record.done_s)

    def _interval(self, job_interval_s: float | None) -> float:
        """A job's own checkpoint interval, else the configured one."""
        return self.config.checkpoint_interval_s if job_interval_s is None else job_interval_s

    def _last_checkpoint(self, run: "Run") -> float | None:
        if not run.interval:
            return run.confirmed
        taken = math.floor((self.now - run.anchor) / run.interval)
        return run.anchor + taken * run.interval if taken > 0 else run.confirmed

    def snapshot(self) -> core.ClusterSnapshot:
        nodes = self._nodes_now()
        # A run with no checkpoints to follow is its placement (`_with_checkpoint`'s first
        # case, inline: ~4,400 runs a forecast's pass).
        running = tuple(
            [
                run.placement if run.stopping or not run.interval else self._with_checkpoint(run)
                for run in self.running.values()
            ]
        )
        views, waiting = self.pending_views, self.pending
        for job_id in self.unviewed:
            if job_id in waiting:
                views[job_id] = self._pending_view(waiting[job_id])
        self.unviewed.clear()
        pending = tuple(map(views.__getitem__, waiting))
        return core.ClusterSnapshot(
            nodes,
            running,
            pending,
            self.teams,
            self.now,
            self.policy_config,
            groups=self.groups,
            maintenance=self.maintenance,
        )

    def _with_checkpoint(self, run: "Run") -> core.RunningJob:
        """The run as the scheduler sees it, with its latest checkpoint (rebuilt only when a
        new checkpoint has been taken since)."""
        interval = run.interval
        if run.stopping or not interval:
            return run.placement
        taken = int((self.now - run.anchor) // interval)
        if taken != run.checkpoints:
            run.placement = replace(run.placement, last_checkpoint_at=self._last_checkpoint(run))
            run.checkpoints = taken
        return run.placement

    def _forget_view(self, job_id: int) -> None:
        """The job's view is to be made again (its state changed). Every job put in `pending`
        comes with this call, so each waiting job has a view at each snapshot."""
        self.pending_views.pop(job_id, None)
        if job_id in self.pending:
            self.unviewed.add(job_id)

    def _pending(self, job: TraceJob) -> core.PendingJob:
        view = self.pending_views.get(job.job_id)
        if view is None:
            view = self.pending_views[job.job_id] = self._pending_view(job)
        return view

    def _dependency_met(self, edge: Edge) -> bool:
        """Met once the job it waits on ends in the simulation (a job not in it never does: it
        ended the wrong way). Every job that ends there succeeds: an edge waiting for a failure
        is never met (the job gets no forecast start rather than one it will most likely not have)."""
        if edge.condition == Condition.FAILURE:
            return False
        record = self.records.get(edge.job_id)
        return record is not None and record.end is not None

    def _pending_view(self, job: TraceJob) -> core.PendingJob:
        record = self.records[job.job_id]
        # The job it was preempted for, whether or not it still waits: the core skips one that
        # does not, and a view cached while it waited must not go stale once it starts.
        yields_to = record.yields_to
        view = job.view
        if view is not None:
            unmet = tuple(e for e in view.waiting_edges if not self._dependency_met(e)) if view.waiting_on else ()
            fields = {
                "max_runtime_s": self._told(job, record),
                "waiting_on": tuple(e.job_id for e in unmet),
                "waiting_conditions": tuple(e.condition for e in unmet),
                "yields_to": yields_to or view.yields_to,
                "nominated": record.nominated,
                "queued_at": view.queued_at if record.requeued_at is None else record.requeued_at,
            }
            # A live job's first view is mostly the job itself (a forecast's 2,497 at seed-2500).
            if not view.waiting_on and all(getattr(view, name) == value for name, value in fields.items()):
                return view
            return replace(view, **fields)
        interval = self._interval(job.checkpoint_interval_s)
        return core.PendingJob(
            job.job_id,
            job.team,
            job.priority,
            job.shape(self.config.gpu_type),
            job.submit,
            self._told(job, record),
            checkpointing=bool(interval),
            yields_to=yields_to,
            checkpoint_interval_s=job.checkpoint_interval_s,
            nominated=record.nominated,
            group=job.group,
            queued_at=record.requeued_at,
        )


def resumed_view(placement: core.RunningJob) -> core.PendingJob:
    """What a live running job asks for should it wait again: the shape of its tasks (its
    node selector and topology are not known here), its team and priority, the runtime it was
    told (to its expected end), its checkpointing and its group. Its wait counts from its start
    (the time it was submitted is not known here either)."""
    first = placement.tasks[0]
    shape = _shape(placement.gpu_type, len(placement.tasks), len(first.gpu_indices), first.cpus, first.memory_gb)
    return core.PendingJob(
        placement.job_id,
        placement.team,
        placement.priority,
        shape,
        placement.started_at,
        placement.expected_end - placement.started_at,
        checkpointing=placement.checkpointing,
        checkpoint_interval_s=placement.checkpoint_interval_s,
        group=placement.group,
    )


@functools.lru_cache(maxsize=4096)
def _shape(gpu_type: str | None, tasks: int, gpus: int, cpus: int, memory_gb: int) -> core.JobShape:
    """One shape for the running jobs that ask alike (a frozen value: shared, it reads the
    same): a forecast makes a view of each of the live running jobs before it starts."""
    return core.JobShape(gpu_type, tasks, gpus, cpus, memory_gb)
