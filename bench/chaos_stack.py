"""The whole mlqueue the fault campaign attacks, every part a real process on this machine:

- its own Postgres and Redis (bench/chaos_services.py);
- a web tier of two daphne processes;
- two schedulers (`run_scheduler --lease 4 --renew 1`): one leads, one stands by;
- a Celery worker (the grace timers' fast path);
- three agent processes of four virtual nodes each (8 H100 apiece, 96 GPUs in all): agent-a
  talks to the first web process, agent-b to the second, agent-c to the second through the
  campaign's partition proxy. One agent is a third of the fleet: losing it is a node fault,
  not the "most nodes silent at once" that the leader blames on itself.

The database holds the demo's teams, users and quotas (`seed_demo`) but not its 36 nodes: those
never heartbeat, and a fleet of nodes that exist only on paper would make "can it ever run"
accept jobs for them and count them in the share of silent nodes."""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.chaos_proxy import PartitionProxy
from bench.chaos_services import ROOT, Child, Postgres, Redis, free_port, port_open, wait_until
from bench.chaos_store import Store
from bench.chaos_timings import SCHEDULER_LEASE_S, SCHEDULER_RENEW_S, Timings

AGENTS = {"agent-a": ("z1", "z1-r1"), "agent-b": ("z1", "z1-r2"), "agent-c": ("z2", "z2-r1")}
NODES_PER_AGENT = 4
USERS = ("alice", "paul")
SEED = """
import json
from django.contrib.auth import get_user_model
from django.core.management import call_command
from scheduling.models import Node
from teams.models import ApiToken
call_command("migrate", verbosity=0)
call_command("seed_demo", "--force", stdout=open("/dev/null", "w"))
Node.objects.all().delete()
users = get_user_model().objects
print(json.dumps({name: ApiToken.issue(user=users.get(username=name), name="chaos")[1] for name in %r}))
"""


def node_names(agent: str) -> list[str]:
    zone, rack = AGENTS[agent]
    return [f"{rack}-h100-{index:02d}" for index in range(1, NODES_PER_AGENT + 1)]


