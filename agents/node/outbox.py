"""The agent's events on their way to the server, in order, in batches.

The agent's loop adds events (starts, exits, log chunks, ...) and its shipping thread sends them
(agents/node/daemon.py), so that however much a task prints, shipping it never holds up a
heartbeat or a look at the tasks. Everything here is behind one lock.

A batch is sized in bytes, to fit the server's body limit (MLQ_MAX_BODY_BYTES, 256 KiB unless
a 413 names another): a batch the server finds too large is sent again in halves (a log event
alone, split in two: offsets stay true), and batches grow back by doubling after each success.

A network error or a 5xx is the server's trouble: the same batch goes again later, without
limit. A refusal (4xx) is the event's: the batch is sent again one event at a time to find the
bad one, which is tried a few times more and then dropped, with a `dropped` event in its place
so the job's timeline says what was lost. One bad event never blocks the others.

A log stream the server answers is `capped` (MLQ_MAX_LOG_CHARS stored) is shipped no further:
its chunks still waiting here are dropped, and the agent reads no more of its file.
"""

import http.client
import json
import logging
import re
import threading
import time

from agents.node.client import ApiError

log = logging.getLogger("mlqueue.agent")
BATCH = 500  # events at most in one request (the server takes 1,000)
DEFAULT_BODY_BYTES = 256 * 1024  # the server's MLQ_MAX_BODY_BYTES by default
MIN_BATCH_BYTES = 4 * 1024
EMPTY_BODY = len(json.dumps({"events": []}))
MAX_REFUSALS = 3
RETRY_STATUSES = (401, 408, 425, 429)  # not the event's fault: the token is being renewed, or a limit
LIMIT_SAID = re.compile(r"limit of (\d+) bytes")  # mlqueue.errors.BODY_TOO_LARGE


def size_of(event: dict) -> int:
    """The bytes an event takes in a request's body (the client sends ASCII JSON)."""
    return len(json.dumps(event))


def log_key(event: dict) -> tuple:
    return event.get("job_id"), event.get("rank"), event.get("attempt"), event.get("stream")


