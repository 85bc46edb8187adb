"""How good the start forecast was, per week: from the StartForecast rows the leader keeps
(scheduling/leader/forecasting.py), each job's first forecast and its last one before it
started, against when it did start.

A forecast's point estimate is its likely start where the team has runtime history, else its
latest start (the "at the latest" bound, every job running to its max_runtime). A week is an
ISO week (Monday 00:00 UTC), and a job counts in the week it first started.

On Postgres the medians are computed in the database (`percentile_cont`), one query a week: a
quarter of 20,000 jobs a day is 1.8 million rows, not ones to fetch. Elsewhere (the embedded
SQLite demo) the rows are read and the medians taken here. A week that is over does not
change, so its figures are cached (bench/forecast_weeks.py measures both)."""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.core.cache import cache
from django.db import connection
from django.db.models import Aggregate, Avg, Case, Count, F, FloatField, Func, When
from django.db.models.functions import Abs, Coalesce
from django.utils import timezone

from scheduling.models import StartForecast

WEEK = timedelta(days=7)
# A week ended this long ago has all its starts (a job's start is stamped as it happens).
FINAL_AFTER = timedelta(hours=1)
CACHE_S = 7 * 86400


@dataclass(frozen=True)
class WeekAccuracy:
    """One ISO week of starts. Errors are absolute, in seconds; shares are 0..1; each is None
    when no job of the week had that forecast."""

    week: date  # the Monday (UTC) the week starts on
    jobs: int  # jobs that first started that week and had at least one forecast
    first_median_error_s: float | None
    last_median_error_s: float | None
    # Of the jobs with an "at the latest" bound, the share that started at or before it.
    first_within_bound: float | None
    last_within_bound: float | None


class EpochSeconds(Func):
    """A duration as seconds (Postgres): date_part's double precision, where EXTRACT's numeric
    (Postgres 14 on) makes the median's sort a third slower."""

    template = "DATE_PART('epoch', %(expressions)s)"
    output_field = FloatField()


class Median(Aggregate):
    """Postgres' continuous median of a number expression."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()


def week_of(moment: datetime) -> date:
    day = moment.astimezone(UTC).date()
    return day - timedelta(days=day.weekday())


def forecast_accuracy_by_week(start: datetime, end: datetime, teams: Iterable[str] | None = None) -> list[WeekAccuracy]:
    """Every ISO week that overlaps [start, end), oldest first, over the jobs that first started
    in [start, end) (of `teams`, by name, when given), weeks without such a job included."""
    names = None if teams is None else tuple(sorted(set(teams)))
    now = timezone.now()
    weeks, week = [], week_of(start)
    while (week_start := datetime.combine(week, time.min, UTC)) < end:
        weeks.append(_week(week, max(start, week_start), min(end, week_start + WEEK), names, now=now))
        week += WEEK
    return weeks


def _week(week: date, start: datetime, end: datetime, teams: tuple[str, ...] | None, *, now) -> WeekAccuracy:
    """One week's figures over [start, end), from the cache where they are final: a whole week
    that ended before FINAL_AFTER ago gets no more starts (a start is stamped when it happens)."""
    final = end - start == WEEK and end <= now - FINAL_AFTER
    key = f"forecast-accuracy:{week.isoformat()}:{','.join(teams) if teams is not None else '*'}"
    if final and (cached := cache.get(key)) is not None:
        return cached
    rows = StartForecast.objects.filter(started_at__gte=start, started_at__lt=end).order_by()
    if teams is not None:
        rows = rows.filter(team__name__in=teams)
    found = _week_in_database(week, rows) if connection.vendor == "postgresql" else _week_here(week, rows)
    if final:
        cache.set(key, found, timeout=CACHE_S)
    return found


def _within(bound: str):
    """1 where the job started at or before `bound`, 0 after it, NULL with no bound (Avg skips it)."""
    return Case(
        When(**{f"{bound}__isnull": True}, then=None),
        When(started_at__lte=F(bound), then=1.0),
        default=0.0,
        output_field=FloatField(),
    )


def _error(which: str) -> Median:
    """NULL for a job without that forecast: the median skips it."""
    point = Coalesce(F(f"{which}_likely"), F(f"{which}_latest"))
    return Median(Abs(EpochSeconds(F("started_at") - point)))


def _week_in_database(week: date, rows) -> WeekAccuracy:
    """One query over the week's rows (an index range on started_at, or on team and started_at):
    a sort of one week in memory, where grouping a quarter by week sorted it all on disk."""
    found = rows.aggregate(
        jobs=Count("id"),
        first_error=_error("first"),
        last_error=_error("last"),
        first_within=Avg(_within("first_latest")),
        last_within=Avg(_within("last_latest")),
    )
    return WeekAccuracy(week, *found.values())


def _week_here(week: date, rows) -> WeekAccuracy:
    rows = list(rows.values("started_at", "first_latest", "first_likely", "last_latest", "last_likely"))

    def median_error(which: str) -> float | None:
        errors = [
            abs((row["started_at"] - point).total_seconds())
            for row in rows
            if (point := row[f"{which}_likely"] or row[f"{which}_latest"]) is not None
        ]
        return statistics.median(errors) if errors else None

    def within(which: str) -> float | None:
        bounded = [row["started_at"] <= row[f"{which}_latest"] for row in rows if row[f"{which}_latest"] is not None]
        return sum(bounded) / len(bounded) if bounded else None

    return WeekAccuracy(week, len(rows), median_error("first"), median_error("last"), within("first"), within("last"))
