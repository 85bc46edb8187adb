"""What an attempt that ended without success means: the user's cancel, a final failure, or a
new attempt, and which budget that attempt spends.

`settle()` takes the first of six rules that applies:
1. The user cancelled (asked to, or a rank ended CANCELLED) -> cancel: their word beats any
   retry.
2. A rank ran past `max_runtime_hours` -> fail (TIMEOUT): a new attempt would run as long.
3. A rank failed by itself (APP: an exit nobody asked for) -> retry after an exponential
   back-off, spending one of `max_retries`; none left -> fail (APP).
4. A user asked for the attempt to be requeued (a rank stopped REQUEUED) and no rank was lost
   on its own -> requeue, spending and counting nothing, whatever the restart policy says.
5. The scheduler stopped the attempt to make room (a rank PREEMPTED, or DRAIN: a drain or a
   spot reclaim) and no rank was lost on its own -> requeue, counting a preemption and
   spending nothing (seed 000: preemptions do not use up the retry budget); only
   `on_preemption: fail` fails the job.
6. Anything else is the infrastructure's (a node lost, an agent that lost its task) ->
   restart, spending one of `max_restarts`; none left, or `on_node_failure: fail` -> fail
   (INFRA).

Pure, like the scheduler: no Django, no I/O, no clock. A verdict's back-off is a delay that
the caller adds to its own `now`. The leader (scheduling/leader/reconcile.py) and the simulator
(scheduling/sim/engine.py) both decide here.
"""

from dataclasses import dataclass
from enum import StrEnum


