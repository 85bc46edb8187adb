"""Usage and cost from the ledger (scheduling.models.UsageRecord): selectors for the usage API,
the CLI and the reports page.

What counts where, for a window [start, end):
1. GPU-hours, CPU-hours and cost: the part of each attempt inside the window (and inside its
   time bucket when grouped by day or week); an attempt still running counts up to `now`.
2. Cost: each hour at the price its class had then. The window is cut at every price change,
   so an attempt that spans one is split (scheduling.models.Price).
3. Lost GPU-hours (by cause) and outcomes: attempts that ended inside the window, in the
   bucket of their end.
4. Queue wait (p50, p95): attempts that started inside the window, in the bucket of their start.

One query per stretch between cuts (window edges, bucket edges, price changes) for the hours,
each reading only the attempts that overlap it (indexed by start and by end), and one query
each for losses, outcomes and waits.
"""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least, TruncDay, TruncWeek

from scheduling.models import Price, UsageRecord

# What a report may be grouped by: columns of the ledger, or time buckets (UTC days; weeks
# from Monday 00:00 UTC).
COLUMNS = {"team": "team_name", "owner": "owner_name", "resource_class": "resource_class", "priority": "priority"}
BUCKETS = {"day": timedelta(days=1), "week": timedelta(days=7)}
GROUPS = (*COLUMNS, *BUCKETS)
TRUNC = {"day": TruncDay, "week": TruncWeek}
# Bounds on the number of time buckets one report may ask for (each is a query).
MAX_BUCKETS = {"day": 400, "week": 260}
SECONDS_PER_HOUR = 3600.0


class Epoch(Func):
    """A duration in seconds, as a float."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django keeps durations on SQLite as integer microseconds.
        return self.as_sql(compiler, connection, template="(%(expressions)s / 1000000.0)", **extra_context)


class Percentile(Aggregate):
    """PostgreSQL's continuous percentile (SQLite computes it in Python: `_waits_in_python`)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()


@dataclass(frozen=True)
class UsageQuery:
    """A report's window, its filters and its grouping. `visible`: the ledger rows the asking
    user may see (accounting.visible_to)."""

    start: datetime
    end: datetime
    now: datetime
    group_by: tuple[str, ...] = ("team",)
    visible: Q = field(default_factory=Q)
    team: str | None = None
    owner: str | None = None
    resource_class: str | None = None
    priority: str | None = None

    @property
    def bucket(self) -> str | None:
        return next((name for name in self.group_by if name in BUCKETS), None)

    def rows(self) -> QuerySet[UsageRecord]:
        rows = UsageRecord.objects.filter(self.visible).order_by()  # no ordering in the GROUP BY
        filters = {"team_name": self.team, "owner_name": self.owner, "resource_class": self.resource_class}
        filters["priority"] = self.priority
        return rows.filter(**{column: value for column, value in filters.items() if value is not None})


@dataclass
class UsageRow:
    """One group's figures. `key`: the group's values, in `group_by`'s order."""

    key: tuple[str, ...]
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    cost: float = 0.0
    lost_gpu_hours: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    started: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None

    @property
    def lost_total(self) -> float:
        return round(sum(self.lost_gpu_hours.values(), 0.0), 4)


@dataclass
class UsageReport:
    query: UsageQuery
    rows: list[UsageRow]
    total: UsageRow


def visible_to(user) -> Q:
    """Admins see every attempt; everyone else their own and their teams' (and teams below)."""
    from teams.selectors import is_site_admin, team_ids_of

    if is_site_admin(user):
        return Q()
    return Q(team_id__in=team_ids_of(user)) | Q(owner_id=user.pk)


