"""The fault campaign's invariants (bench/chaos_checks.py) on evidence written by hand: each
one finds the violation it is for, with its exact sentence, and passes the case that looks
like it but is not one. A campaign whose checks could never fail would prove nothing."""

from bench.chaos_checks import (
    agent_fault_requeues,
    deposed_epoch_writes,
    jobs_lost,
    late_preemptions,
    outage_kills,
    overlapping_attempts,
)
from bench.chaos_evidence import Event, Evidence, JobRow, LeaseKill, Span, TaskRow
from bench.chaos_faults import Fault
from bench.chaos_timings import SHORT

NODE_A, NODE_B = "z1-r1-h100-01", "z1-r2-h100-01"


def span(job: int, attempt: int, first: float, last: float, *, rank: int = 0, **marks: float) -> Span:
    return Span(job, rank, attempt, first, last, {"start": first, **marks})


def event(
    id: int, job: int | None, kind: str, reason: str, at: float, *, node: str | None = None, message: str = "", **data
) -> Event:
    return Event(id, job, kind, reason, "", data, at, node, message)


def placed(id: int, job: int, at: float, node: str = NODE_A, epoch: int = 1) -> Event:
    return event(id, job, "TRANSITION", "PLACED", at, nodes=[node], epoch=epoch)


def task(
    job: int, *, epoch: int = 1, state: str = "RUNNING", assigned_at: float = 0.0, kill_at: float | None = None
) -> TaskRow:
    return TaskRow(job, 0, epoch, state, assigned_at, kill_at)


def evidence(
    *, spans=(), events=(), jobs=(), tasks=(), lease_epoch: int = 1, lease_kills=(), read_at: float = 1000.0
) -> Evidence:
    return Evidence(
        {(s.job, s.rank, s.attempt): s for s in spans},
        {j.id: j for j in jobs},
        [event(1, None, "LEADER", "LEADER", 0.0, epoch=1), *events],
        list(tasks),
        lease_epoch,
        list(lease_kills),
        read_at,
    )


def agent_fault(kind: str, start: float, end: float, *, node: str = NODE_A, tasks=()) -> Fault:
    return Fault(kind, "agent-a", start, end, nodes=[node], tasks=list(tasks))


def test_two_attempts_of_one_task_running_at_once_overlap():
    ev = evidence(
        spans=[span(1, 1, 10.0, 20.0), span(1, 2, 19.5, 30.0), span(2, 1, 10.0, 20.0), span(2, 2, 20.5, 30.0)]
    )
    assert overlapping_attempts(ev) == ["job 1 rank 0: attempt 1 ran 10.00-20.00, attempt 2 started at 19.50"]


def test_a_write_of_a_deposed_epoch_is_found_by_its_event_id():
    ev = evidence(
        events=[
            placed(5, 3, 10.0),
            event(6, None, "LEADER", "LEADER", 11.0, epoch=2),
            placed(7, 3, 10.5),
            placed(8, 4, 12.0, epoch=2),
            placed(9, 5, 13.0, epoch=7),
        ],
        tasks=[task(3, epoch=1), task(4, epoch=2), task(5, epoch=3)],
        lease_epoch=2,
    )
    assert deposed_epoch_writes(ev) == [
        "event 7 (PLACED, job 3) of epoch 1 was written after epoch 2 took the lead (event 6)",
        "event 9 (PLACED, job 5) carries epoch 7, never taken",
        "job 5 rank 0 carries epoch 3 (lease at 2)",
    ]


def test_a_job_is_lost_when_missing_failed_pending_without_a_reason_or_stuck():
    jobs = [
        JobRow(1, "chaos-1", "SUCCEEDED", "", "", 0),
        JobRow(2, "chaos-2", "PENDING", "QUOTA", "", 0),
        JobRow(3, "chaos-3", "FAILED", "", "INFRA", 21),
        JobRow(4, "chaos-4", "PENDING", "", "", 0),
        JobRow(5, "chaos-5", "RUNNING", "", "", 0),
        JobRow(7, "chaos-7", "ASSIGNED", "", "", 0),
        JobRow(8, "chaos-8", "ASSIGNED", "", "", 0),
        JobRow(9, "chaos-9", "RUNNING", "", "", 0),
    ]
    tasks = [
        task(5, kill_at=995.0),
        task(7, state="ASSIGNED", assigned_at=900.0),
        task(8, state="ASSIGNED", assigned_at=998.0),
        task(9, kill_at=950.0),
    ]
    ev = evidence(jobs=jobs, tasks=tasks, events=[event(9, 3, "TRANSITION", "INFRA", 50.0, message="no restarts left")])
    accepted = {f"chaos-{n}": n for n in range(1, 10)}  # no job 6 in the database
    assert jobs_lost(ev, accepted=accepted, timings=SHORT) == [
        "chaos-6 was accepted as job 6, which the database does not hold",
        "job 3 is FAILED (INFRA): INFRA no restarts left",
        "job 4 is PENDING with no reason",
        "job 7 rank 0 has been ASSIGNED for 100 s and never started",
        "job 9 rank 0 is still RUNNING 50 s after its SIGKILL was due",
    ]


