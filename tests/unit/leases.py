"""A node lease for tests that start tasks without an agent: the supervisor refuses to start a
task without one; and a task run to its end under such a lease."""

import time
from pathlib import Path

from agents.node.runtime import TaskProcess
from agents.node.supervise import write_lease


def a_lease(directory: Path, *, seconds: float = 600, grace_s: float = 5) -> Path:
    path = directory / "lease"
    write_lease(path, until=time.monotonic() + seconds, grace_s=grace_s)
    return path


def run_task(assignment: dict, directory: Path, *, helpers: Path, timeout_s: float = 20) -> TaskProcess:
    """Start `assignment` in `directory`/node under a fresh lease and poll it until it exits
    (failing the test after `timeout_s`); the ended task, its events still to read."""
    task = TaskProcess(assignment, directory / "node", lease_file=a_lease(directory), helpers=helpers)
    deadline = time.monotonic() + timeout_s
    while not task.poll():
        assert time.monotonic() < deadline, f"the task still runs after {timeout_s:g} s"
        time.sleep(0.05)
    return task
