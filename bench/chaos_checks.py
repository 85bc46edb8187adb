"""The fault campaign's invariants (the issue's list), each a function from the evidence to the
violations it finds, one sentence each with the job, the fault and the times involved:

1. overlapping_attempts: two attempts of one task ran at once (from the ledger);
2. deposed_epoch_writes: a write of epoch e landed after a later epoch took the lead (its event
   id is above that LEADER event's), or a row carries an epoch no scheduler ever took;
3. jobs_lost: a job accepted and then missing, ended without success, pending with no reason,
   or stuck (assigned and never started, or active long after its SIGKILL was due);
4. outage_kills: a task killed, or a node called LOST, that no agent fault explains (so the
   control plane's own outage, shorter than the bound, killed it);
5. agent_fault_requeues: a task of a cut-off, stopped or killed agent never requeued, or
   requeued while it still ran, or running on after its agent was SIGKILLed;
6. late_preemptions: a preempted task not signalled, or not stopped within its grace period
   plus one scheduler pass and one heartbeat, Celery killed or not.
"""

from itertools import pairwise

from bench.chaos_evidence import Evidence, Span
from bench.chaos_faults import AGENT_FAULTS, Fault
from bench.chaos_timings import TICK_S, Timings

# Events by which the control plane kills or writes off a task it believed running.
KILL_REASONS = ("NODE_LOST", "AGENT_LOST_TASK", "LEASE_EXPIRED")
# Faults that stop the stop signal itself (no leader, no database, no web tier): a preemption
# whose grace window overlaps one is not held to the grace deadline.
SIGNAL_PATH_FAULTS = ("leader_kill", "leader_stop", "postgres_restart", "postgres_down", "web_down")
INVARIANTS = (
    "overlapping_attempts",
    "deposed_epoch_writes",
    "jobs_lost",
    "outage_kills",
    "agent_fault_requeues",
    "late_preemptions",
)


def overlapping_attempts(ev: Evidence, **_) -> list[str]:
    by_task: dict[tuple[int, int], list[Span]] = {}
    for span in ev.spans.values():
        by_task.setdefault((span.job, span.rank), []).append(span)
    found = []
    for (job, rank), spans in sorted(by_task.items()):
        spans.sort(key=lambda s: s.first)
        for before, after in pairwise(spans):
            if before.last >= after.first or before.attempt > after.attempt:
                found.append(
                    f"job {job} rank {rank}: attempt {before.attempt} ran {before.first:.2f}-"
                    f"{before.last:.2f}, attempt {after.attempt} started at {after.first:.2f}"
                )
    return found


def deposed_epoch_writes(ev: Evidence, **_) -> list[str]:
    takeovers = {}  # epoch -> id of its LEADER event
    found = []
    for event in ev.events:
        if event.kind == "LEADER":
            epoch = int(event.data["epoch"])
            if takeovers and epoch <= max(takeovers):
                found.append(f"LEADER event {event.id} takes epoch {epoch} after epoch {max(takeovers)} was taken")
            takeovers.setdefault(epoch, event.id)
    for event in ev.events:
        if event.kind == "LEADER" or "epoch" not in event.data:
            continue
        epoch = int(event.data["epoch"])
        later = [(event_id, newer) for newer, event_id in takeovers.items() if newer > epoch and event_id < event.id]
        if epoch not in takeovers:
            found.append(f"event {event.id} ({event.reason}, job {event.job}) carries epoch {epoch}, never taken")
        elif later:
            found.append(
                f"event {event.id} ({event.reason}, job {event.job}) of epoch {epoch} was written after "
                f"epoch {min(later)[1]} took the lead (event {min(later)[0]})"
            )
    for task in ev.tasks:
        if task.epoch and (task.epoch not in takeovers or task.epoch > ev.lease_epoch):
            found.append(f"job {task.job} rank {task.rank} carries epoch {task.epoch} (lease at {ev.lease_epoch})")
    return found


