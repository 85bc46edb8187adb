"""The declared lifecycle: which transitions exist and how a job's state follows its tasks."""

import pytest

from scheduling.lifecycle import TRANSITIONS, IllegalTransition, check_transition, derive_job_state
from scheduling.models import TaskState as S


@pytest.mark.parametrize(
    "states, job_state",
    [
        ([S.PENDING] * 8, S.PENDING),
        ([S.ASSIGNED, S.PENDING], S.ASSIGNED),
        ([S.RUNNING, S.ASSIGNED], S.RUNNING),
        ([S.RUNNING, S.SUCCEEDED], S.RUNNING),
        ([S.SUCCEEDED] * 4, S.SUCCEEDED),
        ([S.SUCCEEDED, S.FAILED], S.FAILED),
        ([S.CANCELLED, S.FAILED, S.SUCCEEDED], S.CANCELLED),
        ([S.PREEMPTED, S.PREEMPTED], S.PREEMPTED),
        ([S.PREEMPTED, S.PENDING], S.PENDING),
    ],
)
def test_job_state_is_derived_from_tasks(states, job_state):
    assert derive_job_state(states) == job_state


@pytest.mark.parametrize(
    "from_state, to_state",
    [
        (S.PENDING, S.RUNNING),
        (S.PENDING, S.SUCCEEDED),
        (S.SUCCEEDED, S.RUNNING),
        (S.CANCELLED, S.PENDING),
        (S.RUNNING, S.ASSIGNED),
        (S.RUNNING, S.PENDING),
        (S.FAILED, S.RUNNING),
    ],
)
def test_illegal_transitions_raise_with_the_allowed_ones(from_state, to_state):
    with pytest.raises(IllegalTransition) as raised:
        check_transition(from_state, to_state)
    assert f"from {from_state} to {to_state}" in str(raised.value)


def test_every_state_is_declared_and_ended_states_lead_only_back_to_pending():
    assert set(TRANSITIONS) == set(S.values)
    assert TRANSITIONS[S.CANCELLED] == TRANSITIONS[S.EARLY_STOPPED] == frozenset()
    # A retry or a requeue always starts again from PENDING; a finished rank of a gang that
    # failed elsewhere restarts with it. A sweep's rule may stop a trial between two attempts.
    assert TRANSITIONS[S.FAILED] == {S.PENDING, S.CANCELLED, S.EARLY_STOPPED}
    assert TRANSITIONS[S.PREEMPTED] == {S.PENDING, S.CANCELLED, S.FAILED, S.EARLY_STOPPED}
    assert TRANSITIONS[S.SUCCEEDED] == {S.PENDING}
