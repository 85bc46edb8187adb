"""Reporting metrics from inside a job: stdlib only, safe to import anywhere.

    import mlqueue

    mlqueue.report(step=100, val_loss=0.31, acc=0.9)
    mlqueue.report({"eval/acc": 0.88}, step=100)      # names that are not Python identifiers

Each call appends one JSON line to `$MLQ_METRICS_FILE`, which the node agent sets for each task
(one file per rank and attempt, so ranks never share one), tails, and ships to the server:

    {"step": 100, "time": 1764600000.25, "metrics": {"val_loss": 0.31, "acc": 0.9}}

The same lines written by hand count too (`time` may be left out: the agent then stamps the
time it read the line). Outside mlqueue (no MLQ_METRICS_FILE) a report is checked, then dropped
with one warning, so the same script runs on a laptop. See docs/job-metrics.md.

This runs in the job's own process, as the job's user: never in the node agent. The agent
imports the rules below (`check_record`) to read the lines back.
"""

import json
import math
import os
import re
import sys
import time
import warnings

ENV = "MLQ_METRICS_FILE"
# letters, digits, "_", ".", "/" and "-", starting with a letter, digit or "_": val_loss, eval/acc
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,99}\Z")
MAX_VALUES = 64  # per report
MAX_STEP = 2**63 - 1
MAX_TIME = 253402300799  # the last second a datetime holds (the server's bound)
MAX_LINE_BYTES = 16 * 1024  # a longer line is skipped by the agent

BAD_STEP = "step must be a non-negative integer, not {value!r:.60}"
NO_VALUES = "a report needs at least one metric, e.g. report(step=1, loss=0.5)"
TOO_MANY = "a report holds at most {limit} metrics, not {count}"
BAD_NAME = (
    "metric name {name!r:.120}: use letters, digits, '_', '.', '/' and '-' (at most 100, e.g. val_loss, eval/acc)"
)
BAD_VALUE = "metric {name!r:.120}: {value!r:.60} is not a finite number"
BAD_TIME = "time must be seconds since the epoch, not {value!r:.60}"
NOT_SET = f"{ENV} is not set (not running under mlqueue): metrics reports are dropped"

_warned = False


class MetricsError(ValueError):
    """A report that cannot be kept: a bad step, name or value."""


def check_step(step) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise MetricsError(BAD_STEP.format(value=step))
    return step


def check_values(values: dict) -> dict[str, float]:
    """The values as floats, or MetricsError naming the first bad name or value."""
    if not isinstance(values, dict) or not values:
        raise MetricsError(NO_VALUES)
    if len(values) > MAX_VALUES:
        raise MetricsError(TOO_MANY.format(limit=MAX_VALUES, count=len(values)))
    checked = {}
    for name, value in values.items():
        if not isinstance(name, str) or not NAME.match(name):
            raise MetricsError(BAD_NAME.format(name=name))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MetricsError(BAD_VALUE.format(name=name, value=value))
        try:
            number = float(value)
        except OverflowError:  # an integer past the largest float
            raise MetricsError(BAD_VALUE.format(name=name, value=value)) from None
        if not math.isfinite(number):
            raise MetricsError(BAD_VALUE.format(name=name, value=value))
        checked[name] = number
    return checked


def check_time(at) -> float:
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at <= MAX_TIME:
        raise MetricsError(BAD_TIME.format(value=at))
    return float(at)


def check_record(record, *, default_time: float) -> dict:
    """A line read back, as {"step", "time", "values"}: `time` defaults to `default_time`."""
    if not isinstance(record, dict):
        raise MetricsError("a report is a JSON object")
    unknown = set(record) - {"step", "time", "metrics"}
    if unknown:
        raise MetricsError(f"unknown field {sorted(unknown)[0]!r}: a report has step, time and metrics")
    at = record.get("time")
    return {
        "step": check_step(record.get("step")),
        "time": default_time if at is None else check_time(at),
        "values": check_values(record.get("metrics")),
    }


def line(*, step: int, values: dict, at: float) -> str:
    """The JSON line for one report (no spaces: the agent reads many of them)."""
    record = {"step": check_step(step), "time": check_time(at), "metrics": check_values(values)}
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


def report(metrics: dict | None = None, /, *, step: int, **values) -> dict | None:
    """Report `values` (and `metrics`, for names that are not Python identifiers) at `step`.
    Returns what was written, or None outside mlqueue (after the same checks)."""
    merged = {**(metrics or {}), **values}
    text = line(step=step, values=merged, at=time.time())
    path = os.environ.get(ENV, "")
    if not path:
        _warn_once()
        return None
    _append(path, text.encode())
    return json.loads(text)


def _append(path: str, data: bytes) -> None:
    """One write on an O_APPEND descriptor: a line lands whole, after whatever is there."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _warn_once() -> None:
    """One warning, pointing at the job's line that reported (past this package's frames)."""
    global _warned
    if _warned:
        return
    _warned = True
    here, frame, level = os.path.dirname(os.path.abspath(__file__)), sys._getframe(0), 1
    while frame.f_back is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    warnings.warn(NOT_SET, RuntimeWarning, stacklevel=level)
