"""The settle verdict, table-driven: each way an attempt ends, the action, the counter it
raises, the back-off, and the exact message its owner reads."""

import pytest

from scheduling.core.settle import (
    Action,
    Attempt,
    Counter,
    EndedTask,
    Outcome,
    RestartMode,
    RestartPolicy,
    SettleCode,
    TaskEnd,
    Verdict,
    settle,
)

CHECKPOINTING = RestartPolicy(checkpointing=True)


def rank(
    rank_: int,
    state: str = "FAILED",
    failure_class: str = "",
    stop_reason: str = "",
    *,
    exit_code=None,
    signal: str = "",
    cause: str = "",
) -> EndedTask:
    return EndedTask(rank_, TaskEnd(state), failure_class, stop_reason, exit_code, signal, cause)


def app(rank_: int = 0, exit_code: int = 3) -> EndedTask:
    return rank(rank_, "FAILED", "APP", exit_code=exit_code)


def preempted(rank_: int = 0, stop_reason: str = "PREEMPTED") -> EndedTask:
    return rank(rank_, "PREEMPTED", "INFRA", stop_reason, exit_code=143)


def lost(rank_: int = 0, cause: str = "") -> EndedTask:
    return rank(rank_, "FAILED", "INFRA", signal="SIGKILL", cause=cause)


def peer_stopped(rank_: int) -> EndedTask:
    return rank(rank_, "FAILED", "INFRA", "PEER_FAILED", signal="SIGTERM")


