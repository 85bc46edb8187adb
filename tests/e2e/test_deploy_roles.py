"""The image's entrypoint runs each role as compose.yaml starts it (issue 19): the same argument
lists and the same server environment, read from deploy/compose.yaml, against a fresh database
of the suite's Postgres and the suite's Redis, with the compose host names (postgres, redis,
web-1) replaced by this machine's. `migrate` builds the schema from nothing, the web answers
/healthz and the API, of two schedulers one leads and the other takes over when it stops, the
Celery worker answers compose's ping, beat runs, and an agent with fake GPUs joins and its node
is READY. The health checks the files use (`entrypoint.sh check ...`) pass on the live processes.
No image is built: Docker has no daemon here (docs/deploy.md)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import yaml
from django.conf import settings

from tests.e2e.cluster import free_port
from tests.e2e.processes import ROOT, scratch_database_url, wait_for

pytestmark = pytest.mark.e2e
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
JOIN_TOKEN = "deploy-test-join-token"
PASSWORD = "deploy-test-password-9f2c"


class Role:
    """`deploy/entrypoint.sh ARGS...` as a process group whose output goes to a file."""

    def __init__(self, args: list[str], env: dict, log_path: Path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(ENTRYPOINT), *args],
            cwd="/",
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text()

    def terminate(self, timeout: float = 20) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.log.close()


def fresh_database() -> str:
    url = scratch_database_url("deploy")
    name = urlsplit(url).path.lstrip("/")
    admin = urlsplit(url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


def compose_services() -> dict:
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]


def compose_env(service: dict, overrides: dict) -> dict:
    """The service's environment from compose.yaml, `${VAR:-default}` resolved to its default and
    what this machine needs instead (the secrets compose requires, the stores' addresses) laid
    over it; PATH and HOME from the suite, DJANGO_SETTINGS_MODULE as the image sets it."""
    env = {}
    for key, value in service.get("environment", {}).items():
        env[key] = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))
    env.update(overrides)
    env.update(
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        HOME=os.environ.get("HOME", "/root"),
        DJANGO_SETTINGS_MODULE="mlqueue.settings",
        PYTHONUNBUFFERED="1",
        HOSTNAME=socket.gethostname(),
    )
    unresolved = [key for key, value in env.items() if "${" in value]
    assert not unresolved, f"compose variables with no test value: {unresolved}"
    return env


def command(service: dict, replacements: dict) -> list[str]:
    return [replacements.get(arg, arg) for arg in service["command"]]


def get(url: str, *, token: str | None = None, host: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if host:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def run_role(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def stack(tmp_path):
    services = compose_services()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    overrides = {
        "DATABASE_URL": fresh_database(),
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": "deploy-test-secret-key-0b7e4d2a91c5f3e8a6d0c4b2e9f7a1d3",
        "MLQ_AGENT_JOIN_TOKEN": JOIN_TOKEN,
        "MLQ_SECRET_ENV_KEYS": "Wq6b1Yb9m0zPj4Hc7Vb2kQx8rT3nL5sD0fG1hJ2kL3M=",
        "PORT": str(port),
        "BIND_ADDRESS": "127.0.0.1",
        "MLQ_RUN_DIR": str(tmp_path / "run"),
        "MLQ_VAR_DIR": str(tmp_path / "var"),
        "MLQ_HEARTBEAT_INTERVAL_S": "1",
    }
    (tmp_path / "run").mkdir()
    roles: list[Role] = []

    def start(name: str, *extra_args: str, **extra) -> Role:
        service = services[name]
        # The schedulers' own metrics port (9100 on all addresses in compose): a free one here.
        metrics_port = str(free_port())
        replacements = {
            "http://web-1:8000": url,
            "http://web-2:8000": url,
            "9100": metrics_port,
            "0.0.0.0": "127.0.0.1",
        }
        args = [*command(service, replacements), *extra_args]
        role = Role(args, compose_env(service, {**overrides, **extra}), tmp_path / f"{name}.log")
        role.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        roles.append(role)
        return role

    def env_of(name: str, **extra) -> dict:
        return compose_env(services[name], {**overrides, **extra})

    yield start, env_of, url, tmp_path
    for role in roles:
        role.stop()


def test_every_role_runs_as_compose_starts_it(stack):
    start, env_of, url, tmp_path = stack
    services = compose_services()

    # migrate: the schema from nothing; after it, nothing is left to wait for.
    migrate = run_role(services["migrate"]["command"], env_of("migrate"), timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    assert "Applying scheduling.0001" in migrate.stdout
    waited = run_role(["wait-for-migrations"], env_of("web-1"), timeout=60)
    assert waited.returncode == 0, waited.stderr

    # web: /healthz on the probe's terms (any Host, plain HTTP), the rest of the site on Django's.
    web = start("web-1")
    wait_for(lambda: get(f"{url}/healthz")[0] == 200, timeout=60, what=f"the web role:\n{web.output()}")
    assert json.loads(get(f"{url}/healthz", host="10.1.2.3:8000")[1]) == {"status": "ok"}
    assert get(f"{url}/api/v1/scheduler", host="10.1.2.3:8000")[0] == 400  # ALLOWED_HOSTS still holds
    # /metrics by the pod's address too, as an in-cluster Prometheus scrapes (its own checks hold).
    assert get(f"{url}/metrics", host="10.1.2.3:8000")[0] == 200
    assert get(f"{url}/api/v1/scheduler")[0] in (401, 403)

    # An operator's token, made through the `manage` role.
    admin_env = {**env_of("web-1"), "DJANGO_SUPERUSER_PASSWORD": PASSWORD}
    superuser = ["manage", "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"]
    created = run_role(superuser, admin_env)
    assert created.returncode == 0, created.stderr
    issued = run_role(["manage", "create_token", "ops", "--name", "deploy-test"], env_of("web-1"))
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()

    # Two schedulers, each with its own health file: one leads; stopped, the other takes over.
    (tmp_path / "run-1").mkdir()
    (tmp_path / "run-2").mkdir()
    first = start("scheduler-1", MLQ_RUN_DIR=str(tmp_path / "run-1"))
    second = start("scheduler-2", MLQ_RUN_DIR=str(tmp_path / "run-2"))

    def leader() -> dict | None:
        status, body = get(f"{url}/api/v1/scheduler", token=token)
        state = json.loads(body) if status == 200 else {}
        return state if state.get("leader") and state.get("last_pass_at") else None

    led = wait_for(leader, timeout=60, what=f"a leader:\n{first.output()}\n{second.output()}")
    # Each scheduler touches its health file once a loop: the one not leading may not have looped
    # yet when the other has made its first pass (its Django start is slower on a loaded machine).
    for run_dir in ("run-1", "run-2"):
        env = env_of("scheduler-1", MLQ_RUN_DIR=str(tmp_path / run_dir))
        wait_for(lambda env=env: run_role(["check", "scheduler"], env).returncode == 0, timeout=30, what=run_dir)
        check = run_role(["check", "scheduler"], env)
        assert check.returncode == 0, check.stderr
    leading, standby = (first, second) if led["leader"].endswith(f":{first.proc.pid}") else (second, first)
    # The leader's pass times reach Prometheus from the scheduler itself (no shared metrics files).
    status, body = get(leading.metrics_url)
    assert status == 200 and b"mlqueue_scheduler_pass_seconds_count" in body, leading.output()[-3000:]
    assert leading.terminate() == 0
    took_over = wait_for(
        lambda: (state := leader()) and state["epoch"] > led["epoch"] and state,
        timeout=40,
        what=f"the standby taking over:\n{standby.output()}",
    )
    assert took_over["leader"].endswith(f":{standby.proc.pid}")

    # The Celery worker answers compose's own health check; beat writes its schedule.
    worker = start("worker")
    ping = services["worker"]["healthcheck"]["test"][1].replace("$$HOSTNAME", "$HOSTNAME")
    wait_for(
        lambda: subprocess.run(["sh", "-c", ping], env=env_of("worker"), timeout=60).returncode == 0,
        timeout=90,
        interval=2,
        what=f"the worker answering a ping:\n{worker.output()}",
    )
    beat = start("beat")
    wait_for(
        lambda: run_role(["check", "beat"], env_of("beat")).returncode == 0,
        timeout=60,
        interval=1,
        what=f"beat's schedule file:\n{beat.output()}",
    )

    # An agent as compose runs it, less root: this suite's tasks would run as its own user.
    workdir = tmp_path / "agent"
    agent = start("agent-1", "--workdir", str(workdir), "--isolation", "none")
    node_name = services["agent-1"]["command"][services["agent-1"]["command"].index("--node-name") + 1]

    def ready() -> bool:
        status, body = get(f"{url}/api/v1/nodes", token=token)
        nodes = json.loads(body) if status == 200 else []
        nodes = nodes.get("results", nodes) if isinstance(nodes, dict) else nodes
        return any(node["name"] == node_name and node["state"] == "READY" for node in nodes)

    wait_for(ready, timeout=60, interval=0.5, what=f"node {node_name} READY:\n{agent.output()}")
    # The node is READY once the server has taken its heartbeat; the agent writes its lease file
    # when the reply reaches it, a moment later.
    agent_env = {**env_of("agent-1"), "MLQ_AGENT_WORKDIR": str(workdir)}
    wait_for(
        lambda: run_role(["check", "agent"], agent_env).returncode == 0,
        timeout=30,
        interval=0.5,
        what=f"the agent's lease file:\n{agent.output()}",
    )
    assert agent.terminate() == 0
    for role in (web, standby, worker, beat):
        assert role.proc.poll() is None, role.output()[-3000:]
