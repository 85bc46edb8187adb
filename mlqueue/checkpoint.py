"""Confirming checkpoints from inside a job: stdlib only, safe to import anywhere.

    from mlqueue import checkpoint

    if checkpoint.due():                      # MLQ_CHECKPOINT_INTERVAL_S since the last one
        path = save_my_model(step)            # the job saves its state, however it likes
        checkpoint.done(step=step, path=path)  # then says so

`done()` writes `$MLQ_CHECKPOINT_DIR/.mlq-checkpoint` (`{"step", "time", "path"}`) atomically;
the node agent notices it and reports the checkpoint, which the scheduler counts as the point
the job's work is safe up to (what a preemption would lose is measured from there). With a
`path` and `MLQ_CHECKPOINT_RETAIN_LAST_N` set, the checkpoint paths older than the last N are
removed, only where they lie inside MLQ_CHECKPOINT_DIR. See docs/checkpoints.md.

This runs in the job's own process, as the job's user: never in the node agent.
"""

import json
import math
import os
import shutil
import stat
import tempfile
import time

MARKER = ".mlq-checkpoint"
# What the agent reads (agents/node/checkpoints.py): a marker past these it skips, so the job
# would believe a checkpoint confirmed that never is.
MAX_BYTES = 4096
MAX_STEP = 2**63 - 1
MAX_TIME = 253402300799
HISTORY = ".mlq-checkpoint-history-rank{rank}.json"  # per rank: ranks sharing a directory never race on one file
_last_done: float | None = None
_loaded_at = time.time()


NO_DIRECTORY = "MLQ_CHECKPOINT_DIR is not set: the job's spec has no checkpoint block"
# The agent watches only a local or mounted path (agents/node/checkpoints.py `marker_path`).
URL_DIRECTORY = (
    "MLQ_CHECKPOINT_DIR is a URL ({folder}): the node agent cannot watch it, so no checkpoint of "
    "this job can be confirmed; give checkpoint.path a local or mounted directory "
    "(docs/checkpoints.md)"
)


class CheckpointError(RuntimeError):
    """The checkpoint could not be confirmed (no MLQ_CHECKPOINT_DIR, a URL, an unwritable directory)."""


def directory() -> str:
    """The job's checkpoint directory (the spec's `checkpoint.path`), or "" when it has none."""
    return os.environ.get("MLQ_CHECKPOINT_DIR", "")


def _positive(name: str, kind: type):
    """The variable `name` as a positive `kind`, or None when unset, malformed or not positive."""
    try:
        value = kind(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def interval_s() -> float | None:
    """How often the job's spec asks for a checkpoint (`interval_minutes`), in seconds."""
    return _positive("MLQ_CHECKPOINT_INTERVAL_S", float)


def due(*, now: float | None = None) -> bool:
    """True when the spec's interval has passed since the last `done()` in this process (or
    since this module was loaded, before the first). Without an interval: False."""
    every = interval_s()
    if every is None:
        return False
    since = _last_done if _last_done is not None else _loaded_at
    return (time.time() if now is None else now) - since >= every


def done(*, step: int, path: str | None = None, now: float | None = None) -> None:
    """Confirm that the job's state up to `step` is saved (at `path`, when given)."""
    global _last_done
    folder = directory()
    if not folder:
        raise CheckpointError(NO_DIRECTORY)
    if "://" in folder:  # as the agent tells one; os.makedirs would make ./s3:/bucket/38 instead
        raise CheckpointError(URL_DIRECTORY.format(folder=_shown(folder)))
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise CheckpointError(f"step must be an integer from 0 to 2**63 - 1, not {_shown(step)}")
    at = time.time() if now is None else now
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at <= MAX_TIME:
        raise CheckpointError(f"now must be a time in seconds since the epoch, not {at!r}")
    record = {"step": step, "time": float(at)}
    if path is not None:
        record["path"] = str(path)
    if len(json.dumps(record).encode()) > MAX_BYTES:
        raise CheckpointError(f"the record is over the {MAX_BYTES} bytes the agent reads: shorten the path")
    os.makedirs(folder, exist_ok=True)
    _write_atomically(os.path.join(folder, MARKER), json.dumps(record))
    _last_done = at
    if path is not None:
        _retain(folder, str(path))


def _write_atomically(target: str, text: str) -> None:
    """tmp + fsync + rename: the agent never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".mlq-checkpoint.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # the agent (and the gang's other ranks) may read it
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def retain_last_n() -> int | None:
    return _positive("MLQ_CHECKPOINT_RETAIN_LAST_N", int)


def _retain(folder: str, path: str) -> None:
    """Remember `path`; with MLQ_CHECKPOINT_RETAIN_LAST_N, remove the paths older than the last N."""
    keep = retain_last_n()
    history_path = os.path.join(folder, HISTORY.format(rank=os.environ.get("RANK", "0")))
    history = [p for p in _read_history(history_path) if p != path] + [path]
    if keep is not None and len(history) > keep:
        for old in history[:-keep]:
            remove_inside(folder, old)
        history = history[-keep:]
    _write_atomically(history_path, json.dumps(history))


def _read_history(path: str) -> list[str]:
    try:
        with open(path) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return []
    return [p for p in found if isinstance(p, str)] if isinstance(found, list) else []


def inside(folder: str, path: str) -> str | None:
    """`path` as an absolute path strictly inside `folder` reached through no symbolic link
    (the folder itself may be one), or None."""
    root = os.path.abspath(folder)
    target = os.path.abspath(path if os.path.isabs(path) else os.path.join(root, path))
    if os.path.commonpath([root, target]) != root or target == root:
        return None
    parts = os.path.relpath(target, root).split(os.sep)
    current = root
    for part in parts[:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):  # a link or a file: never followed
                return None
        except OSError:
            return None
    if os.path.basename(target) == MARKER or os.path.basename(target).startswith(".mlq-checkpoint"):
        return None
    return target


def remove_inside(folder: str, path: str) -> bool:
    """Remove an old checkpoint (a file, a link itself, or a directory tree, whose links are
    removed, never followed); anything outside `folder` is left alone."""
    target = inside(folder, path)
    if target is None:
        return False
    try:
        mode = os.lstat(target).st_mode
        if stat.S_ISDIR(mode):
            shutil.rmtree(target)
        else:
            os.unlink(target)
    except OSError:
        return False
    return True


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
