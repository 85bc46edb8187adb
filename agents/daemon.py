"""`mlqueue-agent`: one per machine (or many virtual nodes in one process with --fleet).

It joins with the cluster's join token and gets a token of its own node; heartbeats every
few seconds; starts the assignments it is given as real processes; passes on the signals the
scheduler sends; reports starts, exits and log chunks; and obeys three safety rules:
- fencing: it refuses an assignment from an epoch older than the highest it has seen, and an
  attempt it has already run (remembered on disk across restarts);
- reconnect: it kills whatever the server says it no longer assigns to this node;
- lease: if it has not renewed its lease in time (by its own monotonic clock), it sends
  SIGTERM, then SIGKILL, to all its tasks, before the server can call the node lost.
"""
import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from agents.client import AgentClient, ApiError
from agents.machine import inventory
from agents.runtime import TaskProcess

log = logging.getLogger("mlqueue.agent")
POLL_S = 0.2
LEASE_KILL_GRACE_S = 5.0


class NodeAgent:
    def __init__(self, *, server: str, join_token: str, node: dict, workdir: Path, container_hook: str = ""):
        self.client = AgentClient(server)
        self.join_token, self.node, self.name = join_token, node, node["name"]
        self.workdir = workdir / self.name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.container_hook = container_hook
        self.tasks: dict[tuple[int, int, int], TaskProcess] = {}
        self.outbox: list[dict] = []  # events not yet accepted by the server
        self.interval_s, self.lease_deadline = 5.0, 0.0
        self.lease_killed_at: float | None = None
        self.state_path = self.workdir / "state.json"
        self.highest_epoch, self.seen = self._load_state()
        self.wake = threading.Event()
        self.stopping = threading.Event()

    # --- memory across restarts ----------------------------------------------------------
    def _load_state(self) -> tuple[int, set[tuple[int, int, int]]]:
        try:
            state = json.loads(self.state_path.read_text())
            return state["highest_epoch"], {tuple(k) for k in state["seen"]}
        except (FileNotFoundError, ValueError, KeyError):
            return 0, set()

    def _save_state(self) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"highest_epoch": self.highest_epoch, "seen": sorted(self.seen)}))
        tmp.replace(self.state_path)

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        self.register()
        threading.Thread(target=self.listen, name=f"{self.name}-wake", daemon=True).start()
        next_beat = 0.0
        while not self.stopping.is_set():
            if time.monotonic() >= next_beat or self.wake.is_set():
                self.wake.clear()
                next_beat = time.monotonic() + (self.interval_s if self.heartbeat() else min(self.interval_s, 2.0))
            self.watch_tasks()
            self.enforce_lease()
            self.flush_events()
            self.wake.wait(POLL_S)
        self.shutdown_tasks()

    def listen(self) -> None:
        """Hold the wake-up socket open: the server nudges it when this node has new work or a
        signal. Optional: without it, the next regular heartbeat brings the same."""
        try:
            from websockets.sync.client import connect
        except ImportError:
            return
        while not self.stopping.is_set():
            try:
                with connect(self.client.websocket_url(self.name), open_timeout=5,
                             additional_headers={"Authorization": f"Bearer {self.client.token}"}) as socket:
                    for _ in socket:
                        self.wake.set()
            except Exception as exc:  # any failure: wait and reconnect; heartbeats go on regardless
                log.debug("%s: wake-up socket closed (%s)", self.name, exc)
            self.stopping.wait(3.0)

    def shutdown_tasks(self) -> None:
        """The agent is stopping: its tasks stop with it (TERM, then KILL after a grace)."""
        running = [t for t in self.tasks.values() if t.running]
        for task in running:
            task.send("TERM")
        deadline = time.monotonic() + LEASE_KILL_GRACE_S
        while time.monotonic() < deadline and any(t.process.poll() is None for t in running):
            time.sleep(0.1)
        for task in running:
            task.send("KILL")

    def register(self) -> None:
        while not self.stopping.is_set():
            try:
                reply = self.client.post("agents/register", self.node, token=self.join_token)
                self.client.token, self.interval_s = reply["token"], reply["heartbeat_interval_s"]
                log.info("%s: joined (heartbeat every %s s, lease %s s)", self.name, self.interval_s, reply["lease_s"])
                return
            except (OSError, ApiError) as exc:
                log.warning("%s: cannot join yet (%s)", self.name, exc)
                self.stopping.wait(2.0)

    def heartbeat(self) -> bool:
        sent_at = time.monotonic()
        reported = [task.report() for task in self.tasks.values()]
        try:
            reply = self.client.post(f"agents/{self.name}/heartbeat", {"tasks": reported,
                                                                       "highest_epoch": self.highest_epoch})
        except ApiError as exc:
            if exc.status == 401:
                self.register()  # the server forgot this node's token (e.g. a new database)
            log.warning("%s: heartbeat refused (%s)", self.name, exc)
            return False
        except OSError as exc:
            log.warning("%s: heartbeat failed (%s)", self.name, exc)
            return False
        self.lease_deadline = sent_at + reply["lease_s"]
        self.interval_s = reply["heartbeat_interval_s"]
        self.forget_reported_exits(reported)
        self.obey(reply)
        return True

    def forget_reported_exits(self, reported: list[dict]) -> None:
        for item in reported:
            key = (item["job_id"], item["rank"], item["attempt"])
            if item["state"] == "exited" and key in self.tasks and not self.tasks[key].running:
                del self.tasks[key]

    def obey(self, reply: dict) -> None:
        self.highest_epoch = max(self.highest_epoch, reply["highest_epoch"])
        for stale in reply["kill"]:
            self.signal((stale["job_id"], stale["rank"], stale["attempt"]), "KILL", why="no longer assigned here")
        for order in reply["signals"]:
            self.signal((order["job_id"], order["rank"], order["attempt"]), order["signal"], why=order["reason"])
        for assignment in reply["assignments"]:
            self.start(assignment)

    def signal(self, key: tuple[int, int, int], name: str, *, why: str) -> None:
        task = self.tasks.get(key)
        if task is not None and task.running and name not in task.signals_sent:
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
            return None
        self.highest_epoch = max(self.highest_epoch, assignment["epoch"])
        self.seen.add(key)
        self._save_state()  # before the process exists: a crash must not let it run twice
        try:
            task = TaskProcess(assignment, self.workdir, container_hook=self.container_hook)
        except OSError as exc:
            log.error("%s: cannot start job %s rank %s: %s", self.name, *key[:2], exc)
            self.outbox.append({"type": "exited", "job_id": key[0], "rank": key[1], "attempt": key[2],
                                "exit_code": 127, "signal": ""})
            return None
        self.tasks[key] = task
        self.outbox.append({"type": "started", "job_id": key[0], "rank": key[1], "attempt": key[2]})
        log.info("%s: started job %s rank %s attempt %s (pid %s)", self.name, *key, task.process.pid)
        return task

    # --- watching -----------------------------------------------------------------------------
    def watch_tasks(self) -> None:
        for task in list(self.tasks.values()):
            exited = task.poll()
            self.outbox.extend(task.log_events(final=exited))
            if exited:
                log.info("%s: job %s rank %s attempt %s exited (%s)", self.name, *task.key,
                         task.exit_code if task.exit_code is not None else task.exit_signal)
                self.outbox.append({"type": "exited", "job_id": task.job_id, "rank": task.rank,
                                    "attempt": task.attempt, "exit_code": task.exit_code, "signal": task.exit_signal})

    def enforce_lease(self) -> None:
        """No renewal by the deadline: stop everything, SIGKILL what is left after a grace."""
        running = [t for t in self.tasks.values() if t.running]
        if not running or time.monotonic() < self.lease_deadline:
            self.lease_killed_at = None
            return
        if self.lease_killed_at is None:
            self.lease_killed_at = time.monotonic()
            log.error("%s: lease expired without renewal: stopping %d task(s)", self.name, len(running))
        name = "KILL" if time.monotonic() - self.lease_killed_at >= LEASE_KILL_GRACE_S else "TERM"
        for task in running:
            task.send(name)

    def flush_events(self) -> None:
        while self.outbox:
            batch = self.outbox[:200]
            try:
                self.client.post(f"agents/{self.name}/events", {"events": batch})
            except (OSError, ApiError) as exc:
                log.warning("%s: could not send %d event(s) (%s); will retry", self.name, len(batch), exc)
                return
            del self.outbox[:len(batch)]

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mlqueue-agent", description="The mlqueue node agent.")
    parser.add_argument("--server", required=True, help="the mlqueue web URL, e.g. https://mlqueue.example.com")
    parser.add_argument("--token", required=True, help="the cluster's join token (MLQ_AGENT_JOIN_TOKEN)")
    parser.add_argument("--node-name", help="default: this machine's hostname")
    parser.add_argument("--zone", default="z1")
    parser.add_argument("--rack", default="r1")
    parser.add_argument("--workdir", type=Path, default=Path("/var/lib/mlqueue-agent"))
    parser.add_argument("--fake-gpus", type=int, help="pretend to have this many GPUs (no NVML needed)")
    parser.add_argument("--gpu-type", help="the fake GPUs' type (default H100)")
    parser.add_argument("--cpus", type=int)
    parser.add_argument("--memory-gb", type=int)
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--address", help="how other nodes reach this one (a gang's MASTER_ADDR)")
    parser.add_argument("--container-hook", default="", help="wraps jobs that name an image, e.g. "
                        "'podman run --rm --network host {image}'")
    parser.add_argument("--fleet", type=Path, help="a JSON list of virtual nodes to run in this process")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if any("=" not in label for label in args.label):
        parser.error("--label takes KEY=VALUE")
    return args


def nodes_from(args: argparse.Namespace) -> list[dict]:
    if args.fleet:
        try:
            fleet = json.loads(args.fleet.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"mlqueue-agent: cannot read --fleet {args.fleet}: {exc}") from None
        return [{"labels": {}, "address": "127.0.0.1", **node} for node in fleet]
    labels = dict(label.split("=", 1) for label in args.label)
    return [inventory(name=args.node_name, zone=args.zone, rack=args.rack, fake_gpus=args.fake_gpus,
                      gpu_type=args.gpu_type, cpus=args.cpus, memory=args.memory_gb, labels=labels,
                      address=args.address)]


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    agents = [NodeAgent(server=args.server, join_token=args.token, node=node, workdir=args.workdir,
                        container_hook=args.container_hook) for node in nodes_from(args)]
    threads = [threading.Thread(target=agent.run, name=agent.name, daemon=True) for agent in agents]

    def stop(*_):
        for agent in agents:
            agent.stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=0.5)


if __name__ == "__main__":
    main()
