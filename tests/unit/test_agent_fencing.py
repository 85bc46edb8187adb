"""The agent's own fencing: it refuses an assignment from an epoch older than the highest it
has seen, and an attempt it has already run, even across a restart."""

import sys
import time

from agents.node.daemon import NodeAgent

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


def assignment(*, epoch: int, attempt: int = 1) -> dict:
    return {
        "job_id": 7,
        "rank": 0,
        "attempt": attempt,
        "epoch": epoch,
        "command": [sys.executable, "-c", "pass"],
        "image": "",
        "gpu_indices": [0],
        "cpus": 1,
        "memory_gb": 1,
        "grace_period_seconds": 1,
        "checkpoint_dir": "",
        "env": {"MLQ_ATTEMPT": str(attempt)},
    }


def agent(tmp_path) -> NodeAgent:
    node = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    node.renewed(time.monotonic(), 60)  # as after a heartbeat: tasks start only under a lease
    return node


def wait_exit(task) -> None:
    deadline = time.monotonic() + 10
    while not task.poll() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_an_assignment_from_an_older_epoch_is_refused(tmp_path):
    node = agent(tmp_path)
    node.obey({"highest_epoch": 5, "kill": [], "signals": [], "assignments": [assignment(epoch=4)]})
    assert node.tasks == {}
    assert node.refusal(assignment(epoch=4)) == "epoch 4 is older than epoch 5, already seen"
    started = node.start(assignment(epoch=5))
    assert started is not None
    wait_exit(started)
    assert started.exit_code == 0


def test_an_attempt_already_run_is_refused_even_after_a_restart(tmp_path):
    first = agent(tmp_path)
    task = first.start(assignment(epoch=3))
    wait_exit(task)
    assert first.start(assignment(epoch=3)) is None
    first.release()  # it has stopped: its node directory is free

    restarted = agent(tmp_path)  # same workdir: it remembers
    assert restarted.highest_epoch == 3
    assert restarted.refusal(assignment(epoch=3)) == "this attempt already ran here"
    assert restarted.refusal(assignment(epoch=3, attempt=2)) == ""


def test_the_agent_reports_starts_and_exits_with_its_logs(tmp_path):
    node = agent(tmp_path)
    job = assignment(epoch=1)
    job["command"] = [sys.executable, "-c", "print('hello'); import sys; sys.exit(3)"]
    task = node.start(job)
    task.process.wait(timeout=10)
    node.watch_tasks()  # the loop notices the exit and ships the output
    kinds = [(e["type"], e.get("data"), e.get("exit_code")) for e in node.outbox]
    assert kinds[0] == ("started", None, None)
    assert ("log", "hello\n", None) in kinds
    assert kinds[-1] == ("exited", None, 3)


# Notes a SIGTERM and carries on: only a SIGKILL ends it.
DEAF = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: None)\nprint('up', flush=True)\ntime.sleep(60)"


def test_the_agent_kills_at_the_stops_deadline_without_the_servers_kill(tmp_path):
    """QA: the SIGKILL after a stop's grace came from the leader only; with no scheduler running
    a draining job's processes outlived their deadline. The reply's `kill_in_s` is kept."""
    node = agent(tmp_path)
    task = node.start({**assignment(epoch=1), "command": [sys.executable, "-c", DEAF]})
    time.sleep(0.5)  # its handler installed
    order = {"job_id": 7, "rank": 0, "attempt": 1, "signal": "TERM", "reason": "DRAIN", "kill_in_s": 0.5}
    sent = time.monotonic()
    node.obey({"highest_epoch": 1, "kill": [], "signals": [order], "assignments": []})
    node.obey({"highest_epoch": 1, "kill": [], "signals": [{**order, "kill_in_s": 30}], "assignments": []})
    while task.running and time.monotonic() < sent + 10:
        node.watch_tasks()
        time.sleep(0.05)
    assert task.exit_signal == "SIGKILL" and time.monotonic() - sent < 5  # the earliest deadline kept
