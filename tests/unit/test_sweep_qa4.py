"""QA round 4 of sweeps, no database: integer ranges draw each integer alike, the sweep's metric
name takes what mlqueue.report takes, a grid's values differ by the text a trial gets, `trial` is
no parameter name, and an infinite value is said to be one."""

import math
from collections import Counter

import pytest

from mlqueue.metrics_report import check_values
from scheduling import group_spec as g
from scheduling.sweep_params import trials

DRAWS = 30_000


def frequencies(parameter: dict, *, seed: int = 11) -> dict[int, float]:
    """How often each value came up in DRAWS trials of a random sweep over `parameter`."""
    drawn = trials({"method": "random", "parameters": {"n": parameter}, "max_trials": DRAWS}, seed=seed)
    counts = Counter(trial["n"] for trial in drawn)
    assert all(type(value) is int for value in counts)
    return {value: count / DRAWS for value, count in sorted(counts.items())}


@pytest.mark.parametrize(
    "parameter",
    [
        {"min": 1, "max": 3, "int": True},
        {"min": 0.5, "max": 3.7, "int": True},  # the integers between: 1, 2 and 3
        {"min": -1, "max": 1, "int": True},
    ],
)
def test_an_integer_range_draws_each_integer_alike(parameter):
    """Rounding a uniform draw over [1, 3] drew 1 and 3 a quarter of the time each, 2 half."""
    found = frequencies(parameter)
    assert len(found) == 3
    assert all(abs(share - 1 / 3) < 0.015 for share in found.values()), found


def test_a_log_integer_range_gives_each_integer_its_stretch_of_the_log_scale_ends_included():
    """n owns [n - 0.5, n + 0.5) of the log scale over [0.5, 4.5): 1 half the time (rounding a
    log draw over [1, 4] gave 1 only [1, 1.5), 29%), 4 a ninth or so."""
    found = frequencies({"min": 1, "max": 4, "log": True, "int": True})
    expected = {n: math.log((n + 0.5) / (n - 0.5)) / math.log(4.5 / 0.5) for n in (1, 2, 3, 4)}
    assert found.keys() == expected.keys()
    assert all(abs(found[n] - expected[n]) < 0.015 for n in expected), (found, expected)


def test_an_integer_range_stays_within_its_integers_at_the_bounds_limit():
    drawn = trials(
        {
            "method": "random",
            "parameters": {"n": {"min": 1, "max": 10**15, "log": True, "int": True}},
            "max_trials": 500,
        },
        seed=2,
    )
    assert all(1 <= trial["n"] <= 10**15 and type(trial["n"]) is int for trial in drawn)


def sweep_errors(**block) -> dict:
    serializer = g.SweepSerializer(data=block)
    assert not serializer.is_valid()
    return serializer.errors


@pytest.mark.parametrize("name", ["1st_loss", "9", "_x", "eval/acc", "val-loss.2"])
def test_a_sweep_takes_every_metric_name_mlqueue_report_takes(name):
    check_values({name: 0.5})  # the job's side takes it
    serializer = g.SweepSerializer(data={"method": "grid", "parameters": {"lr": [1]}, "metric": {"name": name}})
    assert serializer.is_valid(), serializer.errors


@pytest.mark.parametrize("name", ["-loss", ".loss", "/loss", "val loss", "x" * 101])
def test_a_sweep_refuses_a_metric_name_mlqueue_report_refuses(name):
    errors = sweep_errors(method="grid", parameters={"lr": [1]}, metric={"name": name})
    assert "metric" in errors
    assert g.METRIC_NAME.match(name) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["1", 1], g.GRID_SAME_TEXT.format(name="lr", first="1", second=1, text="1")),
        ([1, "2", "1"], g.GRID_SAME_TEXT.format(name="lr", first=1, second="1", text="1")),
        ([True, "true"], g.GRID_SAME_TEXT.format(name="lr", first=True, second="true", text="true")),
        ([0.5, "0.5"], g.GRID_SAME_TEXT.format(name="lr", first=0.5, second="0.5", text="0.5")),
        ([2, 2], g.GRID_REPEATS.format(name="lr", value=2)),
    ],
)
def test_grid_values_that_make_the_same_text_are_refused(values, message):
    errors = sweep_errors(method="grid", parameters={"lr": values})
    assert [str(m) for m in errors["parameters"]] == [message]


def test_grid_values_that_make_different_text_are_kept():
    """1 and 1.0 go into a command as "1" and "1.0" (an int argument parser takes one, not the
    other), 1 and true as "1" and "true"."""
    serializer = g.SweepSerializer(data={"method": "grid", "parameters": {"lr": [1, 1.0, True, "True"]}})
    assert serializer.is_valid(), serializer.errors


def test_a_parameter_named_trial_is_refused_on_its_own_key():
    errors = sweep_errors(method="grid", parameters={"lr": [1], "trial": [1, 2]})
    message = g.PARAM_NAME_TAKEN.format(name="trial", meaning="the trial's number")
    assert errors["parameters"] == {"trial": [message]}
    assert message == "{trial} in a trial's command and env values is the trial's number: name the parameter otherwise."


@pytest.mark.parametrize("name", ["index", "count", "Trial", "TRIAL", "trials"])
def test_names_that_are_no_placeholder_of_a_sweep_stay_free(name):
    """A sweep substitutes {trial} and its parameters; {index} and {count} are an array's."""
    serializer = g.SweepSerializer(data={"method": "grid", "parameters": {name: [1, 2]}})
    assert serializer.is_valid(), serializer.errors


@pytest.mark.parametrize(("value", "shown"), [(math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan")])
def test_a_value_that_is_no_finite_number_is_said_to_be_one(value, shown):
    errors = sweep_errors(method="grid", parameters={"lr": [0.1, value]})
    assert [str(m) for m in errors["parameters"]] == [f"lr: a value must be a finite number, not {shown}."]
    assert str(errors["parameters"][0]) == g.VALUE_NOT_FINITE.format(name="lr", value=value)
