"""Fire times of a schedule: a five-field cron expression read in an IANA time zone.

Pure: the caller passes the instants (aware datetimes); nothing here reads the clock.
The library is cronsim (the one healthchecks.io uses), and its daylight-saving rules are
Debian cron's, which these functions keep:

1. Spring forward, a wall-clock time that does not exist: a job at a fixed hour (`30 2 * * *`)
   fires at the first instant after the gap (03:00 local); a job whose hour field is `*`
   (`*/5 * * * *`) has no fire time inside the gap (02:00-02:55 never happen).
2. Fall back, a wall-clock hour that happens twice: a job at a fixed hour fires once, at the
   first occurrence; a job whose hour field is `*` fires on real time through both (every 5
   real minutes stays every 5 minutes).

Every fire time is returned in UTC, strictly after the instant asked about.
"""

import functools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
WRONG_FIELD_COUNT = (
    "{expr!r} has {count} field{s}; a cron expression has five (minute hour day-of-month month day-of-week), "
    "e.g. '0 3 * * *' for 03:00 every day, or one of {macros}."
)
UNKNOWN_MACRO = (
    "{expr!r} is not a cron @-name: the known ones are {macros}; or give five fields "
    "(minute hour day-of-month month day-of-week), e.g. '0 3 * * *' for 03:00 every day."
)
BAD_FIELD = "{expr!r}: the {field} field {value!r} is not valid ({rule})."
NEVER_FIRES = "{expr!r} never fires (no date matches it)."
FIELD_RULES = {
    "minute": "0-59, lists, ranges and steps such as */5",
    "hour": "0-23, lists, ranges and steps",
    "day-of-month": "1-31, L, lists, ranges and steps, and the month must have that day",
    "month": "1-12 or JAN-DEC, lists, ranges and steps",
    "day-of-week": "0-7 or SUN-SAT (0 and 7 are Sunday), L and #, lists, ranges and steps",
}
UNKNOWN_TIMEZONE = "{name!r} is not an IANA time zone name such as Europe/Berlin, America/New_York or UTC."
# Names the tz database's directory holds that are no place: the host's own zone (`localtime`,
# another zone on each server), tzcode's template (`posixrules`) and tzdata's `Factory` ("-00").
NOT_A_PLACE = frozenset({"localtime", "posixrules", "Factory"})
# Any start works for validation; a fixed one keeps the check independent of the clock.
PROBE = datetime(2000, 1, 1, tzinfo=UTC)
SEARCH_LIMIT = 10_000


def expand(expr: str) -> str:
    """The expression with surrounding spaces removed and a macro (@daily) spelled out."""
    text = " ".join(expr.split())
    return MACROS.get(text.lower(), text)


def cron_error(expr: str) -> str | None:
    """Why `expr` is not a usable cron expression, or None when it is."""
    text = expand(expr)
    fields = text.split(" ") if text else []
    if text.startswith("@") and len(fields) == 1:  # QA: "@fortnightly has 1 fields" read as a riddle
        return UNKNOWN_MACRO.format(expr=expr, macros=", ".join(MACROS))
    if len(fields) != len(FIELDS):
        count = len(fields)
        return WRONG_FIELD_COUNT.format(expr=expr, count=count, s="" if count == 1 else "s", macros=", ".join(MACROS))
    try:
        next(iter(CronSim(text, PROBE.replace(tzinfo=None))))
    except CronSimError as exc:
        field = _field_named(str(exc))
        if field is None:
            return NEVER_FIRES.format(expr=expr)
        value = fields[FIELDS.index(field)]
        return BAD_FIELD.format(expr=expr, field=field, value=value, rule=FIELD_RULES[field])
    except StopIteration:
        return NEVER_FIRES.format(expr=expr)
    return None


def _field_named(message: str) -> str | None:
    """cronsim's "Bad day-of-month" -> "day-of-month"."""
    for field in FIELDS:
        if message.lower().endswith(field):
            return field
    return None


@functools.cache
def zone_names() -> frozenset[str]:
    """The IANA names a schedule may use. Read once: available_timezones() walks the database.
    ZoneInfo() opens more (any file under the zone directory: `posix/Europe/Berlin`, `localtime`),
    and a schedule in one of those would fire at other times on another host."""
    return frozenset(available_timezones()) - NOT_A_PLACE


def timezone_error(name: str) -> str | None:
    if name not in zone_names():
        return UNKNOWN_TIMEZONE.format(name=name)
    return None


def fires(expr: str, zone: str, after: datetime) -> Iterator[datetime]:
    """The fire times strictly after `after`, in UTC, each later than the one before. cronsim,
    started inside the repeated hour of a fall-back, may answer the first occurrence of a
    wall-clock time already past: skipped here, so a fixed-hour job fires once in that hour."""
    last = after
    for fire in CronSim(expand(expr), after.astimezone(ZoneInfo(zone))):
        fire_utc = fire.astimezone(UTC)
        if fire_utc > last:
            last = fire_utc
            yield fire_utc


def next_fire(expr: str, zone: str, after: datetime) -> datetime:
    """The first fire time strictly after `after`, in UTC."""
    for fire in fires(expr, zone, after):
        return fire
    raise ValueError(NEVER_FIRES.format(expr=expr))  # cron_error refused it at create


def latest_fire(expr: str, zone: str, *, first: datetime, until: datetime) -> datetime:
    """The last fire time in [first, until], where `first` is itself a fire time: the one a
    schedule that missed every fire since `first` fires once for. The walk starts a day before
    `until` when a fire time lies in that day (a minute-by-minute cron over a long outage needs
    only the last missed minute), and stops after SEARCH_LIMIT fire times."""
    window = max(first, until - timedelta(days=1))
    start = next_fire(expr, zone, window - timedelta(microseconds=1))
    latest = start if start <= until else first
    for count, fire in enumerate(fires(expr, zone, latest)):
        if fire > until or count >= SEARCH_LIMIT:
            break
        latest = fire
    return latest
