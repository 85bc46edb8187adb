"""The named sets of task and job states (scheduling/states.py) fit together."""

from scheduling.states import (
    ENDED,
    JOB_FINISHED,
    NOT_STARTED,
    ON_NODE,
    QUEUED_OR_RUNNING,
    UNSUCCESSFUL,
)
from scheduling.states import (
    TaskState as S,
)


def test_every_state_is_queued_on_a_node_or_ended_and_only_one():
    assert sorted((S.PENDING, *ON_NODE, *ENDED)) == sorted(S.values)


def test_the_sets_are_named_for_what_they_hold():
    assert set(QUEUED_OR_RUNNING) == {S.PENDING, S.ASSIGNED, S.RUNNING}
    assert set(NOT_STARTED) == {S.PENDING, S.ASSIGNED}
    # A trial stopped early and a pipeline step skipped ended on purpose: no verdict is due,
    # nothing retries them.
    assert set(UNSUCCESSFUL) == set(ENDED) - {S.SUCCEEDED, S.EARLY_STOPPED, S.SKIPPED}
    assert set(JOB_FINISHED) == set(ENDED) - {S.PREEMPTED}
