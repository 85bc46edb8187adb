"""`mlqueue-agent`: one per machine (or many virtual nodes in one process with --fleet).

It joins with a join token (from --token-file or MLQ_AGENT_JOIN_TOKEN, never the command
line) and gets a token of its own node, kept in a 0600 file in its workdir: an agent restarting
on the same workdir re-registers with it, and nothing else can take over its node. It
heartbeats every few seconds, on its WebSocket to the server while that is open, over HTTP
otherwise (agents/node/heartbeat_socket.py), and at once when the server nudges it; starts
the assignments it is given as real processes; passes on the signals the scheduler sends;
reports starts, exits and log chunks (sent by a thread of their own, so that a task printing
tens of MB holds up no heartbeat: agents/node/outbox.py); and obeys three safety rules:
- fencing: it refuses an assignment from an epoch older than the highest it has seen, and an
  attempt it has already run (remembered on disk across restarts);
- reconnect: it kills whatever the server says it no longer assigns to this node;
- lease: its lease is the outage bound (MLQ_OUTAGE_BOUND_S, 5 minutes by default), counted
  on its own monotonic clock from before the heartbeat that renewed it. Through a control-plane
  outage shorter than that, its tasks run on. If it has not renewed by then, its tasks get
  SIGTERM at the deadline and SIGKILL a grace later, before the server can call the node lost
  (it waits for the bound plus a margin longer than that grace). Each task's supervisor
  enforces the same deadline from a file the agent rewrites at each renewal, so a stopped or
  stuck agent's tasks die on time too.
"""

import getpass
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from agents.node import credentials
from agents.node.client import CLEARTEXT, AgentClient, ApiError, in_clear_text
from agents.node.containers import Podman
from agents.node.heartbeat_socket import HeartbeatSocket
from agents.node.isolation import (
    ISOLATION_OFF,
    NO_ISOLATION_WARNING,
    RUN_AS_ROOT,
    NoTaskUser,
    TaskUsers,
    can_switch_users,
    kill_processes_of,
    untraversable,
)
from agents.node.machine import GpusMissing, remember_gpus
from agents.node.options import nodes_from, parse_args
from agents.node.outbox import Outbox
from agents.node.quiet_log import OncePerMinute
from agents.node.runtime import (
    DEFAULT_PASS_ENV,
    DIR_MODE,
    LOG_READ_BYTES,
    NoContainerRuntime,
    RecordedExit,
    TaskProcess,
    install_helpers,
)
from agents.node.supervise import LEASE_KILL_GRACE_S, UnholdableLease, bad_lease_terms, kill_grace, write_lease
from agents.node.telemetry import Health, HealthCheck, NoGpus, provider_for
from agents.node.threads import run_until_signalled
from agents.node.workdir_lock import WorkdirBusy, hold_node_dir, release_node_dir

log = logging.getLogger("mlqueue.agent")
POLL_S = 0.2
# Log text waiting in the outbox past which the agent reads no more of its tasks' files (they
# wait on disk): what an outage or a slow server costs the agent's memory.
QUEUED_LOG_CHARS = 2 * 1024 * 1024
# A task's exit goes to the server after its last log lines (a follower of the log sees them
# before the end); if they have not gone after this long (the events endpoint failing), the
# heartbeat reports the exit anyway and the rest of the log stays in the task's files.
EXIT_REPORT_WAIT_S = 30.0
# On stop: how long the last exits' events may take to go before the tasks are stopped anyway.
LAST_WORD_S = 5.0
GIVE_A_TOKEN = "give one with --token-file or MLQ_AGENT_JOIN_TOKEN"


