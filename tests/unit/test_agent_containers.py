"""The podman command line the agent builds for a task that names an image: its limits, its GPUs,
its user, its env by file and by name but never by value, and the images and options it refuses.
tests/e2e/test_containers.py runs it."""

import sys
import time
from pathlib import Path

import pytest

from agents.node.containers import Podman, container_name, split_env, visible_gpus
from agents.node.daemon import NodeAgent, parse_args
from agents.node.isolation import TaskUser
from agents.node.supervise import USAGE, parse

PODMAN = Podman(binary="/usr/bin/podman", extra=("--runtime", "runc")).for_node("z1-r1-h100-01", Path("/var/lib/a/n"))
USER = TaskUser(200123, 200124, "mlq-task-200123", pooled=True)
PEM = "-----BEGIN KEY-----\nMIIBVwIBADANBg\n-----END KEY-----\n"


def assignment(**changes) -> dict:
    return {
        "job_id": 12,
        "rank": 3,
        "attempt": 2,
        "image": "registry.example.com/train/llama:2026-04",
        "command": ["python", "-m", "train", "--config", "llama.yaml"],
        "cpus": 16,
        "memory_gb": 256,
        "gpu_indices": [2, 5],
        "env": {},
        **changes,
    }


def test_the_command_line_carries_the_limits_gpus_user_mounts_and_env_names_only():
    work, helpers = Path("/var/lib/a/n/jobs/12/rank-3/attempt-2/work"), Path("/var/lib/a/n/python")
    command = PODMAN.run_command(
        assignment(), work=work, helpers=helpers, user=USER, env_file_fd=7, by_name=["TLS_KEY"]
    )
    assert command == [
        "/usr/bin/podman",
        "run",
        "--rm",
        "--name",
        "mlq-z1-r1-h100-01-12-3-2",
        "--label",
        "mlqueue.agent=/var/lib/a/n",
        "--init",
        "--network",
        "host",
        "--security-opt",
        "no-new-privileges",
        "--cap-drop",
        "all",
        "--cpus",
        "16",
        "--memory",
        "256g",
        "--shm-size",
        "256g",
        "--device",
        "nvidia.com/gpu=2",
        "--device",
        "nvidia.com/gpu=5",
        "-v",
        f"{work}:{work}",
        "-w",
        str(work),
        "-v",
        f"{helpers}:{helpers}:ro",
        "--user",
        "200123:200124",
        "--env-file",
        "/dev/fd/7",
        "--env",
        "TLS_KEY",
        "--runtime",
        "runc",
        "registry.example.com/train/llama:2026-04",
        "python",
        "-m",
        "train",
        "--config",
        "llama.yaml",
    ]


def test_a_cpu_job_gets_no_device_and_without_root_no_user():
    command = PODMAN.run_command(
        assignment(gpu_indices=[]), work=Path("/w"), helpers=None, user=None, env_file_fd=4, by_name=[]
    )
    assert "--device" not in command and "--user" not in command and "--env" not in command


@pytest.mark.parametrize("bad", ["--privileged -v /:/host x", "-v/:/host", "x y", "x;rm -rf /", ""])
def test_an_image_cannot_add_options_to_podman(bad):
    with pytest.raises(OSError, match="not an image reference"):
        PODMAN.run_command(assignment(image=bad), work=Path("/w"), helpers=None, user=None, env_file_fd=4, by_name=[])


def test_values_go_in_the_env_file_and_only_those_with_line_breaks_by_name():
    lines, by_name = split_env({"GREETING": "hello world", "EMPTY": "", "TLS_KEY": PEM, "LD_LIBRARY_PATH": "/opt/x"})
    assert lines == "GREETING=hello world\nEMPTY=\nLD_LIBRARY_PATH=/opt/x\n"
    assert by_name == {"TLS_KEY": PEM}
    command = PODMAN.run_command(
        assignment(), work=Path("/w"), helpers=None, user=USER, env_file_fd=4, by_name=list(by_name)
    )
    assert not any("MIIBVwIBADANBg" in word or "hello world" in word for word in command)


@pytest.mark.parametrize("name", ["LD_PRELOAD", "CONTAINERS_CONF", "GODEBUG", "XDG_CONFIG_HOME", "HOME", "https_proxy"])
def test_a_value_with_a_line_break_never_goes_in_podmans_environment_under_a_name_podman_reads(name):
    with pytest.raises(OSError, match=f"{name}'s value has a line break"):
        split_env({name: "/tmp/x.so\n"})


def test_podmans_environment_is_the_agents_configuration_and_the_named_values_only(monkeypatch):
    monkeypatch.setenv("CONTAINERS_CONF", "/etc/site/containers.conf")
    monkeypatch.setenv("MLQ_AGENT_JOIN_TOKEN", "join-secret")
    monkeypatch.setenv("SECRET_KEY", "server-secret")
    env = PODMAN.environment({"TLS_KEY": PEM})
    assert env["CONTAINERS_CONF"] == "/etc/site/containers.conf" and env["TLS_KEY"] == PEM
    assert "MLQ_AGENT_JOIN_TOKEN" not in env and "SECRET_KEY" not in env and env["PATH"]