CASES = [
    (
        "a cancel beats a failure",
        Outcome((app(0), rank(1, "CANCELLED", "CANCELLED", "CANCELLED")), cancel_requested=True),
        Attempt(),
        CHECKPOINTING,
        Verdict(Action.CANCEL, SettleCode.CANCELLED, "cancelled", "CANCELLED"),
    ),
    (
        "a rank that ended CANCELLED cancels the gang",
        Outcome((preempted(0), rank(1, "CANCELLED", "CANCELLED", "CANCELLED"))),
        Attempt(),
        CHECKPOINTING,
        Verdict(Action.CANCEL, SettleCode.CANCELLED, "cancelled", "CANCELLED"),
    ),
    (
        "a timeout fails at once, retries left or not",
        Outcome((rank(0, "FAILED", "TIMEOUT", "TIMEOUT", signal="SIGKILL"),)),
        Attempt(),
        RestartPolicy(max_runtime_hours=1.5),
        Verdict(Action.FAIL, SettleCode.TIMEOUT, "ran past max_runtime_hours (1.5 h)", "TIMEOUT"),
    ),
    (
        "a timeout stands when the node is lost in the grace period (QA: it was restarted)",
        Outcome((rank(0, "FAILED", "INFRA", "TIMEOUT", signal="SIGKILL"),)),
        Attempt(),
        RestartPolicy(max_runtime_hours=0.01),
        Verdict(Action.FAIL, SettleCode.TIMEOUT, "ran past max_runtime_hours (0.01 h)", "TIMEOUT"),
    ),
    (
        "a trial stopped early stays stopped when its node is lost in the grace period",
        Outcome((rank(0, "FAILED", "INFRA", "EARLY_STOPPED", signal="SIGKILL"),)),
        Attempt(),
        CHECKPOINTING,
        Verdict(
            Action.EARLY_STOP,
            SettleCode.EARLY_STOPPED,
            "stopped early by its sweep's rule (its node was lost while it stopped)",
            "EARLY_STOPPED",
        ),
    ),
    (
        "the first application failure retries after the base back-off",
        Outcome((app(0, exit_code=3),)),
        Attempt(),
        CHECKPOINTING,
        Verdict(
            Action.REQUEUE,
            SettleCode.RETRY,
            "rank 0 failed (exit code 3); retry 1 of 2 after 30 s back-off",
            counter=Counter.RETRIES,
            count=1,
            backoff_s=30.0,
        ),
    ),
    (
        "the back-off doubles with each retry spent",
        Outcome((rank(0, "SUCCEEDED", exit_code=0), app(1, exit_code=1), peer_stopped(2))),
        Attempt(retries_used=2),
        RestartPolicy(max_retries=5),
        Verdict(
            Action.REQUEUE,
            SettleCode.RETRY,
            "rank 1 failed (exit code 1); retry 3 of 5 after 120 s back-off",
            counter=Counter.RETRIES,
            count=3,
            backoff_s=120.0,
        ),
    ),
    (
        "and stops at its cap",
        Outcome((rank(0, "FAILED", "APP", signal="SIGSEGV"),)),
        Attempt(retries_used=9),
        RestartPolicy(max_retries=10, backoff_max_s=3600),
        Verdict(
            Action.REQUEUE,
            SettleCode.RETRY,
            "rank 0 failed (signal SIGSEGV); retry 10 of 10 after 3600 s back-off",
            counter=Counter.RETRIES,
            count=10,
            backoff_s=3600.0,
        ),
    ),
    (
        "no retries left fails as APP",
        Outcome((app(0),)),
        Attempt(retries_used=2, restarts_used=0),
        CHECKPOINTING,
        Verdict(
            Action.FAIL, SettleCode.NO_RETRIES_LEFT, "rank 0 failed (exit code 3); no retries left (2 allowed)", "APP"
        ),
    ),
    (
        "an application failure during a preemption is still the application's",
        Outcome((preempted(0), app(1))),
        Attempt(),
        CHECKPOINTING,
        Verdict(
            Action.REQUEUE,
            SettleCode.RETRY,
            "rank 1 failed (exit code 3); retry 1 of 2 after 30 s back-off",
            counter=Counter.RETRIES,
            count=1,
            backoff_s=30.0,
        ),
    ),
    (
        "a preemption counts apart and spends nothing",
        Outcome((preempted(0), preempted(1))),
        Attempt(retries_used=2, restarts_used=20, preemptions=24),
        RestartPolicy(max_retries=2, max_restarts=20, checkpointing=True),
        Verdict(
            Action.REQUEUE,
            SettleCode.PREEMPTED,
            "preempted; requeued, resuming from its last checkpoint, if any "
            "(preemption 25; restarts and retries not spent)",
            counter=Counter.PREEMPTIONS,
            count=25,
            resume=True,
        ),
    ),
    (
        "a drain or a spot reclaim is a preemption too, with its peers stopped",
        Outcome((rank(0, "FAILED", "INFRA", "DRAIN", signal="SIGKILL"), peer_stopped(1))),
        Attempt(),
        RestartPolicy(max_restarts=0, on_preemption=RestartMode.RESTART, checkpointing=True),
        Verdict(
            Action.REQUEUE,
            SettleCode.PREEMPTED,
            "drained off its node; requeued, from the start (preemption 1; restarts and retries not spent)",
            counter=Counter.PREEMPTIONS,
            count=1,
        ),
    ),
    (
        "a user's requeue spends and counts nothing, whatever the restart policy says",
        Outcome((preempted(0, "REQUEUED"), preempted(1, "REQUEUED"))),
        Attempt(retries_used=2, restarts_used=20, preemptions=3),
        RestartPolicy(max_retries=2, max_restarts=20, on_preemption=RestartMode.FAIL),
        Verdict(
            Action.REQUEUE, SettleCode.REQUEUED, "requeued on request, from the start (retries and restarts not spent)"
        ),
    ),
    (
        "a requeue with a rank lost on its own is that loss",
        Outcome((preempted(0, "REQUEUED"), lost(1))),
        Attempt(),
        RestartPolicy(max_restarts=0),
        Verdict(
            Action.FAIL,
            SettleCode.NO_RESTARTS_LEFT,
            "lost to an infrastructure failure; no restarts left (0 allowed)",
            "INFRA",
        ),
    ),
    (
        "on_preemption: fail still fails",
        Outcome((preempted(0),)),
        Attempt(),
        RestartPolicy(on_preemption=RestartMode.FAIL),
        Verdict(Action.FAIL, SettleCode.POLICY_FAILS, "preempted, and its restart policy says fail", "INFRA"),
    ),
    (
        "a lost node spends a restart",
        Outcome((lost(0), peer_stopped(1))),
        Attempt(restarts_used=3, preemptions=7),
        CHECKPOINTING,
        Verdict(
            Action.REQUEUE,
            SettleCode.RESTART,
            "lost to an infrastructure failure; restart 4 of 20, resuming from its last checkpoint, if any "
            "(retries not spent)",
            counter=Counter.RESTARTS,
            count=4,
            resume=True,
        ),
    ),
    (
        "a rank lost on its own while another was preempted is a failure",
        Outcome((preempted(0), lost(1))),
        Attempt(),
        RestartPolicy(),
        Verdict(
            Action.REQUEUE,
            SettleCode.RESTART,
            "lost to an infrastructure failure; restart 1 of 20, from the start (retries not spent)",
            counter=Counter.RESTARTS,
            count=1,
        ),
    ),
    (
        "a rank being preempted when its node was lost stays a preemption",
        Outcome((rank(0, "FAILED", "INFRA", "PREEMPTED", signal="SIGKILL"),)),
        Attempt(restarts_used=20),
        CHECKPOINTING,
        Verdict(
            Action.REQUEUE,
            SettleCode.PREEMPTED,
            "preempted; requeued, resuming from its last checkpoint, if any "
            "(preemption 1; restarts and retries not spent)",
            counter=Counter.PREEMPTIONS,
            count=1,
            resume=True,
        ),
    ),
    (
        "no restarts left fails as INFRA",
        Outcome((lost(0),)),
        Attempt(restarts_used=20),
        CHECKPOINTING,
        Verdict(
            Action.FAIL,
            SettleCode.NO_RESTARTS_LEFT,
            "lost to an infrastructure failure; no restarts left (20 allowed)",
            "INFRA",
        ),
    ),
    (
        "a stop to make room says what it was for: a node's fault",
        Outcome((preempted(0, "DRAIN"),), stop_cause="NODE_HEALTH"),
        Attempt(),
        RestartPolicy(),
        Verdict(
            Action.REQUEUE,
            SettleCode.PREEMPTED,
            "stopped for a fault on its node (a GPU error or a failed health check); requeued, from the start "
            "(preemption 1; restarts and retries not spent)",
            counter=Counter.PREEMPTIONS,
            count=1,
        ),
    ),
    (
        "a stop to make room says what it was for: a reclaim",
        Outcome((preempted(0),), stop_cause="RECLAIM"),
        Attempt(),
        RestartPolicy(on_preemption=RestartMode.FAIL),
        Verdict(
            Action.FAIL,
            SettleCode.POLICY_FAILS,
            "reclaimed: it ran on capacity another team is guaranteed, and its restart policy says fail",
            "INFRA",
        ),
    ),
    (
        "a known cause is named: an image on a node with no container runtime",
        Outcome((rank(0, "FAILED", "INFRA", exit_code=127, cause="no_container_runtime"),)),
        Attempt(restarts_used=20),
        RestartPolicy(),
        Verdict(
            Action.FAIL,
            SettleCode.NO_RESTARTS_LEFT,
            "lost to an infrastructure failure (rank 0 was not started: it names an image and its node has no "
            "container runtime); no restarts left (20 allowed)",
            "INFRA",
        ),
    ),
    (
        "a known cause is named: the node lost, not its stopped peer's",
        Outcome((peer_stopped(0), lost(1, cause="node_lost"))),
        Attempt(),
        RestartPolicy(),
        Verdict(
            Action.REQUEUE,
            SettleCode.RESTART,
            "lost to an infrastructure failure (rank 1 was lost with its node); restart 1 of 20, from the start "
            "(retries not spent)",
            counter=Counter.RESTARTS,
            count=1,
        ),
    ),
    (
        "on_node_failure: fail fails at the first loss",
        Outcome((lost(0),)),
        Attempt(),
        RestartPolicy(on_node_failure=RestartMode.FAIL),
        Verdict(
            Action.FAIL,
            SettleCode.POLICY_FAILS,
            "lost to an infrastructure failure, and its restart policy says fail",
            "INFRA",
        ),
    ),
]


