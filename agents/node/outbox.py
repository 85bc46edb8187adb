"""The agent's events on their way to the server, in order, in batches.

A network error or a 5xx is the server's trouble: the same batch goes again later, without
limit. A refusal (4xx) is the event's: the batch is sent again one event at a time to find the
bad one, which is tried a few times more and then dropped, with a `dropped` event in its place
so the job's timeline says what was lost. One bad event never blocks the others.
"""

import logging

from agents.node.client import ApiError

log = logging.getLogger("mlqueue.agent")
BATCH = 200
MAX_REFUSALS = 3
RETRY_STATUSES = (401, 408, 425, 429)  # not the event's fault: the token is being renewed, or a limit


class Outbox:
    def __init__(self, name: str):
        self.name = name
        self.events: list[dict] = []
        self.singles = 0  # how many events to send one at a time, after a batch was refused
        self.refusals = 0  # of the event at the head, sent alone

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def append(self, event: dict) -> None:
        self.events.append(event)

    def extend(self, events: list[dict]) -> None:
        self.events.extend(events)

    def flush(self, post) -> None:
        """Send what is waiting with `post(batch)`, until done or the server fails us."""
        while self.events:
            batch = self.events[: 1 if self.singles else BATCH]
            try:
                post(batch)
            except ApiError as exc:
                if exc.status >= 500 or exc.status in RETRY_STATUSES:
                    return
                self._refused(batch, exc)
                continue
            except OSError:
                return
            del self.events[: len(batch)]
            self.singles, self.refusals = max(0, self.singles - 1), 0

    def _refused(self, batch: list[dict], exc: ApiError) -> None:
        if len(batch) > 1:
            self.singles = len(batch)
            return
        self.refusals += 1
        if self.refusals < MAX_REFUSALS:
            return
        event = self.events.pop(0)
        self.singles, self.refusals = max(0, self.singles - 1), 0
        log.error(
            "%s: dropped a %s event of job %s rank %s attempt %s after %d refusals: %s",
            self.name,
            event.get("type"),
            event.get("job_id"),
            event.get("rank"),
            event.get("attempt"),
            MAX_REFUSALS,
            exc,
        )
        if event.get("type") != "dropped":
            self.events.insert(0, dropped(event, str(exc)))


def dropped(event: dict, why: str) -> dict:
    """What the server is told instead of an event it refused."""
    about = {key: event[key] for key in ("job_id", "rank", "attempt") if isinstance(event.get(key), int)}
    detail = f"{event.get('type')} event" + (
        f" ({event.get('stream')} at offset {event.get('offset')}, {len(event.get('data') or '')} characters)"
        if event.get("type") == "log"
        else ""
    )
    return {
        "type": "dropped",
        "job_id": 0,
        "rank": 0,
        "attempt": 1,
        **about,
        "data": f"the agent dropped a {detail} the server refused {MAX_REFUSALS} times: {why}"[:1000],
    }
