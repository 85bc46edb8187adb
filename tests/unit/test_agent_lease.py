"""The node lease, enforced where a stuck agent cannot stop it: each task's supervisor reads the
deadline the agent writes at each renewal, sends SIGTERM a grace before it and SIGKILL at it,
and notes why, so the exit is reported as the lease's doing and not the task's."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.node.daemon import NodeAgent
from agents.node.isolation import TaskUsers, processes_of
from agents.node.runtime import SUPERVISOR, TaskProcess
from agents.node.supervise import kill_grace, write_lease
from tests.unit.leases import a_lease

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
# Ignores SIGTERM (notes it), so only the SIGKILL at the deadline ends it.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True))\n"
    "print('up', flush=True)\ntime.sleep(60)",
]


def assignment(job_id: int, command: list[str], **more) -> dict:
    """What the server assigns a test's task: one GPU, a 1 s grace, nothing else."""
    return {
        "job_id": job_id,
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
        "env": {},
        **more,
    }


def start(tmp_path, command, lease) -> TaskProcess:
    return TaskProcess(
        {"job_id": 1, "rank": 0, "attempt": 1, "command": command, "env": {}}, tmp_path, lease_file=lease
    )


def wait_exit(task: TaskProcess, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while not task.poll():
        assert time.monotonic() < deadline, "the task outlived its lease"
        time.sleep(0.05)
    return time.monotonic()


def output(task: TaskProcess) -> dict[str, str]:
    texts = {"stdout": "", "stderr": ""}
    for event in task.log_events(final=True):
        texts[event["stream"]] += event["data"]
    return texts


def test_the_supervisor_stops_a_task_when_the_lease_runs_out_even_with_the_agent_stuck(tmp_path):
    lease = a_lease(tmp_path, seconds=1.5, grace_s=0.5)
    until = time.monotonic() + 1.5
    task = start(tmp_path, STUBBORN, lease)  # no agent at all: nobody renews, nobody signals
    ended = wait_exit(task, timeout=10)
    assert until + 0.4 <= ended <= until + 1.5  # SIGTERM at the deadline (ignored), SIGKILL a grace later
    assert (task.exit_signal, task.cause) == ("SIGKILL", "lease_expired")
    texts = output(task)
    assert texts["stdout"] == "up\nterm\n"
    assert (
        "mlqueue: the node agent could not renew its lease within the outage bound: SIGTERM, SIGKILL in 0.5 s"
        in texts["stderr"]
    )
    assert task.report()["cause"] == "lease_expired"


def test_a_lease_renewed_in_time_keeps_the_task_running(tmp_path):
    lease = a_lease(tmp_path, seconds=1.0, grace_s=0.3)
    task = start(tmp_path, [sys.executable, "-c", "import time; time.sleep(2.5); print('done')"], lease)
    for _ in range(5):  # the agent renews every half second
        time.sleep(0.5)
        write_lease(lease, until=time.monotonic() + 1.0, grace_s=0.3)
    wait_exit(task, timeout=10)
    assert (task.exit_code, task.cause) == (0, "")
    assert output(task)["stdout"] == "done\n"


def test_a_task_is_not_started_without_a_lease(tmp_path):
    task = start(tmp_path, [sys.executable, "-c", "print('ran')"], tmp_path / "no-lease")
    wait_exit(task, timeout=10)
    texts = output(task)
    assert task.exit_code == 2 and texts["stdout"] == ""
    assert texts["stderr"] == f"mlqueue: no node lease in {tmp_path / 'no-lease'}: not starting the task\n"


def test_the_agent_stops_its_tasks_when_its_lease_ends_and_says_why(tmp_path):
    agent = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    agent.renewed(time.monotonic(), 2.0)  # a short test lease: SIGTERM at its end, SIGKILL 0.5 s later
    assert kill_grace(2.0) == 0.5 and kill_grace(300) == 5.0
    task = agent.start(assignment(7, STUBBORN))
    time.sleep(1.8)
    agent.enforce_lease()
    assert task.signals_sent == set()  # the lease still runs: an outage shorter than it kills nothing
    time.sleep(0.3)
    agent.enforce_lease()
    assert task.signals_sent == {"TERM"} and task.cause == "lease_expired"
    task.process.wait(timeout=10)
    agent.watch_tasks()  # the agent's loop notices the exit
    [exited] = [event for event in agent.outbox if event["type"] == "exited"]
    assert (exited["signal"], exited["cause"]) == ("SIGKILL", "lease_expired")


def test_an_attempt_lost_in_an_agent_restart_is_reported_not_left_assigned(tmp_path):
    first = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    first.renewed(time.monotonic(), 60)
    job = assignment(7, ["sleep", "60"])
    task = first.start(job)  # then the agent dies before it could report the start
    os.killpg(task.process.pid, signal.SIGKILL)  # and its supervisor kills the task with it (no exit recorded)
    task.process.wait(timeout=10)
    first.release()  # and its lock on the node directory with it
    restarted = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    assert restarted.start(job) is None  # never twice
    assert list(restarted.outbox) == [
        {"type": "exited", "job_id": 7, "rank": 0, "attempt": 1, "exit_code": None, "signal": "", "cause": "lost"}
    ]


def test_a_supervisor_whose_agent_died_before_it_could_watch_starts_nothing(tmp_path):
    """The agent died between starting the supervisor and the supervisor's first look (found by
    the fault campaign: the task then ran on, unwatched). Its parent is not the agent any more."""
    marker = tmp_path / "ran"
    env_file = tmp_path / "env.json"
    env_file.write_text("{}")
    with open(env_file, "rb") as env:
        dead_agent = subprocess.Popen(["true"])
        dead_agent.wait()
        supervisor = subprocess.run(
            [
                sys.executable,
                "-I",
                SUPERVISOR,
                "--env-fd",
                str(env.fileno()),
                "--agent-pid",
                str(dead_agent.pid),
                "--lease-file",
                str(a_lease(tmp_path)),
                "--status-file",
                str(tmp_path / "status"),
                "--",
                "/bin/sh",
                "-c",
                f"touch {marker}",
            ],
            pass_fds=(env.fileno(),),
            capture_output=True,
            text=True,
        )
    assert supervisor.returncode == 1 and not marker.exists()
    assert supervisor.stderr == "mlqueue: the node agent is gone: not starting the task\n"


def test_an_agent_given_a_relative_workdir_still_starts_its_tasks(tmp_path, monkeypatch):
    """`make demo` runs the agent with `--workdir var/agents`: the supervisor, which runs in the
    task's own directory, must still find the node's lease (found running the demo)."""
    monkeypatch.chdir(tmp_path)
    agent = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=Path("agents"))
    agent.renewed(time.monotonic(), 60)
    task = agent.start(assignment(7, [sys.executable, "-c", "pass"]))
    wait_exit(task, timeout=10)
    assert task.exit_code == 0, output(task)["stderr"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_supervisor_ends_killed_by_the_signal_that_killed_its_task(sig):
    """A task killed by SIGKILL (the OOM killer) was reported as exit code 1, with this
    module's traceback (no handler can be set for SIGKILL) in the task's own stderr."""
    ended = subprocess.run(
        [sys.executable, "-c", f"from agents.node.supervise import _exit_like; _exit_like({-sig})"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=30,
    )
    assert (ended.returncode, ended.stderr) == (-sig, "")


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0), reason="switching users needs root")
def test_a_lapsed_lease_kills_what_its_tasks_users_left_running_outside_their_groups(tmp_path):
    """A node the leader calls lost gives its jobs' slots to other jobs: nothing may go on
    running there as those users, a daemon that left the task's process group included."""
    tmp_path.chmod(0o711)
    users = TaskUsers(uids=range(200700, 200701))
    agent = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path, task_users=users)
    agent.renewed(time.monotonic(), 2.0)
    task = agent.start(assignment(8, ["/bin/sh", "-c", "setsid sleep 300 & sleep 300"], task_slot=0))
    deadline = time.monotonic() + 5
    while len(processes_of(200700)) < 3 and time.monotonic() < deadline:  # sh, its sleep, the escaped one
        time.sleep(0.05)
    time.sleep(2.6)  # past the lease and its kill grace
    agent.enforce_lease()
    task.process.wait(timeout=10)
    deadline = time.monotonic() + 5
    while processes_of(200700) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(200700) == []
