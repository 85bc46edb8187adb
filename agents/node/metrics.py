"""Tailing a task's metrics file, `$MLQ_METRICS_FILE`: JSON lines appended by the job
(`mlqueue.report`, mlqueue/metrics_report.py) or by hand, read here by the agent and shipped as
`metric` events.

The file lies in the task's own working directory: it is the job's, and hostile. It is read
only while it is a plain file (opened with O_NOFOLLOW | O_NONBLOCK and checked again on the
open descriptor), owned by the task's user when the task has one, at most READ_BYTES per poll,
from the offset reached last time. A line is a report once its newline arrives (the last line
counts without one when the task has exited). A bad line (not JSON, a bad step, name or value,
longer than MAX_LINE_BYTES) is skipped, counted and logged a few times, and those few are
sent as `metric_skipped` events (the job's timeline shows them); nothing in the file can crash
the agent. Each report's `seq` is its line number, so a report sent twice is stored
once. A file replaced or truncated is read again from its start, its lines numbered on from
where the old one ended. Reports past line MAX_REPORTS are not shipped.
"""

import json
import logging
import os
import stat
import time
from pathlib import Path

from mlqueue.metrics_report import MAX_LINE_BYTES, MetricsError, check_record

log = logging.getLogger("mlqueue.agent")

FILE_NAME = ".mlq-metrics.jsonl"
CHECK_S = 1.0
READ_BYTES = 256 * 1024  # per poll: one chatty task never holds up the agent's loop
MAX_REPORTS = 100_000  # lines per attempt, as the server's MLQ_MAX_METRIC_REPORTS default
LOGGED_BAD_LINES = 3  # per attempt: the count says the rest


