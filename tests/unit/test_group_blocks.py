"""The spec's group blocks (scheduling/group_spec.py), a sweep's trials (sweep_params.py) and a
group's state from its children's (group_state.derive_group_state): no database."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from scheduling import group_spec as g
from scheduling.group_state import derive_group_state
from scheduling.groups import Child
from scheduling.sweep_params import as_text, env_name, trials


def array(**block):
    serializer = g.ArraySerializer(data=block)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def sweep(**block):
    serializer = g.SweepSerializer(data=block)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def errors(kind, **block) -> dict:
    with pytest.raises(ValidationError) as caught:
        (array if kind == "array" else sweep)(**block)
    return caught.value.detail


def test_an_array_by_count_or_by_indices():
    assert array(count=200, parallelism=16, max_failures=5) == {
        "count": 200,
        "indices": None,
        "parallelism": 16,
        "max_failures": 5,
    }
    assert array(indices="0-9:3,20") == {"count": 5, "indices": "0-9:3,20", "parallelism": 5, "max_failures": 0}
    assert g.parse_indices("5-7,1,6") == [1, 5, 6, 7]


@pytest.mark.parametrize(
    ("block", "field", "message"),
    [
        ({}, "count", g.COUNT_OR_INDICES),
        ({"indices": "1-x"}, "indices", g.BAD_INDICES.format(part="1-x")),
        ({"indices": "9-2"}, "indices", g.BACKWARDS_RANGE.format(part="9-2")),
        # Past the column's int: they were a 500.
        ({"indices": "2147483648"}, "indices", g.INDEX_TOO_LARGE.format(part="2147483648", limit=2**31 - 1)),
        (
            {"indices": "0-99999999999999999999:100000000000000000"},
            "indices",
            g.INDEX_TOO_LARGE.format(part="0-99999999999999999999:100000000000000000", limit=2**31 - 1),
        ),
        ({"count": 3, "indices": "0-3"}, "count", g.COUNT_DISAGREES.format(count=3, indices="0-3", named="4")),
        ({"count": 10_001}, "count", g.TOO_MANY_ELEMENTS.format(limit=10_000, count=10_001)),
        (
            {"count": 4, "max_failures": 4},
            "max_failures",
            g.MAX_FAILURES_RANGE.format(count=4, children="elements", value=4),
        ),
    ],
)
def test_a_bad_array_names_the_field(block, field, message):
    detail = errors("array", **block)
    assert [str(m) for m in detail[field]] == [message]


@pytest.mark.parametrize(
    ("block", "field", "message"),
    [
        ({"method": "random", "parameters": {"lr": [1]}}, "max_trials", g.RANDOM_NEEDS_TRIALS),
        (
            {"method": "grid", "parameters": {"lr": {"min": 0, "max": 1}}},
            "parameters",
            g.GRID_NEEDS_LISTS.format(name="lr"),
        ),
        ({"method": "grid", "parameters": {"2lr": [1]}}, "parameters", g.BAD_PARAM_NAME.format(name="2lr")),
        (
            {"method": "grid", "parameters": {"lr": [1], "LR": [2]}},
            "parameters",
            g.PARAM_NAMES_CLASH.format(a="lr", b="LR", upper="LR"),
        ),
        ({"method": "grid", "parameters": {"lr": []}}, "parameters", g.EMPTY_VALUES.format(name="lr")),
        (
            {"method": "random", "max_trials": 2, "parameters": {"lr": {"min": 0, "max": 1, "log": True}}},
            "parameters",
            g.LOG_NEEDS_POSITIVE.format(name="lr", low=0),
        ),
        (
            {"method": "random", "max_trials": 2, "parameters": {"lr": {"min": 1, "max": 1}}},
            "parameters",
            g.RANGE_BOUNDS.format(name="lr", low=1, high=1),
        ),
        # Every trial drew 1, outside the range.
        (
            {"method": "random", "max_trials": 3, "parameters": {"n": {"min": 1.5, "max": 1.7, "int": True}}},
            "parameters",
            g.NO_INTEGER_IN_RANGE.format(name="n", low=1.5, high=1.7),
        ),
        # The same trials run twice over.
        ({"method": "grid", "parameters": {"lr": [1, 1]}}, "parameters", g.GRID_REPEATS.format(name="lr", value=1)),
        (
            {"method": "grid", "parameters": {"lr": [1, 2]}, "max_failures": 2},
            "max_failures",
            g.MAX_FAILURES_RANGE.format(count=2, children="trials", value=2),
        ),
        (
            {"method": "grid", "parameters": {"a": list(range(200)), "b": list(range(100))}},
            "max_trials",
            g.GRID_TOO_LARGE.format(size=20_000, limit=10_000),
        ),
        (
            {"method": "grid", "parameters": {"lr": [1]}, "early_stop": {"rule": "median"}},
            "early_stop",
            g.EARLY_STOP_NEEDS_METRIC,
        ),
    ],
)
def test_a_bad_sweep_names_the_field(block, field, message):
    detail = errors("sweep", **block)
    assert [str(m) for m in detail[field]] == [message]


def test_a_grid_is_every_combination_first_name_slowest_capped_by_max_trials():
    block = sweep(method="grid", parameters={"lr": [0.1, 0.01], "bs": [32, 64]}, max_trials=3)
    assert block["max_trials"] == 3 and block["parallelism"] == 3
    assert trials(block, seed=0) == [{"bs": 32, "lr": 0.1}, {"bs": 32, "lr": 0.01}, {"bs": 64, "lr": 0.1}]


@pytest.mark.parametrize(
    ("method", "parameters"),
    [
        ("grid", {"lr": [0.1, 0.01], "act": ["relu", "gelu"], "bs": [32, 64]}),
        ("random", {"lr": {"min": 1e-5, "max": 1e-1, "log": True}, "act": ["relu", "gelu"], "bs": [32, 64]}),
    ],
)
def test_the_order_a_spec_lists_its_parameters_in_changes_no_trial(method, parameters):
    """A stored spec (jsonb) or another client may list the keys in another order."""
    reordered = dict(reversed(parameters.items()))
    assert trials(sweep(method=method, parameters=parameters, max_trials=4), seed=3) == trials(
        sweep(method=method, parameters=reordered, max_trials=4), seed=3
    )


@given(st.integers(0, 2**32 - 1))
def test_random_trials_are_the_seed_s_and_within_their_ranges(seed):
    block = sweep(
        method="random",
        max_trials=8,
        parameters={
            "lr": {"min": 1e-6, "max": 1e-2, "log": True},
            "layers": {"min": 2, "max": 6, "int": True},
            "act": ["relu", "gelu"],
        },
    )
    drawn = trials(block, seed=seed)
    assert drawn == trials(block, seed=seed)
    for trial in drawn:
        assert 1e-6 <= trial["lr"] <= 1e-2 and math.isfinite(trial["lr"])
        assert trial["layers"] in range(2, 7) and trial["act"] in ("relu", "gelu")


def test_values_go_into_commands_as_text_and_variables_by_upper_name():
    assert [as_text(v) for v in (0.0003, 1e-06, 32, True, "adam")] == ["0.0003", "1e-06", "32", "true", "adam"]
    assert env_name("batch_size") == "MLQ_PARAM_BATCH_SIZE"
    child = Child(3, {"lr": 0.1}, {"lr": "0.1", "index": "3"})
    assert child.substitute('--lr={lr} --json={"a": 1} {unknown} {index}') == '--lr=0.1 --json={"a": 1} {unknown} 3'


ARRAY = {"kind": "array", "count": 4, "max_failures": 1}
SWEEP = {"kind": "sweep", "count": 3, "max_failures": None}


@pytest.mark.parametrize(
    ("group", "counts", "cancel", "expected"),
    [
        (ARRAY, {"PENDING": 4}, False, ("PENDING", "")),
        (ARRAY, {"RUNNING": 1, "PENDING": 3}, False, ("RUNNING", "")),
        (ARRAY, {"SUCCEEDED": 3, "FAILED": 1}, False, ("SUCCEEDED", "")),  # within max_failures
        (ARRAY, {"SUCCEEDED": 1, "FAILED": 2, "RUNNING": 1}, False, ("FAILED", "GROUP")),  # past it, at once
        (ARRAY, {"SUCCEEDED": 4}, False, ("SUCCEEDED", "")),
        (ARRAY, {"SUCCEEDED": 1, "CANCELLED": 3}, True, ("CANCELLED", "CANCELLED")),
        (ARRAY, {"CANCELLED": 4}, False, ("CANCELLED", "CANCELLED")),
        (ARRAY, {"SUCCEEDED": 3, "CANCELLED": 1}, False, ("SUCCEEDED", "")),  # one cancelled on its own
        (SWEEP, {"SUCCEEDED": 1, "FAILED": 1, "EARLY_STOPPED": 1}, False, ("SUCCEEDED", "")),
        (SWEEP, {"FAILED": 3}, False, ("FAILED", "GROUP")),  # no max_failures: fails when every trial failed
        (SWEEP, {"FAILED": 2, "PENDING": 1}, False, ("PENDING", "")),
    ],
)
def test_a_group_s_state_from_its_children(group, counts, cancel, expected):
    assert derive_group_state(group, counts, cancel_requested=cancel) == expected
