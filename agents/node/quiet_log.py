"""Warnings said again and again, logged once a minute: an agent whose node token an admin reset
warned three times every 2 s ("heartbeat refused", "cannot register with the node token", "...
with the join token") until its node was called lost, 469 lines for one node (QA)."""

import logging
import time

KEPT = 200  # distinct warnings remembered; past it the oldest are forgotten (said again at once)


class OncePerMinute:
    def __init__(self, log: logging.Logger, every_s: float = 60.0):
        self.log, self.every_s = log, every_s
        self.said: dict[str, tuple[float, int]] = {}  # text -> (when last logged, repeats since)

    def warning(self, message: str, *args) -> None:
        text, now = message % args, time.monotonic()
        logged_at, repeats = self.said.pop(text, (None, 0))
        if logged_at is not None and now - logged_at < self.every_s:
            self.said[text] = (logged_at, repeats + 1)
            return
        if repeats:
            text += f" (and {repeats} more time{'s' * (repeats != 1)} in the last {now - logged_at:.0f} s)"
        self.log.warning(text)
        self.said[message % args] = (now, 0)
        while len(self.said) > KEPT:
            del self.said[next(iter(self.said))]
