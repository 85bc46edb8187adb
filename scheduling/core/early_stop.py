"""A sweep's median stopping rule (`early_stop: {rule: median, min_reports: 3}`): which running
trials are doing clearly worse than the others and should stop, freeing their GPUs. Pure: the
leader (scheduling/leader/early_stopping.py) reads the trials' reports and applies the stops.

The rule, for each trial T that may still be stopped (Vizier's median stopping rule, judged on
the trials' best values as Determined does):

1. T must be running (not finished; a trial waiting again after a preemption counts) and have
   reported at least `min_reports` distinct steps. Several values at one step (the ranks of a
   gang, an attempt that resumed from a checkpoint) are one report.
2. T is judged at its latest step s; T_best is its best value (by the goal) at any step <= s.
3. The others are every other trial that has ended (succeeded, failed, cancelled, or stopped
   early itself), whatever step it reached, and every other running trial that has reported at
   a step >= s. Each contributes its best value at steps <= s (one that first reported after s
   has none and does not count). An ended trial's curve is over: by step s it had at best what
   it ever had, as Ray's and Vizier's rules count completed trials. Leaving out the trials
   stopped before s would ratchet the median toward the best survivors (QA: of five trials at
   0.90, 0.89, 0.88, 0.5 and 0.4, the third was stopped at step 4 for being worse than the
   two ahead of it), until two are left and the worse is stopped for being second. A running
   trial behind s does not count: it has yet to show what it does by s.
4. At least `MIN_OTHERS` (2) others are needed: the median of one trial is that trial, and the
   rule would become a duel that the worse of the first two trials always loses at its
   `min_reports`-th report, however close (noise). Two is the fewest that make a median of a
   field, and keeps the rule at work in a small sweep (4 trials, parallelism 2).
5. T is stopped when T_best is strictly worse than the median of the others' values (a tie
   never stops, nor a difference within floating point's rounding: TIE_TOLERANCE). A NaN
   counts as the worst value there is: a trial whose loss diverged is what the rule is for.
6. The trials to stop come out in trial order; every judgment uses the same reports, so a trial
   stopped here still counts among the others of the rest.

It follows that the rule never stops the trial with the best value reported so far (its best
by its latest step is at least as good as anyone's at any step), nor one with fewer than
`min_reports` reports.
"""

import math
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_OTHERS = 2
TIE_TOLERANCE = 1e-9  # relative (and absolute, near 0): what a mean of two values may be off by
MINIMIZE, MAXIMIZE = "minimize", "maximize"
STOP_MESSAGE = (
    "{metric}: best {best:g} by step {step} is worse than the median {median:g} of {others} other trials at "
    "step {step} (median stopping rule, after {min_reports} reports)"
)


@dataclass(frozen=True, slots=True)
class Trial:
    trial_id: int  # its job id
    reports: Sequence[tuple[int, float]]  # (step, value), in any order, a step possibly twice
    running: bool  # not finished: the rule may stop it


@dataclass(frozen=True, slots=True)
class Stop:
    trial_id: int
    step: int  # the step it was judged at (its latest)
    best: float  # its best value up to that step
    median: float  # the median of the others' best values up to that step
    others: int  # how many others that median is of
    message: str  # the reason, with those numbers, as the trial's timeline and page show it


class _Curve:
    """A trial's reports as its distinct steps, ascending, and its best value up to each."""

    def __init__(self, reports: Iterable[tuple[int, float]], goal: str):
        at_step: dict[int, float] = {}
        for step, value in reports:
            value = _worst(goal) if math.isnan(value) else value
            at_step[step] = value if step not in at_step else _better(goal, at_step[step], value)
        self.steps = sorted(at_step)
        self.best: list[float] = []
        for step in self.steps:
            value = at_step[step]
            self.best.append(value if not self.best else _better(goal, self.best[-1], value))

    def best_by(self, step: int) -> float | None:
        """The best value at steps <= `step` (None: no report that early)."""
        found = bisect_right(self.steps, step)
        return self.best[found - 1] if found else None


def median_stops(trials: Sequence[Trial], *, metric: str, goal: str, min_reports: int) -> list[Stop]:
    """The running trials the median stopping rule stops (the module's rules 1-6)."""
    if goal not in (MINIMIZE, MAXIMIZE):
        raise ValueError(f"goal is minimize or maximize, not {goal!r}")
    curves = {trial.trial_id: _Curve(trial.reports, goal) for trial in trials}
    ended = {trial.trial_id for trial in trials if not trial.running}
    stops = []
    for trial in sorted(trials, key=lambda t: t.trial_id):
        curve = curves[trial.trial_id]
        if not trial.running or len(curve.steps) < min_reports:  # 1.
            continue
        stop = _judge(trial.trial_id, curve, curves, ended, metric=metric, goal=goal, min_reports=min_reports)
        if stop is not None:
            stops.append(stop)
    return stops


def _judge(trial_id: int, curve: _Curve, curves: dict[int, _Curve], ended: set[int], **rule) -> Stop | None:
    step = curve.steps[-1]  # 2.
    best = curve.best[-1]
    values = [
        value
        for other_id, other in curves.items()
        if other_id != trial_id and other.steps and (other_id in ended or other.steps[-1] >= step)  # 3.
        for value in (other.best_by(step),)
        if value is not None
    ]
    if len(values) < MIN_OTHERS:  # 4.
        return None
    median = statistics.median(values)
    if not _worse(rule["goal"], best, median):  # 5.
        return None
    message = STOP_MESSAGE.format(
        metric=rule["metric"], best=best, step=step, median=median, others=len(values), min_reports=rule["min_reports"]
    )
    return Stop(trial_id, step, best, median, len(values), message)


def _worse(goal: str, value: float, than: float) -> bool:
    """Strictly worse, beyond floating point's rounding: a value equal to the median but for
    its last bits is a tie (QA: examples/sweep.yaml's trial 0 was stopped at 0.8857 against
    a median of 0.8856999999999999, the mean of 0.5857 and 1.1857)."""
    if math.isclose(value, than, rel_tol=TIE_TOLERANCE, abs_tol=TIE_TOLERANCE):
        return False
    return value > than if goal == MINIMIZE else value < than


def _better(goal: str, a: float, b: float) -> float:
    return min(a, b) if goal == MINIMIZE else max(a, b)


def _worst(goal: str) -> float:
    return math.inf if goal == MINIMIZE else -math.inf
