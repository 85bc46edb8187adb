"""A whole mlqueue on this machine for end-to-end tests: the web tier (daphne), the scheduler
and node agents as real processes, on the test database, with timings scaled down (1 s
heartbeats, a 6 s outage bound (the agents' lease), a 3 s margin) so failures are detected in
seconds. A test may override any of them."""

import json
import socket
from pathlib import Path

from tests.e2e.processes import Process, scheduler, wait_for

JOIN_TOKEN = "e2e-join-token"
FAST = {
    "MLQ_HEARTBEAT_INTERVAL_S": 1,
    "MLQ_OUTAGE_BOUND_S": 6,
    "MLQ_LOST_MARGIN_S": 3,
    "MLQ_AGENT_JOIN_TOKEN": JOIN_TOKEN,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "MLQ_RETRY_BACKOFF_BASE_S": 1,
    # Plain HTTP on loopback: cookies without the Secure flag, or the browser drops them.
    "SESSION_COOKIE_SECURE": 0,
    "CSRF_COOKIE_SECURE": 0,
    "SECURE_HSTS_SECONDS": 0,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    def __init__(self, tmp_path: Path, **env):
        self.tmp, self.port = tmp_path, free_port()
        self.env = {**FAST, **env}
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[Process] = []
        self.agents: dict[str, Process] = {}

    def start(self, *, agents: list[dict]) -> "Cluster":
        self.web = self._start_web()
        self.procs.append(scheduler(self.tmp, "scheduler", **self.env))
        for node in agents:
            self.add_agent(node)
        return self

    def _start_web(self) -> Process:
        web = Process(
            ["-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "mlqueue.asgi:application"],
            self.tmp / f"web-{len(self.procs)}.log",
            **self.env,
        )
        self.procs.append(web)
        wait_for(self._web_up, timeout=30, what="the web server")
        return web

    def restart_web(self) -> None:
        """The web tier comes back after an outage (on the same port)."""
        self.web = self._start_web()

    def add_agent(self, node: dict, *, server: str | None = None, **options) -> Process:
        return self.add_fleet([node], name=node["name"], server=server, **options)

    def add_fleet(
        self,
        nodes: list[dict],
        *,
        name: str = "fleet",
        server: str | None = None,
        isolation: str = "none",
        workdir: Path | None = None,
        env: dict | None = None,
        args: tuple[str, ...] = (),
    ) -> Process:
        """One agent process running these nodes (as virtual nodes when more than one). It
        joins with MLQ_AGENT_JOIN_TOKEN from its environment, as in production. Tasks run as
        the agent's user unless `isolation="uid"`: the tests' jobs run this venv's Python,
        which lives where other users cannot reach. `args`: more of the agent's options."""
        if isolation == "uid" and "--task-uids" not in args:
            # A range of this cluster's own: another test's agent on this machine holds the default
            # one (an agent refuses to start on a range that overlaps a live agent's).
            first = 1_000_000 + self.port * 100 + len(self.agents) * 10_000_000
            args = ("--task-uids", f"{first}-{first + 99}", *args)
        fleet = self.tmp / f"{name}.json"
        fleet.write_text(
            json.dumps(
                [
                    {
                        "labels": {},
                        "address": "127.0.0.1",
                        "cpu_count": 64,
                        "memory_gb": 256,
                        "gpu_type": "H100",
                        "gpu_count": 8,
                        **node,
                    }
                    for node in nodes
                ]
            )
        )
        agent = Process(
            [
                "-m",
                "agents.node.daemon",
                "--server",
                server or self.url,
                "--fleet",
                str(fleet),
                "--workdir",
                str(workdir or self.tmp / "agents"),
                "--isolation",
                isolation,
                *args,
            ],
            self.tmp / f"agent-{name}.log",
            **{**self.env, **(env or {})},
        )
        self.agents[name] = agent
        self.procs.append(agent)
        return agent

    def _web_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path.name}\n{p.output()[-3000:]}" for p in self.procs)