class TaskEnd(StrEnum):
    """How a rank's attempt ended (the store's task states of the same names)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"


class FailureClass(StrEnum):
    """Whose fault an ended rank was (the store's failure classes of the same names)."""

    INFRA = "INFRA"
    APP = "APP"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    EARLY_STOPPED = "EARLY_STOPPED"


class StopReason(StrEnum):
    """Why the scheduler asked a rank to stop before it ended (the store's stop reasons)."""

    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    DRAIN = "DRAIN"
    PEER_FAILED = "PEER_FAILED"
    REQUEUED = "REQUEUED"  # a user asked for a new attempt (POST /jobs/{id}/requeue)
    EARLY_STOPPED = "EARLY_STOPPED"  # a sweep's rule stopped the trial (it ends EARLY_STOPPED)


class RestartMode(StrEnum):
    RESUME = "resume_from_checkpoint"
    RESTART = "restart"
    FAIL = "fail"


class Action(StrEnum):
    CANCEL = "cancel"
    FAIL = "fail"
    REQUEUE = "requeue"
    EARLY_STOP = "early_stop"  # a sweep's trial its rule stopped ends EARLY_STOPPED


class Counter(StrEnum):
    """The job's counter a requeue raises (named as the job's columns)."""

    RETRIES = "retries_used"
    RESTARTS = "restarts_used"
    PREEMPTIONS = "preemptions"  # counted, never a budget


class SettleCode(StrEnum):
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    RETRY = "RETRY"
    NO_RETRIES_LEFT = "NO_RETRIES_LEFT"
    PREEMPTED = "PREEMPTED"
    RESTART = "RESTART"
    NO_RESTARTS_LEFT = "NO_RESTARTS_LEFT"
    POLICY_FAILS = "POLICY_FAILS"  # the restart policy says fail
    REQUEUED = "REQUEUED"  # a user asked for it
    EARLY_STOPPED = "EARLY_STOPPED"  # its sweep's rule stopped it


# Stops that make room for other work: they end an attempt without anyone's fault.
MAKING_ROOM = frozenset({StopReason.PREEMPTED, StopReason.DRAIN})
# Stops asked for because of something else (another rank, the user, the clock): a rank
# with one of these was not lost on its own even if its node went with it.
STOPPED_FOR_A_REASON = MAKING_ROOM | {
    StopReason.PEER_FAILED,
    StopReason.CANCELLED,
    StopReason.TIMEOUT,
    StopReason.REQUEUED,
    StopReason.EARLY_STOPPED,
}


# Why a rank was lost that was not the job's doing, when known: its agent's exit cause
# (agents/protocol.py's EXIT_CAUSES), or its node's loss. A verdict said "lost to an
# infrastructure failure" alone, and an image job on nodes without a container runtime spent
# its restarts one after the other saying only that (QA).
LOST_BECAUSE = {
    "no_container_runtime": "was not started: it names an image and its node has no container runtime",
    "no_task_user": "was not started: its node agent had no user to run it as",
    "lease_expired": "was stopped by its node agent, which could not renew its lease",
    "lost": "was lost when its node agent restarted",
    "node_lost": "was lost with its node",
}
# The causes of a rank its agent never started: no work ran, and no node was lost.
NOT_STARTED = frozenset({"no_container_runtime", "no_task_user"})


@dataclass(frozen=True, slots=True)
class EndedTask:
    """One rank as its attempt ended."""

    rank: int
    state: TaskEnd
    failure_class: str = ""
    stop_reason: str = ""
    exit_code: int | None = None
    exit_signal: str = ""
    cause: str = ""  # a key of LOST_BECAUSE, or ""

    @property
    def unsuccessful(self) -> bool:
        return self.state in (TaskEnd.FAILED, TaskEnd.PREEMPTED)

    def how(self) -> str:
        return f"exit code {self.exit_code}" if self.exit_code is not None else f"signal {self.exit_signal}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the attempt ended: each rank's end, and whether the user has asked to cancel."""

    tasks: tuple[EndedTask, ...]
    cancel_requested: bool = False
    stop_cause: str = ""  # a stop to make room: its request's cause (stop_requests.CAUSES), if known


@dataclass(frozen=True, slots=True)
class Attempt:
    """The job's counters before this verdict."""

    retries_used: int = 0
    restarts_used: int = 0
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """The job's restart policy, and the cluster's back-off settings."""

    max_retries: int = 2
    max_restarts: int = 20
    on_preemption: RestartMode = RestartMode.RESUME
    on_node_failure: RestartMode = RestartMode.RESUME
    checkpointing: bool = False
    max_runtime_hours: float = 168.0
    backoff_base_s: float = 30.0
    backoff_max_s: float = 3600.0

    def backoff_s(self, retries_used: int) -> float:
        """Exponential back-off before retry n+1: base x 2^n, capped."""
        return min(self.backoff_base_s * 2**retries_used, self.backoff_max_s)

    def resuming(self, mode: RestartMode) -> bool:
        """Whether a requeue under `mode` resumes from the job's checkpoint (MLQ_RESUME=1)."""
        return mode == RestartMode.RESUME and self.checkpointing

    def resumes(self, mode: RestartMode) -> str:
        return "resuming from its last checkpoint, if any" if self.resuming(mode) else "from the start"


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    code: SettleCode
    message: str  # shown to the job's owner as is
    failure_class: str = ""  # the job's final failure class (fail, cancel)
    counter: Counter | None = None  # what a requeue raises, to `count` (None: a user's requeue raises nothing)
    count: int = 0
    backoff_s: float = 0.0  # a requeue is not placed again before this many seconds
    resume: bool = False  # a requeue's next attempt resumes from the checkpoint (its message says so)


def settle(attempt: Attempt, outcome: Outcome, policy: RestartPolicy) -> Verdict:
    ended = sorted((t for t in outcome.tasks if t.unsuccessful), key=lambda t: t.rank)
    if outcome.cancel_requested or any(t.state == TaskEnd.CANCELLED for t in outcome.tasks):
        return Verdict(Action.CANCEL, SettleCode.CANCELLED, "cancelled", FailureClass.CANCELLED)
    # What the scheduler stopped it for stands when its node went during the grace period (the
    # ranks then end INFRA, their stop reason kept): a job past its time is not restarted (QA).
    if any(t.failure_class == FailureClass.TIMEOUT or t.stop_reason == StopReason.TIMEOUT for t in ended):
        return Verdict(
            Action.FAIL,
            SettleCode.TIMEOUT,
            f"ran past max_runtime_hours ({policy.max_runtime_hours:g} h)",
            FailureClass.TIMEOUT,
        )
    if any(t.stop_reason == StopReason.EARLY_STOPPED for t in ended):
        message = "stopped early by its sweep's rule (its node was lost while it stopped)"
        return Verdict(Action.EARLY_STOP, SettleCode.EARLY_STOPPED, message, FailureClass.EARLY_STOPPED)
    failed = next((t for t in ended if t.failure_class == FailureClass.APP), None)
    if failed is not None:
        return _after_app_failure(failed, attempt, policy)
    if _stopped_for(ended, {StopReason.REQUEUED}):
        return Verdict(
            Action.REQUEUE,
            SettleCode.REQUEUED,
            f"requeued on request, {policy.resumes(policy.on_preemption)} (retries and restarts not spent)",
            resume=policy.resuming(policy.on_preemption),
        )
    if _stopped_for(ended, MAKING_ROOM):
        return _after_preemption(ended, attempt, policy, outcome.stop_cause)
    return _after_infra_failure(ended, attempt, policy)


def _after_app_failure(failed: EndedTask, attempt: Attempt, policy: RestartPolicy) -> Verdict:
    what = f"rank {failed.rank} failed ({failed.how()})"
    if attempt.retries_used >= policy.max_retries:
        return Verdict(
            Action.FAIL,
            SettleCode.NO_RETRIES_LEFT,
            f"{what}; no retries left ({policy.max_retries} allowed)",
            FailureClass.APP,
        )
    delay, retry = policy.backoff_s(attempt.retries_used), attempt.retries_used + 1
    return Verdict(
        Action.REQUEUE,
        SettleCode.RETRY,
        f"{what}; retry {retry} of {policy.max_retries} after {delay:.0f} s back-off",
        counter=Counter.RETRIES,
        count=retry,
        backoff_s=delay,
    )


def _stopped_for(ended: list[EndedTask], reasons) -> bool:
    """A rank was stopped for one of `reasons` (to make room, or at a user's request), and no
    rank was lost on its own (that would be a failure, whatever else was going on)."""
    lost_on_its_own = any(
        t.failure_class == FailureClass.INFRA and t.stop_reason not in STOPPED_FOR_A_REASON for t in ended
    )
    return not lost_on_its_own and any(t.stop_reason in reasons for t in ended)


# How a stop to make room is said, by its request's cause: a job its node's fault stopped read
# "drained off its node", and one reclaimed "preempted", as if for a higher priority (QA).
STOPPED_FOR = {
    "PREEMPTED": "preempted",
    "RECLAIM": "reclaimed: it ran on capacity another team is guaranteed",
    "DRAIN": "drained off its node",
    "NODE_HEALTH": "stopped for a fault on its node (a GPU error or a failed health check)",
}


def _after_preemption(ended: list[EndedTask], attempt: Attempt, policy: RestartPolicy, cause: str = "") -> Verdict:
    what = STOPPED_FOR.get(cause) or (
        "preempted" if any(t.stop_reason == StopReason.PREEMPTED for t in ended) else "drained off its node"
    )
    if policy.on_preemption == RestartMode.FAIL:
        return Verdict(
            Action.FAIL, SettleCode.POLICY_FAILS, f"{what}, and its restart policy says fail", FailureClass.INFRA
        )
    count = attempt.preemptions + 1
    return Verdict(
        Action.REQUEUE,
        SettleCode.PREEMPTED,
        f"{what}; requeued, {policy.resumes(policy.on_preemption)} "
        f"(preemption {count}; restarts and retries not spent)",
        counter=Counter.PREEMPTIONS,
        count=count,
        resume=policy.resuming(policy.on_preemption),
    )


def _after_infra_failure(ended: list[EndedTask], attempt: Attempt, policy: RestartPolicy) -> Verdict:
    known = next((t for t in ended if t.cause in LOST_BECAUSE and not t.stop_reason), None)
    what = "lost to an infrastructure failure"
    if known is not None:
        what += f" (rank {known.rank} {LOST_BECAUSE[known.cause]})"
    if policy.on_node_failure == RestartMode.FAIL:
        return Verdict(
            Action.FAIL, SettleCode.POLICY_FAILS, f"{what}, and its restart policy says fail", FailureClass.INFRA
        )
    if attempt.restarts_used >= policy.max_restarts:
        return Verdict(
            Action.FAIL,
            SettleCode.NO_RESTARTS_LEFT,
            f"{what}; no restarts left ({policy.max_restarts} allowed)",
            FailureClass.INFRA,
        )
    count = attempt.restarts_used + 1
    return Verdict(
        Action.REQUEUE,
        SettleCode.RESTART,
        f"{what}; restart {count} of {policy.max_restarts}, {policy.resumes(policy.on_node_failure)} "
        "(retries not spent)",
        counter=Counter.RESTARTS,
        count=count,
        resume=policy.resuming(policy.on_node_failure),
    )
