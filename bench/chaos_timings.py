"""The fault campaign's clocks: the long campaign's (production's shape, minutes-long outages)
and the short one the test suite runs (every interval scaled down so that each fault kind
runs once in about two and a half minutes).

The short bound is 12 s, not less: on a loaded two-core machine a SIGKILLed web process takes
up to 8 s to answer again, and an outage must end, with a heartbeat on either side of it, well
inside the bound for "no task killed by an outage shorter than the bound" to be a fair test."""

from dataclasses import dataclass

SCHEDULER_LEASE_S = 4.0  # `run_scheduler --lease 4 --renew 1`: a standby takes over in seconds
SCHEDULER_RENEW_S = 1.0
SCHEDULER_TICK_S = 1.0  # run_scheduler's default: one pass a second when nothing happens
TICK_S = 0.2  # how often the campaign's jobs note in the ledger that they are alive


@dataclass(frozen=True)
class Timings:
    bound_s: float  # MLQ_OUTAGE_BOUND_S: the agents' lease
    margin_s: float  # MLQ_LOST_MARGIN_S
    heartbeat_s: float  # MLQ_HEARTBEAT_INTERVAL_S
    # How long Postgres, Redis or the web tier stay down, until the API answers again: well under
    # the bound, which also has to cover the heartbeat before the outage and the one after it.
    outage_s: tuple[float, float]
    gap_s: tuple[float, float]  # quiet time between two faults: at least two heartbeats
    job_s: tuple[float, float]  # how long a job runs when nothing stops it
    grace_s: int  # the jobs' grace_period_seconds
    submit_every_s: float
    settle_s: float  # at most this long for the last jobs to finish at the end
    failpoint_wait_s: float  # for the leader to reach the named failpoint, before a plain SIGKILL
    window_wait_s: float  # for a preemption's grace window to open, to kill Celery inside it

    @property
    def agent_fault_s(self) -> float:
        """Agent faults last past the lease and the margin: the node must be called LOST and its
        tasks requeued while the agent is still cut off, stopped or dead."""
        return self.bound_s + self.margin_s + self.heartbeat_s + SCHEDULER_TICK_S + 0.5

    @property
    def leader_stop_s(self) -> float:
        """A leader frozen past its lease, long enough for the standby to take over."""
        return SCHEDULER_LEASE_S * 2 + 1

    @property
    def stuck_after_s(self) -> float:
        """An assigned task not started, or a task not stopped past its SIGKILL deadline, after
        this long (a few heartbeats and passes) goes nowhere by itself."""
        return 3 * self.heartbeat_s + 2 * SCHEDULER_TICK_S + 5

    @property
    def stop_allowance_s(self) -> float:
        """How late past its grace a preemption's victim may stop: one scheduler pass (the sweep
        that escalates to SIGKILL) and one heartbeat (the agent hearing of it), plus the ledger's
        own tick and the agent's poll."""
        return SCHEDULER_TICK_S + self.heartbeat_s + 1.0


SHORT = Timings(
    bound_s=12,
    margin_s=5,
    heartbeat_s=1,
    outage_s=(2, 5),
    gap_s=(1.5, 2.5),
    job_s=(3, 8),
    grace_s=3,
    submit_every_s=0.8,
    settle_s=45,
    failpoint_wait_s=8,
    window_wait_s=15,
)


def long_timings(bound_s: float) -> Timings:
    """Outages of 30-120 s (the issue's campaign), so the bound must be above 120 s plus a
    heartbeat and a client timeout: 150 s by default (RELIABILITY.md)."""
    return Timings(
        bound_s=bound_s,
        margin_s=30,
        heartbeat_s=5,
        outage_s=(30, 120),
        gap_s=(10, 20),
        job_s=(30, 150),
        grace_s=15,
        submit_every_s=9,
        settle_s=300,
        failpoint_wait_s=30,
        window_wait_s=120,
    )