class Outbox:
    def __init__(self, name: str, *, body_bytes: int = DEFAULT_BODY_BYTES):
        self.name = name
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.added = threading.Event()  # set by each append: the shipping thread wakes
        self.body_bytes = body_bytes  # the server's limit, as far as the agent knows
        self.batch_bytes = body_bytes  # what the next batch may take: halved by a 413
        self.log_chars = 0  # of the log chunks waiting: the agent reads no more while it is high
        self.capped: set[tuple] = set()  # (job, rank, attempt, stream) the server keeps no more of
        self.singles = 0  # how many events to send one at a time, after a batch was refused
        self.refusals = 0  # of the event at the head, sent alone
        self.progress_at = time.monotonic()  # the last batch the server took (or nothing waited)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        with self.lock:
            return iter(list(self.events))

    def append(self, event: dict) -> None:
        self.extend([event])

    def extend(self, events: list[dict]) -> None:
        if not events:
            return
        with self.lock:
            self.events.extend(events)
            self.log_chars += sum(len(e.get("data") or "") for e in events if e.get("type") == "log")
        self.added.set()

    def holds(self, key: tuple[int, int, int]) -> bool:
        """Whether an event of this attempt is still waiting to go."""
        with self.lock:
            return any((e.get("job_id"), e.get("rank"), e.get("attempt")) == key for e in self.events)

    def is_capped(self, key: tuple) -> bool:
        with self.lock:
            return key in self.capped

    def flush(self, post, *, deadline: float | None = None) -> bool:
        """Send what is waiting with `post(batch)` (which returns the server's answer), until
        done, the server fails us (False), or `deadline` (time.monotonic()) has passed."""
        while self.events and (deadline is None or time.monotonic() < deadline):
            batch = self._next_batch()
            try:
                answer = post(batch)
            except ApiError as exc:
                if exc.status == 413:
                    self._too_large(batch, exc)
                    continue
                if exc.status >= 500 or exc.status in RETRY_STATUSES:
                    return False
                self._refused(batch, exc)
                continue
            except (OSError, http.client.HTTPException, ValueError):  # a cut-off answer, one not JSON
                return False
            self._sent(batch, answer if isinstance(answer, dict) else {})
        if not self.events:
            self.progress_at = time.monotonic()
        return True

    def stalled_for(self) -> float:
        """Seconds since the server last took a batch while events waited (0 when none wait)."""
        return 0.0 if not self.events else time.monotonic() - self.progress_at

    def _next_batch(self) -> list[dict]:
        """The events at the head that fit in `batch_bytes`: one at least, a log chunk split
        until it fits; one alone while looking for a refused event."""
        with self.lock:
            while size_of(self.events[0]) + EMPTY_BODY > self.batch_bytes and _splittable(self.events[0]):
                self.events[0:1] = split(self.events[0])
            if self.singles:
                return [self.events[0]]
            batch, size = [], EMPTY_BODY
            for event in self.events[:BATCH]:
                size += size_of(event) + (2 if batch else 0)
                if batch and size > self.batch_bytes:
                    break
                batch.append(event)
            return batch

    def _sent(self, batch: list[dict], answer: dict) -> None:
        with self.lock:
            self.progress_at = time.monotonic()
            self._forget(len(batch))
            self.singles, self.refusals = max(0, self.singles - 1), 0
            self.batch_bytes = min(self.body_bytes, self.batch_bytes * 2)
            capped = {log_key(stream) for stream in answer.get("capped") or () if isinstance(stream, dict)}
            if capped - self.capped:
                self.capped |= capped
                self._drop_capped()
                log.info("%s: the server keeps no more of %s", self.name, sorted(capped))

    def _drop_capped(self) -> None:
        """Chunks of capped streams would only be thrown away there (the lock is held)."""
        kept, chars = [], 0
        for event in self.events:
            if event.get("type") == "log" and log_key(event) in self.capped:
                continue
            kept.append(event)
            chars += len(event.get("data") or "") if event.get("type") == "log" else 0
        self.events, self.log_chars = kept, chars

    def _forget(self, count: int) -> None:
        """The first `count` events have gone (the lock is held)."""
        gone = self.events[:count]
        self.log_chars -= sum(len(e.get("data") or "") for e in gone if e.get("type") == "log")
        del self.events[:count]

    def _too_large(self, batch: list[dict], exc: ApiError) -> None:
        """413: the server's limit is below this batch. The next is half its size (and within a
        limit the answer names); a log chunk sent alone is split in two."""
        said = LIMIT_SAID.search(str(exc))
        with self.lock:
            if said:
                self.body_bytes = max(MIN_BATCH_BYTES, int(said.group(1)))
            size = EMPTY_BODY + sum(size_of(e) + 2 for e in batch)
            self.batch_bytes = max(MIN_BATCH_BYTES, min(self.body_bytes, size // 2))
            alone = len(batch) == 1
            if alone and _splittable(self.events[0]):
                self.events[0:1] = split(self.events[0])
                return
        if alone:  # an event that is not text and too large: it cannot go
            self._refused(batch, exc)

    def _refused(self, batch: list[dict], exc: ApiError) -> None:
        with self.lock:
            if len(batch) > 1:
                self.singles = len(batch)
                return
            self.refusals += 1
            if self.refusals < MAX_REFUSALS:
                return
            event = self.events[0]
            self._forget(1)
            self.singles, self.refusals = max(0, self.singles - 1), 0
            if event.get("type") != "dropped":
                self.events.insert(0, dropped(event, str(exc)))
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


def _splittable(event: dict) -> bool:
    return event.get("type") == "log" and len(event.get("data") or "") > 1


def split(event: dict) -> list[dict]:
    """A log chunk as two, the second at the offset where the first ends."""
    data, half = event["data"], len(event["data"]) // 2
    return [{**event, "data": data[:half]}, {**event, "offset": event["offset"] + half, "data": data[half:]}]


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
