"""The agent keeps its secrets from its tasks: a task's environment is built from nothing, the
join token never stays in the environment (nor in /proc/<pid>/environ), the node token is a
0600 file, and one event the server refuses never blocks the others."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from agents.node import credentials
from agents.node.client import ApiError
from agents.node.daemon import NodeAgent, parse_args
from agents.node.outbox import MAX_REFUSALS, Outbox
from agents.node.runtime import DEFAULT_PASS_ENV, check_pass_env, task_environment

NODE = {
    "name": "n1",
    "zone": "z1",
    "rack": "r1",
    "gpu_type": "H100",
    "gpu_count": 8,
    "cpu_count": 8,
    "memory_gb": 16,
    "labels": {},
    "address": "127.0.0.1",
}
AGENT_SECRETS = {
    "MLQ_AGENT_JOIN_TOKEN": "join-secret-1",
    "DATABASE_URL": "postgres://u:pw@db/x",
    "REDIS_URL": "redis://:pw@r/0",
    "SECRET_KEY": "django-secret",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "SOME_OTHER_VARIABLE": "not on the allow-list",
}


def run_task(tmp_path, env: dict, command: list[str], **agent_options) -> dict:
    node = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path, **agent_options)
    node.renewed(time.monotonic(), 60)  # as after a heartbeat: tasks start only under a lease
    task = node.start(
        {
            "job_id": 7,
            "rank": 0,
            "attempt": 1,
            "epoch": 1,
            "command": command,
            "image": "",
            "gpu_indices": [0],
            "cpus": 1,
            "memory_gb": 1,
            "grace_period_seconds": 1,
            "checkpoint_dir": "",
            "env": env,
        }
    )
    task.process.wait(timeout=20)
    deadline = time.monotonic() + 5
    while not task.poll() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads("".join(e["data"] for e in task.log_events(final=True) if e["stream"] == "stdout"))


PRINT_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


def test_a_task_sees_none_of_the_agents_environment_beyond_the_allow_list(tmp_path, monkeypatch):
    for name, value in AGENT_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TZ", "Europe/Paris")
    seen = run_task(tmp_path, {"MLQ_JOB_ID": "7", "WANDB_PROJECT": "p", "CUDA_VISIBLE_DEVICES": "0"}, PRINT_ENV)
    assert not set(AGENT_SECRETS) & set(seen)
    assert not any(value in json.dumps(seen) for value in AGENT_SECRETS.values())
    assert {k: seen[k] for k in ("MLQ_JOB_ID", "WANDB_PROJECT", "CUDA_VISIBLE_DEVICES", "TZ")} == {
        "MLQ_JOB_ID": "7",
        "WANDB_PROJECT": "p",
        "CUDA_VISIBLE_DEVICES": "0",
        "TZ": "Europe/Paris",
    }
    added = {"PYTHONPATH", "MLQ_METRICS_FILE"}
    assert set(seen) <= set(DEFAULT_PASS_ENV) | {"MLQ_JOB_ID", "WANDB_PROJECT", "CUDA_VISIBLE_DEVICES"} | added
    # PYTHONPATH is the agent's own addition: a directory holding only the job helpers, never its site-packages.
    assert seen["PYTHONPATH"] == str(tmp_path / NODE["name"] / "python")
    # So is MLQ_METRICS_FILE: a file in the task's own working directory, one per rank and attempt.
    assert seen["MLQ_METRICS_FILE"].startswith(str(tmp_path / NODE["name"] / "jobs") + "/")
    assert seen["MLQ_METRICS_FILE"].endswith("/rank-0/attempt-1/work/.mlq-metrics.jsonl")


def test_pass_env_adds_names_but_never_the_agents_or_servers_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert parse_args(
        ["--server", "http://x", "--pass-env", "HTTPS_PROXY,NCCL_SOCKET_IFNAME", "--isolation", "none"]
    ).pass_env[-2:] == ("HTTPS_PROXY", "NCCL_SOCKET_IFNAME")
    for forbidden in ("MLQ_AGENT_JOIN_TOKEN", "DATABASE_URL", "SECRET_KEY", "MLQ_ANYTHING"):
        with pytest.raises(ValueError, match="never passes"):
            check_pass_env([forbidden])
    env = task_environment({}, pass_env=("HTTPS_PROXY", "DATABASE_URL"), workdir=tmp_path, user=None)
    assert env == {"HTTPS_PROXY": "http://proxy:3128"}


def test_the_join_token_is_not_a_command_line_option():
    with pytest.raises(SystemExit):
        parse_args(["--server", "http://x", "--token", "secret"])


WIPE = """
import sys
from agents.node.credentials import take_env
token = take_env("MLQ_AGENT_JOIN_TOKEN")
environ = open("/proc/self/environ", "rb").read()
print(token, b"wiped-secret-value" in environ, "MLQ_AGENT_JOIN_TOKEN" in __import__("os").environ)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/environ"), reason="needs Linux's /proc")
def test_the_join_token_read_from_the_environment_is_wiped_from_proc_environ():
    env = {**os.environ, "MLQ_AGENT_JOIN_TOKEN": "wiped-secret-value"}
    out = subprocess.run([sys.executable, "-c", WIPE], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["wiped-secret-value", "False", "False"], out.stderr


def test_a_token_file_is_read_and_one_others_can_read_is_warned_about(tmp_path, caplog):
    path = tmp_path / "join-token"
    path.write_text("mlqj_abc\n")
    path.chmod(0o644)
    assert credentials.join_token_from(path) == "mlqj_abc"
    assert "can be read by other users" in caplog.text
    with pytest.raises(SystemExit, match="cannot read --token-file"):
        credentials.join_token_from(tmp_path / "missing")


def test_the_node_token_is_kept_in_a_file_only_the_agent_can_read(tmp_path):
    node = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    node.joined({"token": "mlqn_secret", "heartbeat_interval_s": 5, "lease_s": 20})
    assert node.node_token_path.read_text() == "mlqn_secret"
    assert stat.S_IMODE(node.node_token_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(node.state_path.parent.stat().st_mode) == 0o711
    node.release()  # stopped
    restarted = NodeAgent(server="http://127.0.0.1:9", join_token="", node=NODE, workdir=tmp_path)
    assert [what for _, what in restarted.credentials()] == [f"node token in {node.node_token_path}"]


# --- the outbox -------------------------------------------------------------------------------


class Server:
    """Refuses (400) any batch holding an event with "bad"; or fails every post with `status`."""

    def __init__(self, status: int | None = None):
        self.status, self.got, self.posts = status, [], 0

    def post(self, batch):
        self.posts += 1
        if self.status:
            raise ApiError(self.status, "down")
        if any(event.get("bad") for event in batch):
            raise ApiError(400, "events.0.data: bad")
        self.got.extend(batch)


def event(n: int, **extra) -> dict:
    return {"type": "log", "job_id": 1, "rank": 0, "attempt": 1, "stream": "stdout", "offset": n, "data": "x", **extra}


def test_one_refused_event_is_dropped_after_a_few_tries_and_the_rest_go_through():
    outbox, server = Outbox("n1"), Server()
    outbox.extend([event(0), event(1), event(2, bad=True), event(3)])
    for _ in range(10):
        outbox.flush(server.post)
    assert [e["offset"] for e in server.got if e["type"] == "log"] == [0, 1, 3]
    [dropped] = [e for e in server.got if e["type"] == "dropped"]
    assert dropped["data"].startswith(
        f"the agent dropped a log event (stdout at offset 2, 1 characters) the server refused {MAX_REFUSALS} times"
    )
    assert len(outbox) == 0


@pytest.mark.parametrize("status", [500, 503, 429, 401])
def test_when_the_server_is_in_trouble_nothing_is_dropped(status):
    outbox, server = Outbox("n1"), Server(status)
    outbox.extend([event(0), event(1)])
    for _ in range(10):
        outbox.flush(server.post)
    assert len(outbox) == 2 and server.posts == 10
