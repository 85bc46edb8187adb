"""Noticing a task's confirmed checkpoints: `$MLQ_CHECKPOINT_DIR/.mlq-checkpoint`, written by
the job (mlqueue/checkpoint.py does it atomically) and read here by the agent, which is root.

The file and the directory are the job's: hostile. The watch costs one lstat per task every
CHECK_S; a file is read only when its identity (inode, size, mtime) changed, and only when it
is a plain file (no symbolic link, FIFO or device: opened with O_NOFOLLOW | O_NONBLOCK and
checked again on the open descriptor), at most MAX_BYTES, holding a JSON object with a
non-negative integer `step` and a finite `time`. Anything else is skipped, logged once per
version of the file, and never crashes the agent. What reaches the server is two numbers.

A file already there when the task starts belongs to an earlier attempt (or another job
sharing the directory): only a version written after the start counts. Ranks of a gang may
share one directory: each rank's task reports it for itself (the server keeps it per task).
"""

import json
import logging
import math
import os
import stat
import time
from pathlib import Path

log = logging.getLogger("mlqueue.agent")

MARKER = ".mlq-checkpoint"
MAX_BYTES = 4096
CHECK_S = 1.0
MAX_STEP = 2**63 - 1
MAX_TIME = 253402300799  # the server's bound (agents/protocol.py MAX_EPOCH_S)


def marker_path(checkpoint_dir: str, work: Path) -> Path | None:
    """Where the task's marker lies: its checkpoint directory (relative to its working
    directory, as the task sees it), or None for no directory or a URL (s3://...), which the
    agent cannot watch."""
    if not checkpoint_dir or "://" in checkpoint_dir or "\x00" in checkpoint_dir:
        return None
    return Path(os.path.join(work, checkpoint_dir)) / MARKER


def identity(path: Path | None) -> tuple | None:
    """What tells a new version of the file from the one seen last (None: there is none)."""
    if path is None:
        return None
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, stat.S_IFMT(info.st_mode)


def read_marker(path: Path) -> tuple[dict | None, str]:
    """({"step", "at"}, "") from a well-formed marker, else (None, why not)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return None, f"cannot stat it ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "not a plain file (a link, FIFO, device or directory)"
    if info.st_size > MAX_BYTES:
        return None, f"{info.st_size} bytes, more than the {MAX_BYTES} bytes allowed"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, f"cannot open it ({exc.strerror})"
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            return None, "replaced by something else than a plain file while being read"
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        return None, f"more than the {MAX_BYTES} bytes allowed"
    return parse_marker(data)


def parse_marker(data: bytes) -> tuple[dict | None, str]:
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "not JSON"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    step, at = record.get("step"), record.get("time")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        return None, "`step` is not a non-negative integer"
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at <= MAX_TIME:
        return None, "`time` is not a time in seconds since the epoch"
    return {"step": step, "at": float(at)}, ""


class CheckpointWatch:
    """One task's marker: `poll()` returns the checkpoint once per new valid version."""

    def __init__(self, path: Path | None, *, label: str = ""):
        self.path, self.label = path, label
        self.seen = identity(path)  # what was there before the task started is not its checkpoint
        self.next_check = 0.0

    def poll(self, *, force: bool = False) -> dict | None:
        if self.path is None:
            return None
        now = time.monotonic()
        if not force and now < self.next_check:
            return None
        self.next_check = now + CHECK_S
        current = identity(self.path)
        if current is None or current == self.seen:
            return None
        self.seen = current
        record, why = read_marker(self.path)
        if record is None:
            log.warning("%s: ignoring the checkpoint marker %s: %s", self.label, self.path, why)
        return record