class NodeAgent:
    def __init__(
        self,
        *,
        server: str,
        join_token: str,
        node: dict,
        workdir: Path,
        container_hook: str = "",
        container: Podman | None = None,
        pass_env=DEFAULT_PASS_ENV,
        task_users: TaskUsers | None = None,
        health: Health | None = None,
        own_gpus: bool = False,
    ):
        self.client = AgentClient(server)
        # The machine's own GPUs (not fake ones): what it registers with is kept for its next start.
        self.own_gpus = own_gpus
        self.join_token, self.node, self.name = join_token, node, node["name"]
        self.workdir = (workdir / self.name).absolute()  # tasks run elsewhere: their supervisors need whole paths
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, DIR_MODE)  # tasks reach their own directories through it, and list nothing
        self.lock = hold_node_dir(self.workdir)  # before anything here is touched: one agent per node directory
        self.container_hook, self.pass_env = container_hook, pass_env
        self.container = container.for_node(self.name, self.workdir) if container is not None else None
        if self.container is not None:
            self.container.sweep()  # before any task starts: whatever runs under this label is from before
        self.task_users = task_users or TaskUsers.none()
        self.node_token_path = self.workdir / credentials.NODE_TOKEN_FILE
        self.helpers = install_helpers(self.workdir)  # mlqueue.checkpoint and mlqueue.report for the tasks' Python
        self.tasks: dict[tuple[int, int, int], TaskProcess | RecordedExit] = {}
        self.outbox = Outbox(self.name)  # events not yet accepted by the server
        self.interval_s, self.lease_deadline, self.lease_grace_s = 5.0, 0.0, LEASE_KILL_GRACE_S
        self.lease_path = self.workdir / "lease"
        self.state_path = self.workdir / "state.json"
        self.highest_epoch, self.seen = self._load_state()
        self.recover_exits()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.refused = ""  # why the server refuses this node's registration for good
        self.quiet = OncePerMinute(log)  # what goes wrong again and again, said once a minute
        self.health = health or Health(NoGpus())
        self.socket = HeartbeatSocket(self.client, self.name, on_wake=self.wake.set, stopping=self.stopping)

    # --- memory across restarts ----------------------------------------------------------
    def _load_state(self) -> tuple[int, set[tuple[int, int, int]]]:
        try:
            state = json.loads(self.state_path.read_text())
            return state["highest_epoch"], {tuple(k) for k in state["seen"]}
        except (FileNotFoundError, ValueError, KeyError):
            return 0, set()

    def _save_state(self) -> None:
        credentials.write_private(
            self.state_path, json.dumps({"highest_epoch": self.highest_epoch, "seen": sorted(self.seen)})
        )

    def recover_exits(self) -> None:
        """Exits of this node's attempts that no agent reported (it was killed after the task
        exited, before a heartbeat said so, or stopped it on its way out), recorded by their
        supervisors: reported as live exits are. An attempt that ran here and recorded no exit
        was killed with its agent: the server finds it missing from the heartbeat (lost)."""
        for key in sorted(self.seen):
            task = RecordedExit.found(self.workdir, key)
            if task is not None:
                self.tasks[key] = task
                self.queue_exit(task)

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        self.register()
        if self.refused:
            return
        threading.Thread(target=self.socket.run, name=f"{self.name}-socket", daemon=True).start()
        threading.Thread(target=self.ship, name=f"{self.name}-outbox", daemon=True).start()
        next_beat = 0.0
        while not self.stopping.is_set():
            if time.monotonic() >= next_beat or self.wake.is_set():
                self.wake.clear()
                next_beat = time.monotonic() + (self.interval_s if self.heartbeat() else min(self.interval_s, 2.0))
            self.watch_tasks()
            self.enforce_lease()
            self.wake.wait(POLL_S)
        self.last_word()
        self.shutdown_tasks()
        self.release()

    def last_word(self) -> None:
        """On stop, before the tasks are killed: the exits seen so far, after their logs, and a
        last heartbeat that reports them (bounded: a server that does not answer gets the
        lease's rules). A task that had ended but whose exit stayed in the outbox would be
        failed as lost at the next registration, and a finished job run again."""
        try:
            self.watch_tasks()
            self.flush_events(deadline=time.monotonic() + LAST_WORD_S)
            self.heartbeat()
        except Exception:  # the tasks are stopped whatever happens here
            log.exception("%s: could not report the last exits before stopping", self.name)

    def release(self) -> None:
        """Let another agent have this node's directory (this one's tasks are stopped)."""
        if self.lock is not None:
            release_node_dir(self.lock)
            self.lock = None

    def shutdown_tasks(self) -> None:
        """The agent is stopping: its tasks stop with it (TERM, then KILL after a grace). Their
        exits are not reported now (the last word went before); the next agent on this workdir
        reports those their supervisors recorded, as lost in the agent's restart (infra)."""
        running = [t for t in self.tasks.values() if t.running]
        for task in running:
            task.note_agent_stop()
            task.send("TERM")
        deadline = time.monotonic() + LEASE_KILL_GRACE_S
        while time.monotonic() < deadline and any(t.process.poll() is None for t in running):
            time.sleep(0.1)
        for task in running:
            task.send("KILL")
        for task in self.tasks.values():
            try:
                task.process.wait(timeout=LEASE_KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                log.error("%s: job %s rank %s attempt %s survived SIGKILL", self.name, *task.key)
            self.reap(task)

    def register(self) -> None:
        """Keep trying (an admin may be resetting this node, the server may be down) until a
        registration is accepted; give up when the server refuses what this node reports (a
        400: sending it again changes nothing)."""
        while not self.stopping.is_set() and not self.try_register():
            if self.refused:
                log.error("%s: cannot register this node: %s", self.name, self.refused)
                self.stop()
                return
            self.stopping.wait(2.0)

    def try_register(self) -> bool:
        """Join with this node's own token when the workdir has one (a restart), else with the
        join token. One round, so that a running agent that must register again (the server
        forgot its token) goes on watching its tasks and its lease meanwhile."""
        held = list(self.credentials())
        if not held:
            log.error("%s: no node token in %s and no join token: %s", self.name, self.workdir, GIVE_A_TOKEN)
        for credential, what in held:
            try:
                reply = self.client.post(
                    "agents/register", {**self.node, "task_isolation": self.task_users.mode}, token=credential
                )
            except ApiError as exc:
                self.quiet.warning("%s: cannot register with the %s (%s)", self.name, what, exc)
                if exc.status == 400 or 300 <= exc.status < 400:  # the inventory or --server, whatever the token
                    self.refused = str(exc)
                    return False
                continue
            except OSError as exc:
                self.quiet.warning("%s: cannot join yet (%s)", self.name, exc)
                return False
            self.refused = bad_lease_terms(reply)  # a server's error, not this node's: stop, saying so
            if not self.refused:
                self.joined(reply)
            return not self.refused
        return False

    def credentials(self):
        node_token = credentials.read_private(self.node_token_path)
        if node_token:
            yield node_token, f"node token in {self.node_token_path}"
        if self.join_token:
            yield self.join_token, "join token"

    def joined(self, reply: dict) -> None:
        self.refused = ""  # a refusal while re-registering mid-run is over once one succeeds
        credentials.write_private(self.node_token_path, reply["token"])
        if self.own_gpus:
            remember_gpus(self.workdir, self.node)
        self.client.token, self.interval_s = reply["token"], reply["heartbeat_interval_s"]
        log.info("%s: joined (heartbeat every %s s, lease %s s)", self.name, self.interval_s, reply["lease_s"])

    def heartbeat(self) -> bool:
        sent_at = time.monotonic()
        reported = [self.report(task) for task in list(self.tasks.values())]
        body = {"tasks": reported, "highest_epoch": self.highest_epoch}
        health = self.health.due()
        if health is not None:
            body["health"] = health
        try:
            reply = self.send_heartbeat(body)
        except ApiError as exc:
            self.quiet.warning("%s: heartbeat refused (%s)", self.name, exc)
            if exc.status == 401:
                self.try_register()  # the server forgot this node's token (e.g. a new database)
            return False
        except OSError as exc:  # a lease it cannot hold too: the one it had runs on, nothing new starts
            self.quiet.warning("%s: heartbeat failed (%s)", self.name, exc)
            if isinstance(exc, UnholdableLease):
                self.stop_unholdable(exc.reply)
            return False
        self.renewed(sent_at, reply["lease_s"])
        if health is not None:
            self.health.sent(health)
        self.interval_s = reply["heartbeat_interval_s"]
        self.forget_reported_exits(reported)
        self.obey(reply)
        return True

    def send_heartbeat(self, body: dict) -> dict:
        """The server's reply: over the WebSocket while the server takes heartbeats there (the
        cheap way), over HTTP otherwise: no socket yet, it dropped, or an older server."""
        reply = self.socket.heartbeat(body, timeout=self.client.timeout)
        reply = self.client.post(f"agents/{self.name}/heartbeat", body) if reply is None else reply
        if why := bad_lease_terms(reply):
            raise UnholdableLease(f"not renewing: {why}", reply)
        return reply

    def renewed(self, sent_at: float, lease_s: float) -> None:
        """The lease runs `lease_s` from when the renewing heartbeat was sent; the tasks'
        supervisors read the new deadline from the lease file."""
        self.lease_deadline, self.lease_grace_s = sent_at + lease_s, kill_grace(lease_s)
        write_lease(self.lease_path, until=self.lease_deadline, grace_s=self.lease_grace_s)

    def report(self, task: TaskProcess) -> dict:
        """What a heartbeat says of a task: an exit only once its events went before it (its
        last logs, then the `exited` event), or once that has taken EXIT_REPORT_WAIT_S; until
        then it is still running as far as the server need know."""
        item = task.report()
        if item["state"] == "exited" and not self.exit_may_be_reported(task):
            item.update(state="running", exit_code=None, signal="", cause="")
        return item

    def exit_may_be_reported(self, task: TaskProcess) -> bool:
        """Once its events went; or, while they cannot (the server has taken no batch for
        EXIT_REPORT_WAIT_S), anyway: a slow but working server delays the exit, never cuts
        off the end of its log."""
        if task.exit_queued and not self.outbox.holds(task.key):
            return True
        waited = time.monotonic() - task.exited_at
        return waited >= EXIT_REPORT_WAIT_S and self.outbox.stalled_for() >= EXIT_REPORT_WAIT_S

    def forget_reported_exits(self, reported: list[dict]) -> None:
        for item in reported:
            key = (item["job_id"], item["rank"], item["attempt"])
            if item["state"] == "exited" and key in self.tasks and not self.tasks[key].running:
                self.tasks[key].forget_exit()
                self.reap(self.tasks.pop(key))

    def reap(self, task: TaskProcess) -> None:
        """The task's exit is reported and its logs read: free its user for the next task."""
        task.close()
        self.task_users.release(task.user)
        task.user = None

    def obey(self, reply: dict) -> None:
        self.highest_epoch = max(self.highest_epoch, reply["highest_epoch"])
        self.stop_as_told(reply)
        for assignment in reply["assignments"]:
            self.start(assignment)

    def stop_unholdable(self, reply: dict) -> None:
        """A reply the agent does not trust with a lease: its stop orders still stop their
        tasks (a cancel, a preemption), and orders it cannot read are warned of, never the end
        of the heartbeat loop."""
        try:
            self.stop_as_told(reply)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            self.quiet.warning("%s: unreadable stop orders in a reply without a lease (%r)", self.name, exc)

    def stop_as_told(self, reply: dict) -> None:
        """The reply's kills and signals: stopping a task is safe under any lease."""
        for stale in reply.get("kill") or ():
            self.signal((stale["job_id"], stale["rank"], stale["attempt"]), "KILL", why="no longer assigned here")
        for order in reply.get("signals") or ():
            key = (order["job_id"], order["rank"], order["attempt"])
            self.signal(key, order["signal"], why=order["reason"], kill_in_s=order.get("kill_in_s"))

    def busy_gpus(self) -> set[int]:
        """The GPUs this node's running tasks hold (what fake GPUs show as busy)."""
        return {index for task in list(self.tasks.values()) if task.running for index in task.gpu_indices}

    def signal(self, key: tuple[int, int, int], name: str, *, why: str, kill_in_s: float | None = None) -> None:
        """TERM or KILL, once each; a TERM's `kill_in_s` is kept: watch_tasks sends KILL then."""
        task = self.tasks.get(key)
        if task is None or not task.running:
            return
        if name == "TERM" and kill_in_s is not None:
            deadline = time.monotonic() + max(0.0, float(kill_in_s))
            task.kill_by = deadline if task.kill_by is None else min(task.kill_by, deadline)
        if name not in task.signals_sent:
            log.info("%s: SIG%s to job %s rank %s attempt %s (%s)", self.name, name, *key, why)
            task.send(name)

    # --- fencing and starting ---------------------------------------------------------------
    def refusal(self, assignment: dict) -> str:
        key = (assignment["job_id"], assignment["rank"], assignment["attempt"])
        if assignment["epoch"] < self.highest_epoch:
            return f"epoch {assignment['epoch']} is older than epoch {self.highest_epoch}, already seen"
        if key in self.seen:
            return "this attempt already ran here"
        return ""

    def start(self, assignment: dict) -> TaskProcess | None:
        key = (assignment["job_id"], assignment["rank"], assignment["attempt"])
        why_not = self.refusal(assignment)
        if why_not:
            log.warning("%s: refusing job %s rank %s attempt %s: %s", self.name, *key, why_not)
            if key in self.seen and key not in self.tasks:  # it ran here before this agent restarted: gone
                self.outbox.append(
                    {
                        "type": "exited",
                        "job_id": key[0],
                        "rank": key[1],
                        "attempt": key[2],
                        "exit_code": None,
                        "signal": "",
                        "cause": "lost",
                    }
                )
            return None
        self.highest_epoch = max(self.highest_epoch, assignment["epoch"])
        self.seen.add(key)
        self._save_state()  # before the process exists: a crash must not let it run twice
        user = None
        try:
            user = self.task_users.acquire(assignment.get("owner", ""), job_id=key[0], slot=assignment.get("task_slot"))
            task = TaskProcess(
                assignment,
                self.workdir,
                lease_file=self.lease_path,
                container_hook=self.container_hook,
                container=self.container,
                pass_env=self.pass_env,
                user=user,
                helpers=self.helpers,
            )
        except OSError as exc:
            self.task_users.release(user)
            log.error("%s: cannot start job %s rank %s: %s", self.name, *key[:2], exc)
            attempt = {"job_id": key[0], "rank": key[1], "attempt": key[2]}
            # The job's owner reads why in its log: the agent's own log is not theirs to see.
            why = f"mlqueue: cannot start this task on {self.name}: {exc}\n"
            self.outbox.append({"type": "log", **attempt, "stream": "stderr", "offset": 0, "data": why})
            # No user to run it as, or no runtime for its image, is the node's doing: INFRA (a
            # restart, elsewhere), not the job's retries.
            cause = {"cause": "no_task_user"} if isinstance(exc, NoTaskUser) else {}
            if isinstance(exc, NoContainerRuntime):
                cause = {"cause": "no_container_runtime"}
            self.outbox.append({"type": "exited", **attempt, "exit_code": 127, "signal": "", **cause})
            return None
        self.tasks[key] = task
        self.outbox.append({"type": "started", "job_id": key[0], "rank": key[1], "attempt": key[2]})
        log.info("%s: started job %s rank %s attempt %s (pid %s)", self.name, *key, task.process.pid)
        return task

    # --- watching -----------------------------------------------------------------------------
    def watch_tasks(self) -> None:
        for task in list(self.tasks.values()):
            if task.exit_queued:
                continue  # all of it is in the outbox: it waits for a heartbeat to report its exit
            exited = task.poll()
            if task.running and task.kill_by is not None and time.monotonic() >= task.kill_by:
                self.signal(task.key, "KILL", why="its stop's grace is over")
            if task.running or exited:  # before its exit: the server takes checkpoints of an active attempt
                self.outbox.extend(task.checkpoint_events(final=exited))
                self.outbox.extend(task.metric_events(final=exited))
            self.outbox.extend(self.log_events(task))
            if not task.running and task.logs_done:
                self.queue_exit(task)

    def log_events(self, task: TaskProcess) -> list[dict]:
        """The task's new log chunks, as much as the outbox has room for (none of a stream the
        server keeps no more of); the rest waits in its files."""
        room = QUEUED_LOG_CHARS - self.outbox.log_chars
        if room <= 0:
            return []
        capped = {name for name in ("stdout", "stderr") if self.outbox.is_capped((*task.key, name))}
        return task.log_events(final=not task.running, budget=min(room, LOG_READ_BYTES), capped=capped)

    def queue_exit(self, task: TaskProcess) -> None:
        """The task has exited and its logs are read to their end: its exit goes after them."""
        log.info(
            "%s: job %s rank %s attempt %s exited (%s)%s",
            self.name,
            *task.key,
            task.exit_code if task.exit_code is not None else task.exit_signal,
            task.exit_note,
        )
        self.outbox.append(
            {
                "type": "exited",
                "job_id": task.job_id,
                "rank": task.rank,
                "attempt": task.attempt,
                "exit_code": task.exit_code,
                "signal": task.exit_signal,
                "cause": task.cause,
            }
        )
        task.exit_queued = True

    def enforce_lease(self) -> None:
        """No renewal in time: SIGTERM at the deadline, SIGKILL a grace later (the tasks'
        supervisors do the same on their own)."""
        running = [t for t in self.tasks.values() if t.running]
        now = time.monotonic()
        if not running or now < self.lease_deadline:
            return
        name = "KILL" if now >= self.lease_deadline + self.lease_grace_s else "TERM"
        if any(name not in task.signals_sent for task in running):
            log.error(
                "%s: lease expired without renewal (the control plane is unreachable): SIG%s to %d task(s)",
                self.name,
                name,
                len(running),
            )
        for task in running:
            task.cause = "lease_expired"
            task.send(name)
        if name == "KILL":  # and what left their process groups: a node the leader has called LOST
            for user in {task.user for task in running if task.user is not None and task.user.pooled}:
                kill_processes_of(user.uid, user.gid)  # gives its slot to another job meanwhile

    def ship(self) -> None:
        """The shipping thread: the outbox's events go as they come, in order, apart from the
        loop (heartbeats, tasks, the lease), which never waits on them. Each flush gives way
        after a second, to look at `stopping`; after a failure it waits a second."""
        while not self.stopping.is_set():
            self.outbox.added.clear()
            try:
                shipped = self.flush_events(deadline=time.monotonic() + 1.0)
            except Exception:  # never a silent end: heartbeats would go on while nothing ships
                log.exception("%s: shipping events failed; trying again", self.name)
                shipped = False
            if not shipped:
                self.stopping.wait(1.0)
            elif not len(self.outbox):
                self.outbox.added.wait(POLL_S)

    def flush_events(self, deadline: float | None = None) -> bool:
        return self.outbox.flush(
            lambda batch: self.client.post(f"agents/{self.name}/events", {"events": batch}), deadline=deadline
        )

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if in_clear_text(args.server):
        log.warning(CLEARTEXT.format(server=args.server))
    join_token = credentials.join_token_from(args.token_file)
    args.workdir.mkdir(parents=True, exist_ok=True)
    agents = agents_for(args, join_token)  # first: each locks its node directory
    if args.task_users.mode == "none":
        remedy = ISOLATION_OFF if can_switch_users() else RUN_AS_ROOT  # root: it was asked for
        log.warning("NO TASK ISOLATION: " + NO_ISOLATION_WARNING.format(user=getpass.getuser(), remedy=remedy))
    else:
        try:
            args.task_users.claim()
        except OSError as exc:
            sys.exit(f"mlqueue-agent: {exc}")
        args.task_users.sweep()
    if args.task_users.mode == "uid" and untraversable(args.workdir.resolve()):
        log.warning(
            "tasks run as other users but cannot pass through %s to reach their own directories by name: "
            "chmod o+x it (0711)",
            ", ".join(map(str, untraversable(args.workdir.resolve()))),
        )
    check = None
    if args.health_check:
        check = HealthCheck(
            args.health_check, interval_s=args.health_check_interval, timeout_s=args.health_check_timeout
        ).start()
    fake = args.fake_gpus is not None or args.fleet is not None
    for agent in agents:
        gpus = provider_for(agent.node, fake=fake, faults_file=args.fake_gpu_faults, busy=agent.busy_gpus)
        agent.health = Health(gpus, check=check, interval_s=args.health_interval)
    run_until_signalled(agents)
    if refused := [agent for agent in agents if agent.refused]:
        sys.exit(f"mlqueue-agent: cannot register {'; '.join(f'{a.name}: {a.refused}' for a in refused)}")


def agents_for(args, join_token: str) -> list["NodeAgent"]:
    """An agent for each node; none, and an exit, where another agent holds a node's directory."""
    options = {"container_hook": args.container_hook, "container": args.container, "pass_env": args.pass_env}
    own_gpus = args.fake_gpus is None and args.fleet is None
    try:
        nodes = nodes_from(args)
    except GpusMissing as exc:
        sys.exit(f"mlqueue-agent: {exc}")
    try:
        return [
            NodeAgent(
                server=args.server,
                join_token=join_token,
                node=node,
                workdir=args.workdir,
                task_users=args.task_users,
                own_gpus=own_gpus,
                **options,
            )
            for node in nodes
        ]
    except WorkdirBusy as exc:
        sys.exit(f"mlqueue-agent: {exc}")


if __name__ == "__main__":
    main()
