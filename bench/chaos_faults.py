"""The fault kinds of the campaign (the issue's table), one function each. A fault is injected,
held, and undone (what it killed is started again, on the same ports and workdirs), and
recorded: kind, start, end, target, what happened. Control-plane outages stay under the
outage bound; agent faults last past the bound and the margin, so that the node is called
LOST while its agent is still away."""

import random
import signal
import time
from dataclasses import dataclass, field

from bench.chaos_services import wait_until
from bench.chaos_stack import AGENTS, Stack, node_names
from bench.chaos_store import GraceWindow
from bench.chaos_timings import SCHEDULER_LEASE_S, Timings
from bench.chaos_workload import Workload
from scheduling.leader.failpoints import POINTS

AGENT_FAULTS = ("agent_cut", "agent_stop", "agent_kill")
PROXIED_AGENT = "agent-c"
PROVOKE_EVERY_S = 3.0


@dataclass
class Fault:
    kind: str
    target: str
    start: float  # epoch seconds, this machine's clock (the ledger's and the database's too)
    end: float = 0.0
    detail: str = ""
    nodes: list[str] = field(default_factory=list)  # an agent fault's nodes
    tasks: list[tuple[int, int, int]] = field(default_factory=list)  # (job, rank, attempt) active there at start
    victim: int | None = None  # a Celery kill's: the job in whose grace window it fell

    def covers(self, moment: float, *, slack: float = 0.0) -> bool:
        return self.start <= moment <= self.end + slack

    def record(self, origin: float) -> dict:
        return {
            "kind": self.kind,
            "target": self.target,
            "start_s": round(self.start - origin, 1),
            "end_s": round(self.end - origin, 1),
            "detail": self.detail,
            **({"victim": self.victim} if self.victim is not None else {}),
        }


@dataclass
class Campaign:
    """What a fault may act on."""

    stack: Stack
    workload: Workload
    timings: Timings
    rng: random.Random

    def outage(self) -> float:
        return self.rng.uniform(*self.timings.outage_s)

    def leader(self):
        return wait_until(self.stack.leader, timeout=SCHEDULER_LEASE_S * 4, what="a leader")

    def answered_again(self, fault: Fault) -> None:
        """The outage ends when the API answers again (a restarted web process or database takes
        a moment to), not when the campaign has merely restarted it."""
        wait_until(self.stack.api_answers, timeout=60, what="the API to answer", interval=0.1)
        fault.end = time.time()


# --- the scheduler -----------------------------------------------------------------------------
def leader_kill(c: Campaign) -> Fault:
    """SIGKILL at a random failpoint of a pass: the leader that reaches the point named in the
    failpoint file kills itself there; if none does in time, a plain SIGKILL."""
    leader, point = c.leader(), c.rng.choice(POINTS)
    fault = Fault("leader_kill", leader.name, time.time())
    c.stack.failpoint_file.write_text(point)
    try:
        wait_until(lambda: not leader.alive(), timeout=c.timings.failpoint_wait_s, what=f"failpoint {point}")
        fault.detail = f"killed itself at failpoint {point}"
    except TimeoutError:
        c.stack.failpoint_file.unlink(missing_ok=True)
        leader.kill()
        fault.detail = f"plain SIGKILL: no pass reached {point} in {c.timings.failpoint_wait_s:g} s"
    fault.end = time.time()
    wait_until(c.stack.leader, timeout=SCHEDULER_LEASE_S * 4, what="the standby to take over")
    leader.start()
    return fault


def leader_stop(c: Campaign) -> Fault:
    leader = c.leader()
    fault = Fault("leader_stop", leader.name, time.time())
    leader.signal(signal.SIGSTOP)
    time.sleep(c.timings.leader_stop_s)
    successor = c.stack.leader()
    leader.signal(signal.SIGCONT)
    fault.end = time.time()
    took_over = successor is not None and successor is not leader
    fault.detail = f"SIGSTOP for {fault.end - fault.start:.0f} s (lease {SCHEDULER_LEASE_S:g} s); " + (
        f"{successor.name} took over" if took_over else "no standby took over"
    )
    return fault


# --- Postgres, Redis, the web tier -------------------------------------------------------------
def postgres_restart(c: Campaign) -> Fault:
    fault = Fault("postgres_restart", "postgres", time.time())
    c.stack.postgres.restart()
    c.answered_again(fault)
    fault.detail = f"pg_ctl restart -m fast; the API answered again after {fault.end - fault.start:.1f} s"
    return fault


def postgres_down(c: Campaign) -> Fault:
    fault = Fault("postgres_down", "postgres", time.time())
    c.stack.postgres.stop()
    time.sleep(c.outage())
    c.stack.postgres.start()
    c.answered_again(fault)
    fault.detail = f"pg_ctl stop -m fast, start: the API answered again after {fault.end - fault.start:.1f} s"
    return fault


def redis_restart(c: Campaign) -> Fault:
    fault = Fault("redis_restart", "redis", time.time())
    c.stack.redis.kill()
    c.stack.redis.start()
    c.answered_again(fault)
    fault.detail = "SIGKILL and start again: every key lost"
    return fault


