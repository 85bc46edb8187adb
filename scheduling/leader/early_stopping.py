"""The leader's sweep for sweeps with `early_stop: {rule: median}`: trials doing clearly worse
than the others are stopped gracefully and end EARLY_STOPPED, freeing their GPUs for the next
trial. The rule is scheduling/core/early_stop.py's; this module reads and writes.

1. Due: a sweep still pending or running whose trials reported since the rule last looked
   (`metrics_changed_at` later than `early_stop_checked_at`, stamped by the metrics ingest).
2. Read its trials' reports of the sweep's metric in one query: each trial's best value per
   step, with the trial's state; at most `MAX_POINTS` (step, trial) points, the earliest steps
   first (past that bound the rule judges on the steps it read in full).
3. Judge (core.early_stop.median_stops) and stop each trial it names, fenced by the epoch: a
   trial on its nodes gets SIGTERM and its grace period (its exit makes it EARLY_STOPPED,
   scheduling/reports.py STOPPED_AS); a trial waiting again (requeued after a preemption) ends
   EARLY_STOPPED at once. Either way its timeline says why, with the rule's numbers.
4. Stamp `early_stop_checked_at` with the `metrics_changed_at` read in 1: a report that lands
   after that read moves `metrics_changed_at` past the stamp, and the next pass looks again.
"""

import logging

from django.db.models import F, Max, Min, Q

from scheduling import lifecycle, notify
from scheduling.core.early_stop import MINIMIZE, Trial, median_stops
from scheduling.fencing import fenced
from scheduling.models import FailureClass, GroupKind, Job, JobMetric, StopReason, TaskState
from scheduling.states import ON_NODE, QUEUED_OR_RUNNING
from scheduling.stopping import do_request_stop

log = logging.getLogger(__name__)
S = TaskState
MAX_POINTS = 100_000
# A trial the rule may still stop: not finished (PREEMPTED: between a preemption and its requeue).
STOPPABLE = (*QUEUED_OR_RUNNING, S.PREEMPTED)


def stop_worse_trials(*, epoch: int, now) -> int:
    """The sweep (the module's steps 1-4). Returns how many trials it stopped."""
    stopped = 0
    for parent in _due():
        stopped += _check(parent, epoch=epoch, now=now)
    return stopped


def _due():
    """1. Read through the job state index: only active sweeps, however many jobs have ended."""
    return (
        Job.objects.filter(state__in=QUEUED_OR_RUNNING, group_kind=GroupKind.SWEEP, metrics_changed_at__isnull=False)
        .filter(group__early_stop__rule="median")
        .filter(Q(early_stop_checked_at__isnull=True) | Q(early_stop_checked_at__lt=F("metrics_changed_at")))
        .order_by("id")
        .only("id", "group", "metrics_changed_at", "grace_period_seconds")
    )


def _check(parent: Job, *, epoch: int, now) -> int:
    """Steps 2-4 for one sweep; returns how many of its trials were stopped."""
    metric, rule = parent.group["metric"], parent.group["early_stop"]
    trials = trial_reports(parent.pk, metric["name"], metric["goal"])
    stops = median_stops(trials, metric=metric["name"], goal=metric["goal"], min_reports=rule["min_reports"])
    stopped = 0
    for stop in stops:
        with fenced(epoch):
            stopped += do_stop_trial(stop.trial_id, message=stop.message, grace_s=parent.grace_period_seconds, now=now)
    with fenced(epoch):
        Job.objects.filter(pk=parent.pk).update(early_stop_checked_at=parent.metrics_changed_at)
    return stopped


def trial_reports(parent_id: int, name: str, goal: str) -> list[Trial]:
    """2. The sweep's trials that reported `name`, each with its best value per step, in one query."""
    best = Min("value") if goal == MINIMIZE else Max("value")
    rows = list(
        JobMetric.objects.filter(job__parent_id=parent_id, name=name)
        .values_list("job_id", "job__state", "step")
        .annotate(best=best)
        .order_by("step", "job_id")[: MAX_POINTS + 1]
    )
    if len(rows) > MAX_POINTS:
        cut = rows[-1][2]  # the last step read may be read in part: judge on the steps before it
        log.warning(
            "sweep %s: over %s reported points; the median rule judges up to step %s", parent_id, MAX_POINTS, cut
        )
        rows = [row for row in rows if row[2] < cut]
    series: dict[int, list[tuple[int, float]]] = {}
    states: dict[int, str] = {}
    for job_id, state, step, value in rows:
        series.setdefault(job_id, []).append((step, value))
        states[job_id] = state
    return [Trial(job_id, series[job_id], states[job_id] in STOPPABLE) for job_id in sorted(series)]


def do_stop_trial(job_id: int, *, message: str, grace_s: int, now) -> int:
    """3. Inside the caller's fenced transaction: SIGTERM to the trial's tasks on nodes, or, for a
    trial waiting again, straight to EARLY_STOPPED. Returns 1 if it was stopped now, 0 if it had
    ended or was already being stopped."""
    if do_request_stop(job_id=job_id, reason=StopReason.EARLY_STOPPED, grace_s=grace_s, message=message, now=now):
        return 1
    if Job.objects.filter(pk=job_id, tasks__state__in=ON_NODE).exists():
        return 0  # already asked to stop (preempted, cancelled): that stop stands
    moved = lifecycle.transition_gang(
        job_id,
        from_state=(S.PENDING, S.PREEMPTED),
        to_state=S.EARLY_STOPPED,
        actor_name="scheduler",
        reason=StopReason.EARLY_STOPPED,
        message=message,
        now=now,
        failure_class=FailureClass.EARLY_STOPPED,
    )
    if moved:
        notify.jobs_changed([job_id])
    return int(bool(moved))
