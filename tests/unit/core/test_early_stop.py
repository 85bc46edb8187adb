"""The median stopping rule (scheduling/core/early_stop.py): exact stops and messages, and the
two promises it keeps whatever the reports: the best trial runs on, and no trial is stopped
before `min_reports`."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.early_stop import MIN_OTHERS, STOP_MESSAGE, Stop, Trial, median_stops


def curve(*values: float, start: int = 100, every: int = 100) -> list[tuple[int, float]]:
    return [(start + every * n, value) for n, value in enumerate(values)]


def trial(trial_id: int, *values: float, running: bool = True, **steps) -> Trial:
    return Trial(trial_id, curve(*values, **steps), running)


def stops(trials, goal="minimize", min_reports=3) -> list[tuple[int, str]]:
    return [
        (s.trial_id, s.message) for s in median_stops(trials, metric="val_loss", goal=goal, min_reports=min_reports)
    ]


def expect(trial_id: int, best: str, median: str, others: int, step: int = 300) -> tuple[int, str]:
    return (
        trial_id,
        f"val_loss: best {best} by step {step} is worse than the median {median} of {others} other trials at step "
        f"{step} (median stopping rule, after 3 reports)",
    )


CASES = {
    # Of four, the two below the others' median stop: the rule keeps about the better half.
    "worse than the median of three others": (
        [trial(1, 0.5, 0.4, 0.35), trial(2, 0.6, 0.45, 0.41), trial(3, 0.7, 0.5, 0.42), trial(4, 1.1, 0.95, 0.92)],
        "minimize",
        [expect(3, "0.42", "0.41", 3), expect(4, "0.92", "0.41", 3)],
    ),
    "judged on its best so far, not its last value": (
        # Trial 3's best by step 300 is 0.3, better than anyone's; on its last value (0.9) it would stop.
        [trial(1, 0.5, 0.4, 0.35), trial(2, 0.5, 0.4, 0.35), trial(3, 0.3, 0.9, 0.9), trial(4, 0.5, 0.4, 0.35)],
        "minimize",
        [],
    ),
    "the others' values are their best up to the step, not later": (
        # Trial 3 is judged at step 300; the others reach 0.1 only at step 400, where only they are.
        [trial(1, 0.5, 0.45, 0.4, 0.1), trial(2, 0.5, 0.45, 0.4, 0.1), trial(3, 0.6, 0.5, 0.42)],
        "minimize",
        [expect(3, "0.42", "0.4", 2)],
    ),
    "finished and early-stopped trials count among the others": (
        [trial(1, 0.3, 0.2, 0.1, running=False), trial(2, 0.9, 0.8, 0.7, running=False), trial(3, 0.6, 0.5, 0.45)],
        "minimize",
        [expect(3, "0.45", "0.4", 2)],
    ),
    "a trial that ended before the step counts with the best it reached": (
        # QA's ratchet: 4 and 5 were stopped early at step 200; trial 3 (0.7 by step 300) is better
        # than the median of all four others (0.55), if worse than the two ahead of it.
        [
            trial(1, 0.5, 0.6, 0.72),
            trial(2, 0.5, 0.6, 0.71),
            trial(3, 0.5, 0.6, 0.70),
            trial(4, 0.3, 0.38, running=False),
            trial(5, 0.2, 0.3, running=False),
        ],
        "maximize",
        [],
    ),
    "an ended trial that never came close still stops the worse": (
        [trial(1, 0.5, 0.6, 0.72), trial(2, 0.1, 0.2, 0.3), trial(4, 0.3, 0.38, running=False)],
        "maximize",
        [expect(2, "0.3", "0.55", 2)],
    ),
    "a running trial that has not reached the step does not count": (
        # 1 and 2 stopped reporting at step 200 (and have too few reports to be judged).
        [trial(1, 0.1, 0.1), trial(2, 0.2, 0.2), trial(3, 0.9, 0.9, 0.9)],
        "minimize",
        [],
    ),
    "one other is not enough": ([trial(1, 0.1, 0.1, 0.1), trial(2, 0.9, 0.9, 0.9)], "minimize", []),
    "a tie with the median never stops": (
        [trial(1, 0.5, 0.4, 0.3), trial(2, 0.5, 0.4, 0.3), trial(3, 0.5, 0.4, 0.3)],
        "minimize",
        [],
    ),
    "a tie within floating point's rounding never stops": (
        # QA: examples/sweep.yaml, step 7: 0.8857 against the median of 0.5857 and 1.1857, which
        # floating point makes 0.8856999999999999.
        [trial(1, 0.9, 0.8857, 0.8857), trial(2, 0.6, 0.5857, 0.5857), trial(3, 1.2, 1.1857, 1.1857)],
        "minimize",
        [expect(3, "1.1857", "0.7357", 2)],
    ),
    "maximize: the lower value is the worse": (
        [trial(1, 0.7, 0.8, 0.9), trial(2, 0.6, 0.75, 0.85), trial(3, 0.2, 0.25, 0.3)],
        "maximize",
        [expect(3, "0.3", "0.875", 2)],
    ),
    "a loss that went NaN is the worst there is": (
        [trial(1, 0.5, 0.4, 0.35), trial(2, 0.6, 0.45, 0.41), trial(3, math.nan, math.nan, math.nan)],
        "minimize",
        [expect(3, "inf", "0.38", 2)],
    ),
    "reports may start late and come in any order": (
        [
            Trial(1, [(300, 0.4), (100, 0.5), (200, 0.45)], True),
            Trial(2, [(250, 0.4), (300, 0.39), (400, 0.3)], True),
            Trial(3, [(300, 0.8), (200, 0.85), (100, 0.9)], True),
        ],
        "minimize",
        [expect(3, "0.8", "0.395", 2)],
    ),
}


@pytest.mark.parametrize(("trials", "goal", "expected"), CASES.values(), ids=CASES.keys())
def test_the_median_rule(trials, goal, expected):
    assert stops(trials, goal) == expected


def test_a_stop_carries_its_numbers():
    found = median_stops(
        [trial(7, 0.5, 0.4, 0.35), trial(8, 0.6, 0.45, 0.41), trial(9, 0.9, 0.95, 0.92)],
        metric="loss",
        goal="minimize",
        min_reports=2,
    )
    assert found == [
        Stop(
            9,
            300,
            0.9,
            0.38,
            2,
            STOP_MESSAGE.format(metric="loss", best=0.9, step=300, median=0.38, others=2, min_reports=2),
        )
    ]
    assert found[0].message == (
        "loss: best 0.9 by step 300 is worse than the median 0.38 of 2 other trials at step 300 "
        "(median stopping rule, after 2 reports)"
    )


def test_reports_at_one_step_count_once():
    # Two ranks of a gang report every step: still two reports, under min_reports 3.
    twice = Trial(3, [(100, 0.9), (100, 0.95), (200, 0.9), (200, 0.92)], True)
    others = [trial(1, 0.1, 0.1, 0.1), trial(2, 0.1, 0.1, 0.1)]
    assert stops([*others, twice]) == []
    assert [s.trial_id for s in median_stops([*others, twice], metric="m", goal="minimize", min_reports=2)] == [3]


def test_a_finished_trial_is_never_stopped():
    worse = trial(3, 0.9, 0.9, 0.9, running=False)
    assert stops([trial(1, 0.1, 0.1, 0.1), trial(2, 0.1, 0.1, 0.1), worse]) == []


def test_a_goal_that_is_neither_is_refused():
    with pytest.raises(ValueError, match="goal is minimize or maximize, not 'lowest'"):
        median_stops([], metric="m", goal="lowest", min_reports=1)


values = st.floats(min_value=-10, max_value=10, allow_nan=False)
series = st.lists(st.tuples(st.integers(min_value=0, max_value=20), values), max_size=12)
sweeps = st.lists(st.tuples(series, st.booleans()), min_size=1, max_size=8)


@given(sweeps, st.sampled_from(["minimize", "maximize"]), st.integers(min_value=1, max_value=6))
def test_the_rule_never_stops_the_best_trial_nor_one_with_too_few_reports(sweep, goal, min_reports):
    trials = [Trial(n, reports, running) for n, (reports, running) in enumerate(sweep)]
    stopped = {s.trial_id: s for s in median_stops(trials, metric="m", goal=goal, min_reports=min_reports)}
    pick = min if goal == "minimize" else max
    reported = [value for t in trials for _, value in t.reports]
    for t in trials:
        if t.trial_id not in stopped:
            continue
        assert t.running
        assert len({step for step, _ in t.reports}) >= min_reports
        assert pick(value for _, value in t.reports) != pick(reported)  # not the best trial
        assert stopped[t.trial_id].others >= MIN_OTHERS