def test_inside_the_container_its_gpus_are_numbered_from_zero():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5", "A": "b"}, [2, 5]) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NVIDIA_VISIBLE_DEVICES": "2,5",
        "A": "b",
    }
    assert visible_gpus({}, []) == {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
    assert container_name("n-1.z1", (4, 0, 9)) == "mlq-n-1.z1-4-0-9"


def test_the_agent_takes_podman_or_a_hook_but_not_both(monkeypatch, tmp_path, capsys):
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    base = ["--server", "http://x", "--container-runtime", "podman"]
    args = parse_args([*base, "--container-runtime-args", "--runtime runc --ulimit nofile=1024:1024"])
    assert args.container == Podman(binary=str(fake), extra=("--runtime", "runc", "--ulimit", "nofile=1024:1024"))
    for bad, why in [
        ([*base, "--container-hook", "apptainer exec {image}"], "give one of them"),
        (["--server", "http://x", "--container-runtime-args", "--runtime runc"], "needs --container-runtime podman"),
        ([*base, "--container-runtime-args", "'unclosed"], "--container-runtime-args: No closing quotation"),
    ]:
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert why in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit):
        parse_args(base)
    assert "no podman on PATH" in capsys.readouterr().err


def test_the_supervisor_runs_podman_as_itself_keeping_the_env_file_open(tmp_path):
    env_file = (tmp_path / "env").open("w+b")
    env_file.write(b'{"PATH": "/usr/bin"}')
    env_file.seek(0)
    common = ["--env-fd", str(env_file.fileno()), "--agent-pid", "1", "--lease-file", "l", "--status-file", "s"]
    popen, files, command = parse([*common, "--container", "mlq-n-1-0-1", "--keep-fd", "9", "--", "/usr/bin/podman"])
    assert popen == {"env": {"PATH": "/usr/bin"}, "pass_fds": (9,)}  # no user or group: podman's own
    assert files["container"] == {"name": "mlq-n-1-0-1", "podman": "/usr/bin/podman", "env": {"PATH": "/usr/bin"}}
    with pytest.raises(ValueError, match="COMMAND"):
        parse([*common, "--container", "x", "--keep-fd", "9", "--uid", "5", "--gid", "5", "--", "podman"])
    assert "--container NAME --keep-fd K" in USAGE


def test_a_task_that_cannot_start_says_why_in_its_own_log(tmp_path):
    node = NodeAgent(
        server="http://127.0.0.1:9",
        join_token="x",
        node={"name": "n1", "zone": "z1", "rack": "r1", "cpu_count": 8, "memory_gb": 16},
        workdir=tmp_path,
        container_hook="podman run {image}",
    )
    node.renewed(time.monotonic(), 60)
    bad = assignment(image="-v/:/host", command=[sys.executable, "-c", "pass"], epoch=1)
    assert node.start(bad) is None
    log, exited = list(node.outbox)[-2:]
    assert log["type"] == "log" and log["stream"] == "stderr"
    assert log["data"] == "mlqueue: cannot start this task on n1: refusing image '-v/:/host': not an image reference\n"
    assert exited["type"] == "exited" and exited["exit_code"] == 127


def test_an_image_on_a_node_without_a_container_runtime_is_refused_as_the_nodes_failure(tmp_path):
    """It ran on the host and succeeded, with no word of the image (found by QA): now it does not
    run, its log says why, and its exit is the node's doing (INFRA: a restart elsewhere), not a
    failure of the job's own that spends its retries."""
    node = NodeAgent(
        server="http://127.0.0.1:9",
        join_token="x",
        node={"name": "n1", "zone": "z1", "rack": "r1", "cpu_count": 8, "memory_gb": 16},
        workdir=tmp_path,
    )
    node.renewed(time.monotonic(), 60)
    ran = tmp_path / "ran"
    job = assignment(image="pytorch/pytorch:2.3", command=["touch", str(ran)], epoch=1, gpu_indices=[])
    assert node.start(job) is None
    log, exited = list(node.outbox)[-2:]
    assert (log["type"], log["stream"], log["data"]) == (
        "log",
        "stderr",
        "mlqueue: cannot start this task on n1: image pytorch/pytorch:2.3 requested but this node has no "
        "container runtime (its agent runs images with --container-runtime podman or --container-hook)\n",
    )
    assert (exited["type"], exited["exit_code"], exited["cause"]) == ("exited", 127, "no_container_runtime")
    assert node.tasks == {} and not ran.exists()
    without_image = node.start(assignment(image="", command=["touch", str(ran)], epoch=1, attempt=3, gpu_indices=[]))
    without_image.process.wait(timeout=10)
    assert ran.exists()  # a job without an image still runs as a plain process
