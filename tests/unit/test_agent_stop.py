"""A stop the agent asks for (a cancel, a preemption, an early stop) reaches every process of the
task exactly once: a trainer's SIGTERM handler (a checkpoint) runs once and is not cut short by
a second SIGTERM, and a task that exits 0 on SIGTERM is reported as exiting 0, not as killed by
the signal (Python resets its handlers as it exits: a second SIGTERM then kills it)."""

import sys
import time

from agents.node.runtime import TaskProcess
from tests.unit.leases import a_lease

# The task and a worker it forked (same process group) each note every SIGTERM they get in
# $NOTES; the worker exits at once, the task a moment later with 0, as a trainer that saved.
TRAINER = """
import os, signal, sys, time
def noting(who):
    def on_term(*_):
        with open(os.environ["NOTES"], "a") as notes:
            notes.write(f"{who} term\\n")
    return on_term
if os.fork() == 0:
    signal.signal(signal.SIGTERM, lambda *_: (noting("worker")(), os._exit(0)))
    time.sleep(60)
    os._exit(1)
signal.signal(signal.SIGTERM, noting("trainer"))
with open(os.environ["NOTES"], "a") as notes:
    notes.write("up\\n")
while "trainer term" not in open(os.environ["NOTES"]).read():
    time.sleep(0.01)
time.sleep(0.5)  # saving a checkpoint: a second SIGTERM would land here
os.wait()
sys.exit(0)
"""


def test_a_stop_reaches_the_task_and_its_workers_once_and_its_exit_code_stands(tmp_path):
    notes = tmp_path / "notes"
    task = TaskProcess(
        {
            "job_id": 1,
            "rank": 0,
            "attempt": 1,
            "command": [sys.executable, "-c", TRAINER],
            "env": {"NOTES": str(notes)},
        },
        tmp_path,
        lease_file=a_lease(tmp_path),
    )
    deadline = time.monotonic() + 10
    while not (notes.exists() and "up" in notes.read_text()):
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.02)
    time.sleep(0.2)  # the worker has installed its handler

    task.send("TERM")
    while not task.poll():
        assert time.monotonic() < deadline, "the task did not exit"
        time.sleep(0.02)

    assert sorted(notes.read_text().splitlines()) == ["trainer term", "up", "worker term"]
    assert (task.exit_code, task.exit_signal) == (0, "")