def stretches(start: datetime, end: datetime, *, bucket: str | None, cuts: Iterable[datetime]) -> list[tuple]:
    """[start, end) cut at each bucket edge (UTC days, or weeks from Monday) and at each of
    `cuts` inside it: (stretch start, stretch end, its bucket's start or None), in order."""
    points = {start, end, *(at for at in cuts if start < at < end)}
    if bucket:
        edge = bucket_start(start, bucket)
        while edge < end:
            if edge > start:
                points.add(edge)
            edge += BUCKETS[bucket]
    ordered = sorted(points)
    return [(a, b, bucket_start(a, bucket) if bucket else None) for a, b in zip(ordered, ordered[1:], strict=False)]


def bucket_start(at: datetime, bucket: str) -> datetime:
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if bucket == "week" else day


def prices_by_class() -> dict[str, list[Price]]:
    prices = defaultdict(list)
    for price in Price.objects.order_by("resource_class", "effective_from"):
        prices[price.resource_class].append(price)
    return prices


def price_at(prices: Sequence[Price], at: datetime) -> Price | None:
    """The class's price in force at `at`: its latest change at or before it."""
    return next((price for price in reversed(prices) if price.effective_from <= at), None)


def usage_report(query: UsageQuery) -> UsageReport:
    groups: dict[tuple, UsageRow] = {}

    def row(key) -> UsageRow:
        return groups.setdefault(key, UsageRow(key))

    _add_hours(query, row)
    _add_losses(query, row)
    _add_outcomes(query, row)
    for key, (started, p50, p95) in _waits(query, query.group_by).items():
        target = row(key)
        target.started, target.wait_p50_s, target.wait_p95_s = started, p50, p95
    rows = sorted(groups.values(), key=lambda r: r.key)
    return UsageReport(query=query, rows=rows, total=_total(query, rows))


def _total(query: UsageQuery, rows: list[UsageRow]) -> UsageRow:
    total = UsageRow(key=())
    for row in rows:
        total.gpu_hours += row.gpu_hours
        total.cpu_hours += row.cpu_hours
        total.cost += row.cost
        for cause, hours in row.lost_gpu_hours.items():
            total.lost_gpu_hours[cause] = total.lost_gpu_hours.get(cause, 0.0) + hours
        for outcome, count in row.outcomes.items():
            total.outcomes[outcome] = total.outcomes.get(outcome, 0) + count
    (started, p50, p95) = _waits(query, ()).get((), (0, None, None))
    total.started, total.wait_p50_s, total.wait_p95_s = started, p50, p95
    return _rounded(total)


def _rounded(row: UsageRow) -> UsageRow:
    row.gpu_hours, row.cpu_hours, row.cost = round(row.gpu_hours, 4), round(row.cpu_hours, 4), round(row.cost, 2)
    row.lost_gpu_hours = {cause: round(hours, 4) for cause, hours in sorted(row.lost_gpu_hours.items())}
    row.outcomes = dict(sorted(row.outcomes.items()))
    return row


def _columns(query: UsageQuery) -> list[str]:
    return [COLUMNS[name] for name in query.group_by if name in COLUMNS]


def _key(query: UsageQuery, values: dict, bucket: datetime | None) -> tuple[str, ...]:
    return tuple(
        bucket.date().isoformat() if name in BUCKETS else str(values[COLUMNS[name]]) for name in query.group_by
    )


def _add_hours(query: UsageQuery, row) -> None:
    """GPU- and CPU-hours and cost, stretch by stretch (module docstring, 1 and 2)."""
    prices = prices_by_class()
    changes = [price.effective_from for history in prices.values() for price in history]
    until = min(query.end, query.now)
    for a, b, bucket in stretches(query.start, until, bucket=query.bucket, cuts=changes) if query.start < until else ():
        held = ExpressionWrapper(
            Least(Coalesce("ended_at", Value(until)), Value(b)) - Greatest("started_at", Value(a)),
            output_field=DurationField(),
        )
        overlapping = query.rows().filter(Q(ended_at__gt=a) | Q(ended_at__isnull=True), started_at__lt=b)
        sums = overlapping.values(*_columns(query), "resource_class").annotate(
            gpu_s=Sum(F("gpus") * Epoch(held), output_field=FloatField()),
            cpu_s=Sum(F("cpus") * Epoch(held), output_field=FloatField()),
        )
        for values in sums:
            target = row(_key(query, values, bucket))
            gpu_h, cpu_h = (values["gpu_s"] or 0.0) / SECONDS_PER_HOUR, (values["cpu_s"] or 0.0) / SECONDS_PER_HOUR
            target.gpu_hours += gpu_h
            target.cpu_hours += cpu_h
            price = price_at(prices.get(values["resource_class"], ()), a)
            if price is not None:
                target.cost += gpu_h * float(price.gpu_hour) + cpu_h * float(price.cpu_hour)


