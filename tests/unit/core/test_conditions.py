"""Dependency conditions (scheduling/core/conditions.py): each job's edges against how their jobs
ended, the verdict and the exact sentences the pending reason and the cancel give."""

import pytest

from scheduling.core.conditions import Condition, Edge, Status, evaluate, never_message, waiting_message

S, F, A = Condition.SUCCESS, Condition.FAILURE, Condition.ANY


@pytest.mark.parametrize(
    ("edges", "status", "waiting", "broken"),
    [
        # success: released on SUCCEEDED, never once ended otherwise
        ([Edge(1, S, "SUCCEEDED")], Status.MET, (), ()),
        ([Edge(1, S)], Status.WAITING, (Edge(1, S),), ()),
        ([Edge(1, S, "FAILED")], Status.NEVER, (), (Edge(1, S, "FAILED"),)),
        ([Edge(1, S, "CANCELLED")], Status.NEVER, (), (Edge(1, S, "CANCELLED"),)),
        ([Edge(1, S, "SKIPPED")], Status.NEVER, (), (Edge(1, S, "SKIPPED"),)),
        # failure: one edge, it failed; several, all ended and one failed
        ([Edge(1, F, "FAILED")], Status.MET, (), ()),
        ([Edge(1, F, "SUCCEEDED")], Status.NEVER, (), (Edge(1, F, "SUCCEEDED"),)),
        ([Edge(1, F, "CANCELLED")], Status.NEVER, (), (Edge(1, F, "CANCELLED"),)),
        ([Edge(1, F, "FAILED"), Edge(2, F)], Status.WAITING, (Edge(2, A),), ()),
        ([Edge(1, F, "FAILED"), Edge(2, F, "SUCCEEDED")], Status.MET, (), ()),
        ([Edge(1, F, "SUCCEEDED"), Edge(2, F)], Status.WAITING, (Edge(2, F),), ()),
        (
            [Edge(1, F, "SUCCEEDED"), Edge(2, F, "SKIPPED")],
            Status.NEVER,
            (),
            (Edge(1, F, "SUCCEEDED"), Edge(2, F, "SKIPPED")),
        ),
        # any: released on any end
        ([Edge(1, A, "FAILED")], Status.MET, (), ()),
        ([Edge(1, A, "SKIPPED")], Status.MET, (), ()),
        ([Edge(1, A)], Status.WAITING, (Edge(1, A),), ()),
        # together: a broken success edge decides at once, the lowest id first
        ([Edge(3, S, "FAILED"), Edge(2, S, "CANCELLED"), Edge(1, A)], Status.NEVER, (), (Edge(2, S, "CANCELLED"),)),
        ([Edge(2, A, "SUCCEEDED"), Edge(1, S)], Status.WAITING, (Edge(1, S),), ()),
        ([], Status.MET, (), ()),
    ],
)
def test_the_verdict_of_a_jobs_edges(edges, status, waiting, broken):
    verdict = evaluate(edges)
    assert (verdict.status, verdict.waiting, verdict.broken) == (status, waiting, broken)


@pytest.mark.parametrize(
    ("waiting", "message"),
    [
        ((Edge(7, S),), "waiting for job 7 to succeed"),
        ((Edge(7, S), Edge(9, S)), "waiting for jobs 7, 9 to succeed"),
        ((Edge(13, F),), "waiting for job 13 to fail"),
        ((Edge(13, F), Edge(14, F)), "waiting for jobs 13, 14 to end with at least one failure"),
        ((Edge(12, S), Edge(13, F), Edge(14, A)), "waiting for job 12 to succeed and job 13 to fail and job 14 to end"),
    ],
)
def test_the_pending_reason_names_each_dependency_and_its_condition(waiting, message):
    assert waiting_message(waiting) == message


@pytest.mark.parametrize(
    ("broken", "kwargs", "message"),
    [
        ((Edge(13, F, "SUCCEEDED"),), {}, "dependency 13 ended SUCCEEDED; this job ran only on its failure"),
        ((Edge(12, S, "FAILED"),), {}, "dependency 12 ended FAILED; this job ran only on its success"),
        (
            (Edge(13, F, "SUCCEEDED"), Edge(14, F, "CANCELLED")),
            {},
            "dependency 13 ended SUCCEEDED, dependency 14 ended CANCELLED; this job ran only on a failure among them",
        ),
        (
            (Edge(5, F, "SUCCEEDED"),),
            {"label": lambda job: f"step train (job {job})", "noun": "step"},
            "step train (job 5) ended SUCCEEDED; this step ran only on its failure",
        ),
    ],
)
def test_the_reason_a_job_never_runs_names_the_dependency_and_how_it_ended(broken, kwargs, message):
    assert never_message(broken, **kwargs) == message