class Stack:
    def __init__(self, workdir: Path, timings: Timings):
        self.workdir, self.timings = workdir, timings
        self.ledger = workdir / "ledger.txt"
        self.failpoint_file = workdir / "failpoint"
        self.postgres, self.redis = Postgres(workdir), Redis(workdir)
        self.store = Store(self.postgres.url)
        self.web_ports = [free_port(), free_port()]
        self.webs: list[Child] = []
        self.schedulers: list[Child] = []
        self.celery: Child | None = None
        self.agents: dict[str, Child] = {}
        self.proxy: PartitionProxy | None = None
        self.tokens: dict[str, str] = {}
        self.web_start_s = 0.0  # how long a web process takes from its start to answering
        self.env = self._environment()

    # --- starting ---------------------------------------------------------------------------
    def start(self) -> None:
        """1. Postgres and Redis; 2. the schema and the demo's teams; 3. the web tier, the
        schedulers and Celery; 4. the agents; 5. wait until a leader runs and every node is
        READY."""
        self.postgres.init()
        self.postgres.start()
        self.postgres.create_database()
        self.redis.start()
        self.tokens = json.loads(self._manage("shell", "-c", SEED % (USERS,)).strip().splitlines()[-1])
        self._start_control_plane()
        self.proxy = PartitionProxy(self.web_ports[1])
        servers = {"agent-a": self.web_ports[0], "agent-b": self.web_ports[1], "agent-c": self.proxy.port}
        self.agents = {name: self._agent(name, port) for name, port in servers.items()}
        self.wait_ready(timeout=90)

    def _start_control_plane(self) -> None:
        started = time.monotonic()
        self.webs = [
            self._child(
                f"web-{i + 1}", ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mlqueue.asgi:application"]
            )
            for i, port in enumerate(self.web_ports)
        ]
        lease = ["--lease", str(SCHEDULER_LEASE_S), "--renew", str(SCHEDULER_RENEW_S)]
        self.schedulers = [self._child(f"scheduler-{i + 1}", ["manage.py", "run_scheduler", *lease]) for i in range(2)]
        self.celery = self._child(
            "celery",
            [
                "-m",
                "celery",
                "-A",
                "mlqueue",
                "worker",
                "--pool",
                "solo",
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
            ],
        )
        wait_until(self.api_answers, timeout=60, what="the web tier", interval=0.1)
        self.web_start_s = time.monotonic() - started

    def _environment(self) -> dict:
        t = self.timings
        drop = ("PYTEST", "DJANGO_", "DATABASE_URL", "REDIS_URL", "MLQ_")
        env = {key: value for key, value in os.environ.items() if not key.startswith(drop)}
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
                "DATABASE_URL": self.postgres.url,
                "REDIS_URL": self.redis.url,
                "DEBUG": "0",
                "SECRET_KEY": secrets.token_urlsafe(50),
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "SECURE_SSL_REDIRECT": "0",
                "SESSION_COOKIE_SECURE": "0",
                "CSRF_COOKIE_SECURE": "0",
                "SECURE_HSTS_SECONDS": "0",
                "PYTHONUNBUFFERED": "1",
                "MLQ_VAR_DIR": str(self.workdir / "var"),
                "MLQ_SUBMIT_RATE": "off",
                "MLQ_AGENT_JOIN_TOKEN": secrets.token_urlsafe(24),
                "MLQ_FAILPOINT_FILE": str(self.failpoint_file),
                "MLQ_OUTAGE_BOUND_S": str(t.bound_s),
                "MLQ_LOST_MARGIN_S": str(t.margin_s),
                "MLQ_HEARTBEAT_INTERVAL_S": str(t.heartbeat_s),
                "MLQ_PREEMPT_MIN_RUNTIME_S": "0",
                "MLQ_RETRY_BACKOFF_BASE_S": "1",
                # No automatic cordon for tasks lost with their agent: the campaign's agent faults
                # are its own, and a node whose agent it stopped three times within the rule's
                # window would stay cordoned, never READY again for the next fault
                # (tests/integration/test_node_health.py covers the rule).
                "MLQ_HEALTH_INFRA_FAILURES": "0",
            }
        )
        return env

    def _manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{result.stderr[-3000:]}")
        return result.stdout

    def _child(self, name: str, args: list[str]) -> Child:
        return Child(name, [sys.executable, *args], log_path=self.workdir / f"{name}.log", env=self.env).start()

    def _agent(self, name: str, port: int) -> Child:
        zone, rack = AGENTS[name]
        fleet = self.workdir / f"{name}.json"
        fleet.write_text(
            json.dumps(
                [
                    {
                        "name": node,
                        "zone": zone,
                        "rack": rack,
                        "labels": {},
                        "address": "127.0.0.1",
                        "cpu_count": 64,
                        "memory_gb": 256,
                        "gpu_type": "H100",
                        "gpu_count": 8,
                    }
                    for node in node_names(name)
                ]
            )
        )
        return self._child(
            name,
            [
                "-m",
                "agents.node.daemon",
                "--server",
                f"http://127.0.0.1:{port}",
                "--fleet",
                str(fleet),
                "--workdir",
                str(self.workdir / "agents" / name),
                "--isolation",
                "none",
            ],
        )

    # --- watching -----------------------------------------------------------------------------
    def leader(self) -> Child | None:
        """The scheduler the lease names, if it is one of ours and alive."""
        pid = self.store.leader_pid()
        return next((child for child in self.schedulers if child.alive() and child.pid == pid), None)

    def wait_ready(self, *, timeout: float) -> None:
        """Postgres answers, a live scheduler leads and every node is READY."""
        nodes = len(AGENTS) * NODES_PER_AGENT

        def ready() -> bool:
            try:
                return self.leader() is not None and self.store.ready_nodes() == nodes
            except Exception:  # the database is still coming back: keep waiting
                return False

        try:
            wait_until(ready, timeout=timeout, what=f"a leader and {nodes} READY nodes", interval=0.5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} ({self._not_ready()})") from None

    def _not_ready(self) -> str:
        """What wait_ready still waited for: the leader, and each node not READY with its state's reason."""
        try:
            waiting = self.store.rows("SELECT name, state, state_reason FROM agents_node WHERE state <> 'READY'")
            leader = "a leader" if self.leader() is not None else "no live leader"
        except Exception as exc:  # noqa: BLE001  the database itself is what is missing
            return f"the database does not answer: {exc}"
        return "; ".join([leader, *(f"{name} {state}: {reason}" for name, state, reason in sorted(waiting))])

    def api_answers(self) -> bool:
        """Both web processes answer an authenticated read that needs the database."""
        for port in self.web_ports:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/scheduler", headers={"Authorization": f"Bearer {self.tokens['alice']}"}
            )
            try:
                with urllib.request.urlopen(request, timeout=2) as response:
                    if response.status != 200:
                        return False
            except OSError:  # refused, timed out, or an HTTP error status
                return False
        return True

    def children(self) -> list[Child]:
        return [*self.webs, *self.schedulers, self.celery, *self.agents.values(), self.redis.child]

    def undo_faults(self) -> None:
        """After a fault that failed half-way: nothing left stopped, cut off or armed."""
        self.failpoint_file.unlink(missing_ok=True)
        if self.proxy is not None:
            self.proxy.restore()
        for child in self.children():
            if child is not None and child.alive():
                child.signal(signal.SIGCONT)

    def heal(self) -> list[str]:
        """Start again whatever died that no fault meant to keep down; returns their names."""
        dead = [child for child in self.children() if child is not None and not child.alive()]
        for child in dead:
            child.restart()
        if self.redis.child in dead:
            wait_until(lambda: port_open(self.redis.port), timeout=15, what="Redis")
        return [child.name for child in dead]

    # --- stopping -----------------------------------------------------------------------------
    def stop(self) -> None:
        """Everything down, in the reverse order of starting, whatever state the faults left."""
        for child in [*self.agents.values(), *self.schedulers, self.celery, *self.webs, self.redis.child]:
            if child is not None:
                child.kill()
        kill_tasks_writing_to(self.ledger)
        if self.proxy is not None:
            self.proxy.close()
        self.postgres.destroy()


def kill_tasks_writing_to(ledger: Path) -> int:
    """SIGKILL any job process left behind (their supervisors die with their agent; this is the
    second line): they are ours when their environment names this campaign's ledger."""
    marker = f"LEDGER={ledger}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    if killed:
        time.sleep(0.2)
    return killed
