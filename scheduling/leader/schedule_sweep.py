"""The leader's guarantee for schedules: between passes, at most every MLQ_SCHEDULE_SWEEP_S
seconds, it fires the schedules due (scheduling/schedules.py). Celery beat is the fast path;
in embedded mode (no broker, no beat) this is the only firer. Not fenced by the epoch: the
claim in the database, not leadership, is what keeps a fire time from firing twice.
Maintenance windows (scheduling/maintenance.py) start and end the same way, checked every
pass (one indexed query): a drain is due on time, not at the next sweep."""

import logging
import time

from django.conf import settings
from django.db import DatabaseError

from scheduling.maintenance import run_due
from scheduling.schedules import fire_due

log = logging.getLogger(__name__)


class ScheduleSweep:
    def __init__(self, *, interval_s: float | None = None):
        self.interval_s = settings.MLQ_SCHEDULE_SWEEP_S if interval_s is None else interval_s
        self.last_run = -float("inf")

    def maybe_fire(self, *, now) -> int | None:
        """Fire what is due if the interval has passed since the last sweep; the number of fire
        times handled, or None when it was not time. One indexed query when nothing is due."""
        if time.monotonic() - self.last_run < self.interval_s:
            return None
        self.last_run = time.monotonic()
        try:
            fired = fire_due(now=now)
        except DatabaseError:
            raise  # the pass steps down as for any store error
        except Exception:  # a schedule's bug must not stop the passes
            log.exception("firing the due schedules failed; the next sweep tries again")
            return 0
        for fire in fired:
            log.info(
                "schedule %s, fire time %s: %s %s", fire.schedule_id, fire.scheduled_for, fire.outcome, fire.message
            )
        return len(fired)


def run_due_windows(*, now) -> None:
    """Start and end the maintenance windows due; a window's bug must not stop the passes."""
    try:
        started, ended = run_due(now=now)
    except DatabaseError:
        raise  # the pass steps down as for any store error
    except Exception:
        log.exception("starting or ending the due maintenance windows failed; the next pass tries again")
        return
    for window_id in started:
        log.info("maintenance #%s started: its nodes drain", window_id)
    for window_id in ended:
        log.info("maintenance #%s ended: the nodes it drained are uncordoned", window_id)