def jobs_lost(ev: Evidence, *, accepted: dict[str, int], timings: Timings, **_) -> list[str]:
    """Missing, ended without success, pending with no reason, or stuck: a task assigned and
    never started, or still active long after its SIGKILL was due, goes nowhere by itself."""
    found = [
        f"{client_id} was accepted as job {job_id}, which the database does not hold"
        for client_id, job_id in sorted(accepted.items())
        if job_id not in ev.jobs
    ]
    for job in sorted(ev.jobs.values(), key=lambda j: j.id):
        if job.state in ("SUCCEEDED", "ASSIGNED", "RUNNING") or job.state == "PENDING" and job.reason:
            continue
        last = ev.job_events(job.id)[-1:]
        why = f": {last[0].reason} {last[0].message}" if last else ""
        found.append(
            f"job {job.id} is {job.state}"
            + (f" ({job.failure_class})" if job.failure_class else " with no reason")
            + why
        )
    return found + _stuck(ev, timings)


def _stuck(ev: Evidence, timings: Timings) -> list[str]:
    patience = timings.stuck_after_s
    found = []
    for task in sorted(ev.tasks, key=lambda t: (t.job, t.rank)):
        if task.state == "ASSIGNED" and task.assigned_at and ev.read_at - task.assigned_at > patience:
            stop = f" (asked to stop: SIGKILL due at {task.kill_at:.2f})" if task.kill_at else ""
            found.append(
                f"job {task.job} rank {task.rank} has been ASSIGNED for "
                f"{ev.read_at - task.assigned_at:.0f} s and never started{stop}"
            )
        elif task.state in ("ASSIGNED", "RUNNING") and task.kill_at and ev.read_at - task.kill_at > patience:
            found.append(
                f"job {task.job} rank {task.rank} is still {task.state} {ev.read_at - task.kill_at:.0f} s "
                "after its SIGKILL was due"
            )
    return found


def agent_fault_for(faults: list[Fault], nodes: set[str], at: float, slack: float) -> Fault | None:
    return next(
        (f for f in faults if f.kind in AGENT_FAULTS and nodes & set(f.nodes) and f.covers(at, slack=slack)), None
    )


def outage_kills(ev: Evidence, *, faults: list[Fault], timings: Timings, **_) -> list[str]:
    """Kills seen four ways (the task's own ledger, the agent's log, the server's kill events,
    nodes called LOST); each must fall inside an agent fault on its node, or shortly after it
    (the agent resuming, restarting, or reporting what it killed while away)."""
    slack = 10 + 3 * timings.heartbeat_s
    found = []
    for span in sorted(ev.spans.values(), key=lambda s: s.first):
        killed_at = _unrequested_kill(ev, span)
        if killed_at is not None and not agent_fault_for(faults, ev.nodes_ran(span), killed_at, slack):
            found.append(
                f"job {span.job} rank {span.rank} attempt {span.attempt} was stopped at {killed_at:.2f} "
                f"with no stop requested and no agent fault on its nodes"
            )
    for kill in ev.lease_kills:
        if not agent_fault_for(faults, {kill.node}, kill.at, slack):
            found.append(f"{kill.node} at {kill.at:.2f}: {kill.line}")
    for event in ev.events:
        node_lost = event.kind == "NODE_STATE" and event.reason == "LOST"
        if event.reason not in KILL_REASONS and not node_lost:
            continue
        nodes = {event.node} if node_lost else ev.nodes_before(event)
        if not agent_fault_for(faults, nodes, event.at, slack):
            found.append(
                f"event {event.id} at {event.at:.2f}: {event.reason} "
                f"{'node ' + event.node if node_lost else f'job {event.job}'}: {event.message}"
            )
    return found


def _unrequested_kill(ev: Evidence, span: Span) -> float | None:
    """When the attempt was signalled or vanished, if nobody asked it to stop; None when it
    finished, still runs, or a stop request came first."""
    if span.finished or span.last > ev.read_at - 2:
        return None
    # A process killed outright notes nothing: it died within a tick of its last line.
    at = span.signalled_at or span.last + TICK_S
    stops = [e for e in ev.job_events(span.job, "STOP_REQUESTED") if span.first - 1 <= e.at <= at + 0.5]
    return None if stops else at


