"""Failpoints: named places in a pass where the fault campaign (bench/chaos.py) kills the
leader, to prove a crash at any point leaves nothing half-done or run twice.

Off unless MLQ_FAILPOINT_FILE is set (never in production). The campaign writes one point's
name to that file; the scheduler that reaches that point removes the file and SIGKILLs itself
(no cleanup, no `finally`: as a power cut would)."""

import logging
import os
import signal

from django.conf import settings

log = logging.getLogger(__name__)

POINTS = (
    "pass.after_sweep",  # the sweep committed, nothing of this pass applied
    "apply.inside_place",  # inside a placement's fenced transaction, before it commits
    "apply.after_place",  # a placement committed, its agents not yet woken
    "apply.inside_preempt",  # inside a preemption's fenced transaction
    "apply.before_reasons",  # placements and preemptions done, reasons not yet written
    "pass.before_record",  # everything applied, the pass not yet recorded on the lease
)


def hit(name: str) -> None:
    path = settings.MLQ_FAILPOINT_FILE
    if not path:
        return
    try:
        with open(path) as handle:
            wanted = handle.read().strip()
    except OSError:
        return
    if wanted != name:
        return
    try:
        os.unlink(path)
    except OSError:
        pass
    log.error("failpoint %s: killing this scheduler (pid %s)", name, os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
