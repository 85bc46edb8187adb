"""A job for the fault tests: it appends what it does, with timestamps, to the file $LEDGER,
so a test can check that no two attempts ever ran at once. On SIGTERM it "checkpoints"
(writes a line) and exits 0, as a well-behaved trainer would."""
import os
import signal
import sys
import time

LEDGER = os.environ["LEDGER"]
ATTEMPT, RANK = os.environ["MLQ_ATTEMPT"], os.environ["RANK"]
RUN_FOR = float(os.environ["RUN_FOR_FIRST"] if ATTEMPT == "1" else os.environ.get("RUN_FOR", "2"))


def note(what: str) -> None:
    with open(LEDGER, "a") as ledger:
        ledger.write(f"{ATTEMPT} {RANK} {what} {time.time():.3f}\n")


def checkpoint_and_exit(*_):
    note("checkpoint")
    sys.exit(0)


signal.signal(signal.SIGTERM, checkpoint_and_exit)
note("start")
end = time.time() + RUN_FOR
while time.time() < end:
    note("tick")
    time.sleep(0.1)
note("end")
