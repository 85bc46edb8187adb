"""A task's exit outlives its agent, and nothing of a task outlives its exit.

- An agent killed after its task exited, before a heartbeat reported the exit, lost the exit
  with its memory: the restarted agent did not hold the task, the server failed it as lost
  and ran a job that had exited 0 a second time (QA, job 41). The supervisor records the exit
  on disk as it comes; the next agent on the workdir reports it. A task killed because its
  agent died records none, and is lost as before.
- A task's background process (`sleep 7781 &`) or one that ignored SIGTERM lived on after the
  task's exit was reported, holding its GPUs (QA, `--isolation none`). The supervisor kills
  what is left in the task's process group once the task's main process exits.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.node.daemon import NodeAgent
from agents.node.supervise import EXIT_FILE
from tests.unit.test_agent_lease import NODE, assignment, wait_exit

ROOT = Path(__file__).resolve().parents[2]
SERVER = "http://127.0.0.1:9"
# An agent in a process of its own, which the test kills with SIGKILL: it starts the task and
# never looks at it again (it dies before any heartbeat could report the exit).
AGENT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from agents.node.daemon import NodeAgent
    agent = NodeAgent(server="{server}", join_token="x", node=json.loads(sys.argv[1]), workdir=Path(sys.argv[2]))
    agent.renewed(time.monotonic(), 600)
    agent.start(json.loads(sys.argv[3]))
    print("started", flush=True)
    time.sleep(600)
    """
).format(server=SERVER)


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie (dead, waiting for whoever reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


def wait_until(condition, *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s"
        time.sleep(0.02)


@pytest.fixture
def strays():
    """Processes a failing test may leave behind: killed at its end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pid_in(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip())
    return int(path.read_text())


def agent_killed_after(tmp_path: Path, command: list[str], *, task_ended) -> None:
    """Run an agent in a process of its own, start `command` (job 41) there, wait for
    `task_ended(pid_file)` and kill the agent with SIGKILL."""
    job = assignment(41, command)
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT, json.dumps(NODE), str(tmp_path), json.dumps(job)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout.readline() == "started\n"
        task_ended()
    finally:
        agent.kill()
        agent.wait(timeout=10)


def test_an_exit_its_killed_agent_never_reported_is_reported_by_the_next_agent(tmp_path):
    pid_file = tmp_path / "task-pid"
    command = ["/bin/sh", "-c", f"echo $$ > {pid_file}; sleep 0.5; echo finishing; exit 0"]
    recorded = tmp_path / NODE["name"] / "jobs" / "41" / "rank-0" / "attempt-1" / EXIT_FILE
    # Its supervisor records the exit a moment after the task is gone: the agent is killed once
    # it has (killed before, the next agent had nothing to report: a flaky run under load).
    ended = lambda: not alive(pid_in(pid_file)) and recorded.exists()  # noqa: E731
    agent_killed_after(tmp_path, command, task_ended=lambda: wait_until(ended))
    restarted = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    assert list(restarted.outbox) == [
        {"type": "exited", "job_id": 41, "rank": 0, "attempt": 1, "exit_code": 0, "signal": "", "cause": ""}
    ]
    assert restarted.start(assignment(41, command)) is None  # never twice, and not lost
    assert len(restarted.outbox) == 1
    restarted.outbox.flush(lambda batch: {"accepted": len(batch), "refused": []})
    reported = restarted.report(restarted.tasks[(41, 0, 1)])
    assert reported == {
        "job_id": 41,
        "rank": 0,
        "attempt": 1,
        "state": "exited",
        "exit_code": 0,
        "signal": "",
        "cause": "",
    }
    restarted.forget_reported_exits([reported])
    restarted.release()
    again = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    assert (again.tasks, list(again.outbox)) == ({}, [])  # reported once, not at every start


def test_a_task_killed_with_its_agent_records_no_exit_and_is_lost_as_before(tmp_path):
    pid_file = tmp_path / "task-pid"
    command = ["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]
    agent_killed_after(tmp_path, command, task_ended=lambda: pid_in(pid_file))
    wait_until(lambda: not alive(pid_in(pid_file)))  # its supervisor killed it as the agent died
    assert not (tmp_path / NODE["name"] / "jobs" / "41" / "rank-0" / "attempt-1" / EXIT_FILE).exists()
    restarted = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    assert restarted.tasks == {}
    assert restarted.start(assignment(41, command)) is None
    assert list(restarted.outbox) == [
        {"type": "exited", "job_id": 41, "rank": 0, "attempt": 1, "exit_code": None, "signal": "", "cause": "lost"}
    ]


@pytest.mark.parametrize(
    ("script", "exit_code", "signal_name"), [("exit 3", 3, ""), ("kill -TERM $$", None, "SIGTERM")]
)
def test_an_agent_dropped_before_it_saw_the_exit_leaves_it_to_the_next(tmp_path, script, exit_code, signal_name):
    first = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    first.renewed(time.monotonic(), 60)
    task = first.start(assignment(8, ["/bin/sh", "-c", script]))
    task.process.wait(timeout=10)  # the agent never polls it: its exit is nowhere in its memory
    first.release()
    restarted = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    assert [(e["type"], e["attempt"], e["exit_code"], e["signal"]) for e in restarted.outbox] == [
        ("exited", 1, exit_code, signal_name)
    ]


def test_what_a_task_left_running_in_the_background_dies_with_it(tmp_path, strays):
    agent = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    agent.renewed(time.monotonic(), 60)
    pid_file = tmp_path / "orphan-pid"
    task = agent.start(assignment(9, ["/bin/sh", "-c", f"sleep 7781 & echo $! > {pid_file}; exit 0"]))
    orphan = pid_in(pid_file)
    strays.append(orphan)
    assert task.process.wait(timeout=10) == 0  # the supervisor alone: the agent has not looked
    wait_until(lambda: not alive(orphan), timeout=3)


def test_a_process_that_ignores_sigterm_dies_when_its_stopped_task_exits(tmp_path, strays):
    agent = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    agent.renewed(time.monotonic(), 60)
    pid_file = tmp_path / "stubborn-pid"
    stubborn = f"sh -c 'trap \"\" TERM; echo $$ > {pid_file}; exec sleep 7782' &"
    task = agent.start(assignment(10, ["/bin/bash", "-c", f'{stubborn} trap "exit 143" TERM; sleep 600 & wait']))
    worker = pid_in(pid_file)
    strays.append(worker)
    agent.signal(task.key, "TERM", why="cancelled")
    wait_exit(task, timeout=10)
    assert task.exit_code == 143
    wait_until(lambda: not alive(worker), timeout=3)


def test_a_task_the_agent_stopped_on_its_way_out_is_reported_lost_by_the_next_agent(tmp_path):
    """SIGTERM to the agent: its last report goes before it stops its tasks, so their exits
    are reported by its next start, as the agent's doing (a trainer exits 0 on SIGTERM: that
    is no success)."""
    agent = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    agent.renewed(time.monotonic(), 60)
    ready = tmp_path / "ready"
    agent.start(assignment(11, ["/bin/sh", "-c", f"trap 'exit 0' TERM; touch {ready}; while :; do sleep 0.1; done"]))
    wait_until(ready.exists)
    agent.shutdown_tasks()
    agent.release()
    restarted = NodeAgent(server=SERVER, join_token="x", node=NODE, workdir=tmp_path)
    assert [(e["type"], e["exit_code"], e["cause"]) for e in restarted.outbox] == [("exited", 0, "lost")]