class MetricsTail:
    """One attempt's metrics file: `poll()` returns the reports completed since the last call,
    each {"seq", "step", "time", "values"}. `offset` and `lines` say where reading resumes."""

    def __init__(self, path: Path, *, owner_uid: int | None = None, label: str = "", offset: int = 0, lines: int = 0):
        self.path, self.owner_uid, self.label = path, owner_uid, label
        self.offset, self.lines = offset, lines  # bytes read of the current file, lines numbered so far
        self.fd: int | None = None  # the file being read, held open
        self.file_id: tuple | None = None  # its (dev, inode)
        self.partial = b""  # a line without its newline yet
        self.skipping = False  # inside a line longer than MAX_LINE_BYTES, until its newline
        self.bad = self.shipped = self.dropped = 0
        self.skipped: list[dict] = []  # the first bad lines, {seq, data}, for the server (`take_skipped`)
        self.refused = ""  # why the file was last refused (logged once per reason)
        self.next_check = 0.0

    def poll(self, *, final: bool = False) -> list[dict]:
        now = time.monotonic()
        if not final and now < self.next_check:
            return []
        self.next_check = now + CHECK_S
        data = self._read(whole=final)
        reports = self._lines(data, final=final)
        return self._capped(reports)

    # --- reading ------------------------------------------------------------------------------
    def _read(self, *, whole: bool) -> bytes:
        """New bytes of the file, or b"" (no file yet, nothing new)."""
        fd = self._current()
        if fd is None:
            return b""
        if os.fstat(fd).st_size < self.offset:
            self._restart()  # truncated
        os.lseek(fd, self.offset, os.SEEK_SET)
        chunks, budget = [], READ_BYTES * (16 if whole else 1)
        while budget > 0:
            chunk = os.read(fd, min(budget, READ_BYTES))
            if not chunk:
                break
            chunks.append(chunk)
            budget -= len(chunk)
        data = b"".join(chunks)
        self.offset += len(data)
        return data

    def _current(self) -> int | None:
        """The descriptor of the file being read. It stays open between polls: the file it names
        cannot be freed and its inode reused by a new file that would pass for it. A new plain
        file at the path is read from its start; while the path holds nothing readable, the file
        already open is read on."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return self.fd  # nothing reported yet, or removed: what was open is still the task's
        if self.fd is not None and (info.st_dev, info.st_ino) == self.file_id:
            return self.fd
        fd = self._open(info)
        if fd is None:
            return self.fd
        if self.fd is not None:
            os.close(self.fd)
            self._restart()
        self.fd, self.file_id = fd, (info.st_dev, info.st_ino)
        return fd

    def _open(self, info: os.stat_result) -> int | None:
        why = self._refusal(info)
        if not why:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError as exc:
                why = f"cannot open it ({exc.strerror})"
            else:
                opened = os.fstat(fd)
                if (opened.st_dev, opened.st_ino) == (info.st_dev, info.st_ino) and not self._refusal(opened):
                    self.refused = ""
                    return fd
                os.close(fd)
                why = "replaced while being opened"
        if why != self.refused:
            self.refused = why
            log.warning("%s: not reading the metrics file %s: %s", self.label, self.path, why)
        return None

    def _refusal(self, info: os.stat_result) -> str:
        if not stat.S_ISREG(info.st_mode):
            return "not a plain file (a link, FIFO, device or directory)"
        if self.owner_uid is not None and info.st_uid != self.owner_uid:
            return f"owned by uid {info.st_uid}, not the task's {self.owner_uid}"
        return ""

    def _restart(self) -> None:
        """A new file (or the same one truncated): read it from its start; numbering goes on."""
        log.warning(
            "%s: the metrics file %s was replaced or truncated: reading it from its start", self.label, self.path
        )
        if self.partial or self.skipping:
            self.lines += 1  # the old file's unfinished line ends here
        self.offset, self.partial, self.skipping = 0, b"", False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # --- parsing ------------------------------------------------------------------------------
    def _lines(self, data: bytes, *, final: bool) -> list[dict]:
        reports = []
        pieces = data.split(b"\n")
        tail = pieces.pop()  # after the last newline: not a line yet
        for piece in pieces:
            whole, skip = self.partial + piece, self.skipping
            self.partial, self.skipping = b"", False
            self.lines += 1
            found = None if skip else self._parse(whole)
            if found is not None:
                reports.append(found)
        self._keep(tail)
        if final and (self.partial or self.skipping):
            whole, skip = self.partial, self.skipping
            self.partial, self.skipping = b"", False
            self.lines += 1
            found = None if skip else self._parse(whole)
            if found is not None:
                reports.append(found)
        return reports

    def _keep(self, tail: bytes) -> None:
        """Hold an unfinished line, or only remember to skip it when it is already too long."""
        if self.skipping:
            return
        self.partial += tail
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial, self.skipping = b"", True
            self._bad(f"longer than {MAX_LINE_BYTES} bytes", line=self.lines + 1)

    def _parse(self, raw: bytes) -> dict | None:
        if len(raw) > MAX_LINE_BYTES:
            return self._bad(f"longer than {MAX_LINE_BYTES} bytes")
        text = raw.strip()
        if not text:
            return None  # a blank line: numbered, not a report, not an error
        try:
            record = check_record(json.loads(text.decode("utf-8")), default_time=time.time())
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # MetricsError is a ValueError
            return self._bad(str(exc) if isinstance(exc, MetricsError) else "not JSON")
        return {"seq": self.lines, **record}

    def _bad(self, why: str, *, line: int | None = None) -> None:
        self.bad += 1
        if self.bad <= LOGGED_BAD_LINES:
            log.warning("%s: skipping line %d of the metrics file: %s", self.label, line or self.lines, why)
            self.skipped.append({"seq": line or self.lines, "data": why, "last": self.bad == LOGGED_BAD_LINES})
        return None

    def take_skipped(self) -> list[dict]:
        """The bad lines found since the last call (the first LOGGED_BAD_LINES of the attempt):
        the job's timeline says so, where the job's owner looks, not only this agent's log."""
        found, self.skipped = self.skipped, []
        return found

    def _capped(self, reports: list[dict]) -> list[dict]:
        """Only the first MAX_REPORTS lines' reports go out (the server keeps no more)."""
        kept = [report for report in reports if report["seq"] <= MAX_REPORTS]
        if len(kept) < len(reports) and not self.dropped:
            log.warning("%s: metric reports past line %d are not shipped", self.label, MAX_REPORTS)
        self.dropped += len(reports) - len(kept)
        self.shipped += len(kept)
        return kept


def metrics_path(work: Path) -> Path:
    """Where a task's reports go: its own working directory (one per rank and attempt)."""
    return work / FILE_NAME
