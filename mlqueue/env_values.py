"""Settings read from the environment as seconds, choices and the scheduling policy's values
(mlqueue/settings.py): each bad value stops the server with an ImproperlyConfigured naming the
variable."""

import math
import os

from django.core.exceptions import ImproperlyConfigured

from scheduling.core.model import MIN_RUNTIME_BY_CLASS, PRIORITIES


def env_min_runtime(name: str, single: str) -> dict[str, float]:
    """Seconds a victim must have run before a preemptor of each class may take its room,
    as "P0=0,P1=600,P2=600,P3=600": classes left out keep their default. `single` (the older
    one-number setting), when set, is the minimum for P1-P3; `name`'s own entries win."""
    found = dict(MIN_RUNTIME_BY_CLASS)
    raw_single = os.environ.get(single, "").strip()
    if raw_single:
        seconds = _seconds(single, raw_single, raw_single)
        found.update({klass: seconds for klass in PRIORITIES if klass != "P0"})
    raw = os.environ.get(name, "").strip()
    for item in filter(None, (part.strip() for part in raw.split(","))):
        klass, sep, value = (piece.strip() for piece in item.partition("="))
        if not sep or klass not in PRIORITIES:
            raise ImproperlyConfigured(
                f"{name}={raw!r}: {item!r} is not CLASS=SECONDS with a class of "
                f"{', '.join(PRIORITIES)} (e.g. P0=0,P1=600)"
            )
        found[klass] = _seconds(name, raw, value)
    return found


def env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return _seconds(name, raw, raw) if raw else default


def _seconds(name: str, raw: str, value: str) -> float:
    return _non_negative(name, raw, value, "a number of seconds >= 0")


def _non_negative(name: str, raw: str, value: str, what: str) -> float:
    return number_in(name, raw, value, what, lambda number: number >= 0)


def number_in(name: str, raw: str, value: str, what: str, fits) -> float:
    """`value` (all of `raw`, or a part of it) as a finite number that `fits`; else an
    ImproperlyConfigured naming the variable, what it was set to and `what` it takes."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and fits(number)):
        raise ImproperlyConfigured(f"{name}={raw!r}: {value!r} is not {what}")
    return number


def env_backlog(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "always":
        return None
    return _non_negative(name, raw, raw, "a number >= 0 (times a class's capacity) or 'always'")


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, the first by default."""
    raw = os.environ.get(name, "").strip()
    if raw and raw not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r} is not one of {', '.join(choices)}")
    return raw or choices[0]


def env_max_evictions(name: str, default: int | None) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "none":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number of evictions >= 1 or 'none'")
    return value
