"""A group's end message counts its members in the right number."""

from scheduling.group_state import _group_message
from scheduling.models import GroupKind


def test_one_failed_element_is_singular():
    group = {"kind": GroupKind.ARRAY, "count": 4, "max_failures": 0}
    assert _group_message(group, {"FAILED": 1, "CANCELLED": 3}, "FAILED") == (
        "1 element failed, more than max_failures (0); the rest are cancelled (3 cancelled, 1 failed)"
    )


def test_several_are_plural_and_one_pipeline_step_singular():
    sweep = {"kind": GroupKind.SWEEP, "count": 1, "max_failures": None}
    assert _group_message(sweep, {"SUCCEEDED": 1}, "SUCCEEDED") == "1 trial: 1 succeeded"
    pipeline = {"kind": GroupKind.PIPELINE, "count": 1, "max_failures": None}
    assert _group_message(pipeline, {"FAILED": 1}, "FAILED") == "1 of 1 step failed (1 failed)"
    array = {"kind": GroupKind.ARRAY, "count": 3, "max_failures": None}
    assert _group_message(array, {"FAILED": 3}, "FAILED").startswith("3 elements failed, every one;")
