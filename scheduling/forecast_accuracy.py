"""How good the start forecast was, per week: from the StartForecast rows the leader keeps
(scheduling/leader/forecasting.py), each job's first forecast and its last one before it
started, against when it did start.

A forecast's point estimate is its likely start where the team has runtime history, else its
latest start (the "at the latest" bound, every job running to its max_runtime). A week is an
ISO week (Monday 00:00 UTC), and a job counts in the week it first started.

On Postgres the medians are computed in the database (`percentile_cont`), one query for the
whole range: a quarter of 20,000 jobs a day is 1.8 million rows, not ones to fetch. Elsewhere
(the embedded SQLite demo) the rows are read and the medians taken here."""

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db import connection
from django.db.models import Aggregate, Avg, Case, Count, F, FloatField, Func, When
from django.db.models.functions import Abs, Coalesce, TruncWeek

from scheduling.models import StartForecast

WEEK = timedelta(days=7)


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
    """A duration as seconds (Postgres)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
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
    rows = _forecasts(start, end, teams)
    found = _by_week_in_database(rows) if connection.vendor == "postgresql" else _by_week_here(rows)
    weeks, week = [], week_of(start)
    while datetime.combine(week, datetime.min.time(), UTC) < end:
        weeks.append(found.get(week, WeekAccuracy(week, 0, None, None, None, None)))
        week += WEEK
    return weeks


def _forecasts(start: datetime, end: datetime, teams: Iterable[str] | None):
    rows = StartForecast.objects.filter(started_at__gte=start, started_at__lt=end)
    if teams is not None:
        rows = rows.filter(team__name__in=list(teams))
    return rows.order_by()


def _within(bound: str):
    """1 where the job started at or before `bound`, 0 after it, NULL with no bound (Avg skips it)."""
    return Case(
        When(**{f"{bound}__isnull": True}, then=None),
        When(started_at__lte=F(bound), then=1.0),
        default=0.0,
        output_field=FloatField(),
    )


def _by_week_in_database(rows) -> dict[date, WeekAccuracy]:
    def error(which: str):
        """NULL for a job without that forecast: the median skips it."""
        point = Coalesce(F(f"{which}_likely"), F(f"{which}_latest"))
        return Median(Abs(EpochSeconds(F("started_at") - point)))

    found = (
        rows.annotate(week=TruncWeek("started_at", tzinfo=UTC))
        .values("week")
        .annotate(
            jobs=Count("id"),
            first_error=error("first"),
            last_error=error("last"),
            first_within=Avg(_within("first_latest")),
            last_within=Avg(_within("last_latest")),
        )
    )
    return {
        row["week"].date(): WeekAccuracy(
            row["week"].date(),
            row["jobs"],
            row["first_error"],
            row["last_error"],
            row["first_within"],
            row["last_within"],
        )
        for row in found
    }


def _by_week_here(rows) -> dict[date, WeekAccuracy]:
    weeks = defaultdict(list)
    for row in rows.values("started_at", "first_latest", "first_likely", "last_latest", "last_likely"):
        weeks[week_of(row["started_at"])].append(row)
    return {week: _week_here(week, found) for week, found in weeks.items()}


def _week_here(week: date, rows: list[dict]) -> WeekAccuracy:
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