@pytest.mark.parametrize(
    ("outcome", "attempt", "policy", "verdict"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_settle(outcome, attempt, policy, verdict):
    assert settle(attempt, outcome, policy) == verdict


def test_preemptions_never_run_out():
    attempt, policy = Attempt(), RestartPolicy(max_restarts=0, max_retries=0)
    for count in range(1, 101):
        verdict = settle(attempt, Outcome((preempted(0),)), policy)
        assert (verdict.action, verdict.counter, verdict.count) == (Action.REQUEUE, Counter.PREEMPTIONS, count)
        attempt = Attempt(preemptions=verdict.count)


def test_the_core_speaks_the_stores_vocabulary():
    """The store's states, classes, stop reasons, modes and counter columns are the core's."""
    from scheduling import models
    from scheduling.core import settle as core

    assert {e.value for e in core.TaskEnd} <= set(models.TaskState.values)
    assert {e.value for e in core.FailureClass} <= set(models.FailureClass.values)
    assert {e.value for e in core.StopReason} == set(models.StopReason.values)
    assert {e.value for e in core.RestartMode} == set(models.RestartMode.values)
    assert {e.value for e in core.Counter} <= {f.name for f in models.Job._meta.get_fields()}


def test_every_cause_an_agent_reports_is_named():
    from agents.protocol import EXIT_CAUSES
    from scheduling.core.settle import LOST_BECAUSE
    from scheduling.reports import CAUSES

    assert set(LOST_BECAUSE) == set(EXIT_CAUSES) - {""} | {"node_lost"} == set(CAUSES) | {"node_lost"}