def redis_down(c: Campaign) -> Fault:
    fault = Fault("redis_down", "redis", time.time())
    c.stack.redis.kill()
    time.sleep(c.outage())
    c.stack.redis.start()
    c.answered_again(fault)
    fault.detail = f"SIGKILL, started empty: the API answered again after {fault.end - fault.start:.1f} s"
    return fault


def web_down(c: Campaign) -> Fault:
    """Both web processes SIGKILLed; restarting them is part of the outage (a web process
    takes seconds to import Django before it answers)."""
    fault = Fault("web_down", "web-1,web-2", time.time())
    for web in c.stack.webs:
        web.kill()
    time.sleep(max(0.5, c.outage() - c.stack.web_start_s))
    for web in c.stack.webs:
        web.start()
    c.answered_again(fault)
    fault.detail = f"both web processes SIGKILLed: the API answered again after {fault.end - fault.start:.1f} s"
    return fault


# --- Celery --------------------------------------------------------------------------------------
def celery_kill(c: Campaign) -> Fault:
    """SIGKILL the Celery worker inside a preemption's grace window, and keep it down past the
    grace deadline: the leader's sweep alone must deliver the SIGKILL. A window whose victim
    ignores SIGTERM is preferred (only the SIGKILL stops it), any window taken late on."""
    window = _grace_window(c)
    fault = Fault("celery_kill", "celery", time.time())
    c.stack.celery.kill()
    if window is None:
        fault.detail = f"no grace window opened in {c.timings.window_wait_s:g} s: killed outside one"
        time.sleep(c.timings.grace_s)
    else:
        fault.victim = window.job_id
        fault.detail = (
            f"killed {window.kill_at - fault.start:.1f} s before job {window.job_id}'s grace ended "
            f"({'it ignores SIGTERM' if window.ignores_sigterm else 'it checkpoints on SIGTERM'})"
        )
        time.sleep(max(0.0, window.kill_at - time.time()) + c.timings.stop_allowance_s)
    c.stack.celery.start()
    fault.end = time.time()
    return fault


def _grace_window(c: Campaign) -> GraceWindow | None:
    """Wait for a grace window, submitting P0 work every few seconds to force preemptions."""
    started = time.monotonic()
    provoked = 0.0
    while (waited := time.monotonic() - started) < c.timings.window_wait_s:
        windows = sorted(c.stack.store.grace_windows(), key=lambda w: (not w.ignores_sigterm, w.kill_at))
        if windows and (windows[0].ignores_sigterm or waited > c.timings.window_wait_s * 0.6):
            return windows[0]
        if time.monotonic() - provoked > PROVOKE_EVERY_S:
            c.workload.preempt_now(c.stack.store.free_gpus())
            provoked = time.monotonic()
        time.sleep(0.2)
    return None


# --- agents --------------------------------------------------------------------------------------
def _agent_fault(c: Campaign, kind: str, agent: str) -> Fault:
    nodes = node_names(agent)
    return Fault(kind, agent, time.time(), nodes=nodes, tasks=c.stack.store.active_tasks_on(nodes))


def agent_cut(c: Campaign) -> Fault:
    fault = _agent_fault(c, "agent_cut", PROXIED_AGENT)
    c.stack.proxy.cut()
    time.sleep(c.timings.agent_fault_s)
    c.stack.proxy.restore()
    fault.end = time.time()
    fault.detail = f"partitioned for {fault.end - fault.start:.0f} s with {len(fault.tasks)} task(s)"
    return fault


def agent_stop(c: Campaign) -> Fault:
    fault = _agent_fault(c, "agent_stop", c.rng.choice(sorted(AGENTS)))
    agent = c.stack.agents[fault.target]
    agent.signal(signal.SIGSTOP)
    time.sleep(c.timings.agent_fault_s)
    agent.signal(signal.SIGCONT)
    fault.end = time.time()
    fault.detail = f"SIGSTOP for {fault.end - fault.start:.0f} s with {len(fault.tasks)} task(s)"
    return fault


def agent_kill(c: Campaign) -> Fault:
    """SIGKILL, then the same agent again on the same workdir: at once (the server hears from
    the new process that the tasks are gone) or after the node was called LOST."""
    fault = _agent_fault(c, "agent_kill", c.rng.choice(sorted(AGENTS)))
    agent = c.stack.agents[fault.target]
    agent.kill()
    down = c.rng.choice([c.rng.uniform(1, 3), c.timings.agent_fault_s])
    time.sleep(down)
    agent.start()
    fault.end = time.time()
    fault.detail = f"SIGKILL with {len(fault.tasks)} task(s), restarted after {down:.0f} s"
    return fault


FAULTS = {
    fault.__name__: fault
    for fault in (
        leader_kill,
        leader_stop,
        postgres_restart,
        postgres_down,
        redis_restart,
        redis_down,
        web_down,
        celery_kill,
        agent_cut,
        agent_stop,
        agent_kill,
    )
}