def agent_fault_requeues(ev: Evidence, *, faults: list[Fault], **_) -> list[str]:
    found = []
    for fault in (f for f in faults if f.kind in AGENT_FAULTS):
        found += [_requeue_violation(ev, fault, key) for key in fault.tasks]
        if fault.kind == "agent_kill":
            found += _outlived_agent(ev, fault)
    return [violation for violation in found if violation]


def _requeue_violation(ev: Evidence, fault: Fault, key: tuple[int, int, int]) -> str:
    """Requeued after the fault began, and only once every rank of that attempt was dead."""
    job, rank, attempt = key
    span = ev.spans.get(key)
    retries = [e for e in ev.job_events(job, "RETRY") if e.at > fault.start]
    where = f"job {job} rank {rank} attempt {attempt} ({fault.kind} {fault.target} at {fault.start:.2f})"
    if not retries:
        return "" if span and span.finished else f"{where} was never requeued"
    alive = [s for s in ev.spans.values() if s.job == job and s.attempt <= attempt and s.last > retries[0].at]
    return "; ".join(
        f"{where}: requeued at {retries[0].at:.2f} while rank {s.rank} attempt {s.attempt} ran until {s.last:.2f}"
        for s in alive
    )


def _outlived_agent(ev: Evidence, fault: Fault) -> list[str]:
    """A killed agent's tasks die with it (their supervisors see it go): an attempt its nodes
    started before the agent came back must not run on after the SIGKILL."""
    return [
        f"job {s.job} rank {s.rank} attempt {s.attempt} on {fault.target} ran until {s.last:.2f}, "
        f"{s.last - fault.start:.1f} s after its agent was SIGKILLed at {fault.start:.2f}"
        for s in sorted(ev.spans.values(), key=lambda s: (s.job, s.rank, s.attempt))
        if s.first < fault.end and s.last > fault.start + TICK_S + 0.5 and ev.nodes_ran(s) & set(fault.nodes)
    ]


def held_preemptions(ev: Evidence, faults: list[Fault], timings: Timings) -> list[tuple]:
    """(stop request, deadline) of each preemption held to its grace: grace + one scheduler
    pass + one heartbeat after the request, unless a fault took the signal's path down meanwhile."""
    held = []
    for stop in (e for e in ev.events if e.kind == "STOP_REQUESTED" and e.reason == "PREEMPTED"):
        deadline = stop.at + float(stop.data.get("grace_s", timings.grace_s)) + timings.stop_allowance_s
        nodes = ev.nodes_before(stop)
        if not any(
            f.start <= deadline
            and f.end >= stop.at
            and (f.kind in SIGNAL_PATH_FAULTS or f.kind in AGENT_FAULTS and nodes & set(f.nodes))
            for f in faults
        ):
            held.append((stop, deadline))
    return held


def late_preemptions(ev: Evidence, *, faults: list[Fault], timings: Timings, **_) -> list[str]:
    found = []
    for stop, deadline in held_preemptions(ev, faults, timings):
        for span in (s for s in ev.spans.values() if s.job == stop.job and s.first <= stop.at <= s.last + 0.5):
            where = f"job {span.job} rank {span.rank} attempt {span.attempt}, preempted at {stop.at:.2f}"
            if span.last > deadline:
                found.append(
                    f"{where}, ran until {span.last:.2f} ({span.last - deadline:.1f} s past grace + one "
                    "pass + one heartbeat)"
                )
            elif span.signalled_at is None and not span.finished and span.last > stop.at + 0.5:
                found.append(f"{where}, was killed without a SIGTERM first")
    return found


def verdict(ev: Evidence, *, faults: list[Fault], timings: Timings, accepted: dict[str, int]) -> dict[str, list[str]]:
    checks = (
        overlapping_attempts,
        deposed_epoch_writes,
        jobs_lost,
        outage_kills,
        agent_fault_requeues,
        late_preemptions,
    )
    return {check.__name__: check(ev, faults=faults, timings=timings, accepted=accepted) for check in checks}
