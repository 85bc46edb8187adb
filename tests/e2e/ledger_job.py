"""A job for the fault tests: it appends what it does, with timestamps, to the file $LEDGER,
so a test can check that no two attempts ever ran at once. On SIGTERM it "checkpoints"
(writes a line) and exits 0, as a well-behaved trainer would.

A line is `ATTEMPT RANK WHAT TIME`. Options for the fault campaign (bench/chaos.py), which
runs many jobs on one ledger, all off unless set:
- LEDGER_TAG_JOB=1: each line starts with the job's id (`JOB ATTEMPT RANK WHAT TIME`);
- IGNORE_SIGTERM=1: a SIGTERM is noted (`term`) and the job runs on, so only the SIGKILL at
  the end of its grace period stops it;
- TICK_S: how often it notes that it is alive (default 0.1 s)."""

import os
import signal
import sys
import time

LEDGER = os.environ["LEDGER"]
ATTEMPT, RANK = os.environ["MLQ_ATTEMPT"], os.environ["RANK"]
RUN_FOR = float(os.environ["RUN_FOR_FIRST"] if ATTEMPT == "1" else os.environ.get("RUN_FOR", "2"))
PREFIX = f"{os.environ['MLQ_JOB_ID']} " if os.environ.get("LEDGER_TAG_JOB") == "1" else ""
TICK_S = float(os.environ.get("TICK_S", "0.1"))


def note(what: str) -> None:
    with open(LEDGER, "a") as ledger:
        ledger.write(f"{PREFIX}{ATTEMPT} {RANK} {what} {time.time():.3f}\n")


def checkpoint_and_exit(*_):
    note("checkpoint")
    sys.exit(0)


signal.signal(
    signal.SIGTERM, (lambda *_: note("term")) if os.environ.get("IGNORE_SIGTERM") == "1" else checkpoint_and_exit
)
note("start")
end = time.time() + RUN_FOR
while time.time() < end:
    note("tick")
    time.sleep(TICK_S)
note("end")