def _point_rows(query: UsageQuery, at: str, fields: Sequence[str], group_by: Sequence[str] | None = None):
    """The attempts whose `at` (ended_at, started_at) lies in the window, as values grouped by
    the report's columns, its bucket (`bucket`), and `fields`."""
    group_by = query.group_by if group_by is None else group_by
    rows = query.rows().filter(**{f"{at}__gte": query.start, f"{at}__lt": query.end})
    bucket = next((name for name in group_by if name in BUCKETS), None)
    if bucket:
        rows = rows.annotate(bucket=TRUNC[bucket](at, tzinfo=UTC))
    names = [COLUMNS[name] for name in group_by if name in COLUMNS] + (["bucket"] if bucket else [])
    if not names and not fields:  # one group of all (an empty values() would mean every column)
        rows, names = rows.annotate(everything=Value(1)), ["everything"]
    return rows.values(*names, *fields)


def _add_losses(query: UsageQuery, row) -> None:
    rows = _point_rows(query, "ended_at", ["lost_cause"]).exclude(lost_cause="")
    for values in rows.annotate(lost=Sum("lost_gpu_hours")):
        target = row(_key(query, values, values.get("bucket")))
        target.lost_gpu_hours[values["lost_cause"]] = target.lost_gpu_hours.get(values["lost_cause"], 0.0)
        target.lost_gpu_hours[values["lost_cause"]] += values["lost"]


def _add_outcomes(query: UsageQuery, row) -> None:
    for values in _point_rows(query, "ended_at", ["outcome"]).annotate(n=Count("id")):
        row(_key(query, values, values.get("bucket"))).outcomes[values["outcome"]] = values["n"]


WAIT = ExpressionWrapper(F("started_at") - F("queued_at"), output_field=DurationField())


def _waits(query: UsageQuery, group_by: Sequence[str]) -> dict[tuple, tuple[int, float | None, float | None]]:
    """key -> (attempts started, p50 and p95 of their queue wait in seconds)."""
    sub = UsageQuery(**{**query.__dict__, "group_by": tuple(group_by)})
    if connection.vendor != "postgresql":
        return _waits_in_python(sub)
    rows = _point_rows(sub, "started_at", []).annotate(
        n=Count("id"), p50=Percentile(Epoch(WAIT), fraction=0.5), p95=Percentile(Epoch(WAIT), fraction=0.95)
    )
    return {_key(sub, values, values.get("bucket")): (values["n"], values["p50"], values["p95"]) for values in rows}


def _waits_in_python(query: UsageQuery) -> dict[tuple, tuple[int, float | None, float | None]]:
    waits = defaultdict(list)
    for values in _point_rows(query, "started_at", ["started_at", "queued_at"]):
        wait = (values["started_at"] - values["queued_at"]).total_seconds()
        waits[_key(query, values, values.get("bucket"))].append(wait)
    return {key: (len(s), percentile(sorted(s), 0.5), percentile(sorted(s), 0.95)) for key, s in waits.items()}


def percentile(ordered: Sequence[float], fraction: float) -> float | None:
    """PERCENTILE_CONT's definition: linear between the two nearest ranks."""
    if not ordered:
        return None
    at = fraction * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)