def test_a_task_stopped_with_nobody_asking_is_an_outage_kill_unless_an_agent_fault_explains_it():
    spans = [
        span(1, 1, 10.0, 30.0, checkpoint=30.0),
        span(2, 1, 10.0, 30.0, checkpoint=30.0),
        span(3, 1, 10.0, 30.0, checkpoint=30.0),
        span(4, 1, 10.0, 40.0, end=40.0),
    ]
    events = [
        placed(2, 1, 9.0),
        placed(3, 2, 9.0, node=NODE_B),
        placed(4, 3, 9.0, node=NODE_B),
        event(5, 3, "STOP_REQUESTED", "PREEMPTED", 29.5, grace_s=3),
        placed(6, 4, 9.0, node=NODE_B),
    ]
    ev = evidence(spans=spans, events=events)
    assert outage_kills(ev, faults=[agent_fault("agent_cut", 20.0, 35.0, node=NODE_B)], timings=SHORT) == [
        "job 1 rank 0 attempt 1 was stopped at 30.00 with no stop requested and no agent fault on its nodes"
    ]


def test_a_lease_kill_or_a_lost_node_outside_an_agent_fault_is_an_outage_kill():
    ev = evidence(
        lease_kills=[
            LeaseKill(NODE_A, 100.0, "lease expired without renewal: SIGTERM to 1 task(s)"),
            LeaseKill(NODE_B, 100.0, "lease expired without renewal: SIGTERM to 2 task(s)"),
        ],
        events=[event(5, None, "NODE_STATE", "LOST", 104.0, node=NODE_A, message="SUSPECT -> LOST")],
    )
    faults = [agent_fault("agent_stop", 90.0, 99.0, node=NODE_B), Fault("postgres_down", "postgres", 95.0, 101.0)]
    assert outage_kills(ev, faults=faults, timings=SHORT) == [
        f"{NODE_A} at 100.00: lease expired without renewal: SIGTERM to 1 task(s)",
        f"event 5 at 104.00: LOST node {NODE_A}: SUSPECT -> LOST",
    ]


def test_an_agent_faults_tasks_must_be_requeued_and_only_once_dead():
    spans = [span(1, 1, 10.0, 29.0), span(2, 1, 10.0, 33.0), span(3, 1, 10.0, 25.0)]
    events = [event(5, 1, "RETRY", "RESTART", 30.0), event(6, 2, "RETRY", "RESTART", 31.0)]
    fault = agent_fault("agent_cut", 20.0, 40.0, tasks=[(1, 0, 1), (2, 0, 1), (3, 0, 1)])
    assert agent_fault_requeues(evidence(spans=spans, events=events), faults=[fault]) == [
        "job 2 rank 0 attempt 1 (agent_cut agent-a at 20.00): requeued at 31.00 while rank 0 attempt 1 ran until 33.00",
        "job 3 rank 0 attempt 1 (agent_cut agent-a at 20.00) was never requeued",
    ]


def test_a_killed_agents_tasks_must_die_with_it():
    spans = [
        span(1, 1, 10.0, 20.1),
        span(2, 1, 10.0, 24.0, end=24.0),
        span(3, 1, 19.9, 23.0),
        span(4, 1, 23.0, 30.0),
        span(5, 1, 10.0, 25.0, rank=0),
        span(5, 1, 10.0, 20.1, rank=1),
    ]
    gang = event(9, 5, "TRANSITION", "PLACED", 5.0, nodes=[NODE_A, NODE_B], epoch=1)
    ev = evidence(spans=spans, events=[placed(2 + job, job, 5.0) for job in (1, 2, 3, 4)] + [gang])
    # The agents' logs say which node started which rank: the gang's rank 0 ran on the other agent.
    ev.started_on = {(5, 0, 1): NODE_B, (5, 1, 1): NODE_A}
    agent_kill = Fault("agent_kill", "agent-a", 20.0, 22.0, nodes=[NODE_A])
    assert agent_fault_requeues(ev, faults=[agent_kill]) == [
        "job 2 rank 0 attempt 1 on agent-a ran until 24.00, 4.0 s after its agent was SIGKILLed at 20.00",
        "job 3 rank 0 attempt 1 on agent-a ran until 23.00, 3.0 s after its agent was SIGKILLed at 20.00",
    ]
    # A cut-off agent's tasks run on until its lease: that is no violation.
    assert agent_fault_requeues(ev, faults=[Fault("agent_cut", "agent-a", 20.0, 22.0, nodes=[NODE_A])]) == []


def test_a_preempted_task_must_get_sigterm_and_stop_within_its_grace_unless_the_signal_path_was_down():
    deadline = 100.0 + 3 + SHORT.stop_allowance_s
    spans = [
        span(1, 1, 50.0, deadline + 1, term=100.4),
        span(2, 1, 50.0, 101.0),
        span(3, 1, 50.0, deadline + 5, term=100.4),
        span(4, 1, 50.0, 100.5, checkpoint=100.5),
    ]
    stops = [event(10 + job, job, "STOP_REQUESTED", "PREEMPTED", 100.0, grace_s=3) for job in (1, 2, 3, 4)]
    faults = [Fault("postgres_down", "postgres", 200.0, 205.0), Fault("leader_stop", "scheduler-1", 101.0, 110.0)]
    ev = evidence(spans=spans, events=[placed(2, job, 40.0) for job in (1, 2, 3, 4)] + stops)
    assert late_preemptions(ev, faults=faults[:1], timings=SHORT) == [
        f"job 1 rank 0 attempt 1, preempted at 100.00, ran until {deadline + 1:.2f} (1.0 s past grace + one pass + "
        "one heartbeat)",
        "job 2 rank 0 attempt 1, preempted at 100.00, was killed without a SIGTERM first",
        f"job 3 rank 0 attempt 1, preempted at 100.00, ran until {deadline + 5:.2f} (5.0 s past grace + one pass + "
        "one heartbeat)",
    ]
    assert late_preemptions(ev, faults=faults, timings=SHORT) == []
