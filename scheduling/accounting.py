"""Usage and cost from the ledger (scheduling.models.UsageRecord): selectors for the usage API,
the CLI and the reports page.

What counts where, for a window [start, end):
1. GPU-hours, CPU-hours and cost: the part of each attempt inside the window (and inside its
   time bucket when grouped by day or week); an attempt still running counts up to `now`.
2. Cost: each hour at the price its class had then. The window is cut at every price change,
   so an attempt that spans one is split (scheduling.models.Price).
3. Lost GPU-hours (by cause) and outcomes: attempts that ended inside the window, in the
   bucket of their end; jobs by outcome: those of them that are their job's last attempt so far
   (a job retried twice and then failed counts once, FAILED).
4. Queue wait (p50, p95): attempts that started inside the window, in the bucket of their start.

Two ways to the same figures:
- from the ledger's rows (`source="ledger"`, the reference): one query per stretch between
  cuts (window edges, bucket edges, price changes) for the hours, each reading only the
  attempts that overlap it (indexed by start and by end); one query for the endings
  (outcomes and losses) and one for a histogram of the waits. Millions of rows a quarter.
- from the daily rollup (the default; scheduling/rollup.py): the window's whole UTC days
  from UsageDay and UsageWaitDay (closed attempts summed per day), and from the ledger's
  rows only what the rollup cannot say: the part days at the window's edges, a day a price
  changes inside (its hours are priced on either side of the change), and the attempts
  still running (indexed: few).
"""

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.models import (
    Case,
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
    When,
)
from django.db.models.functions import Coalesce, Greatest, Least, TruncDay, TruncWeek

from scheduling.models import LostCause, Price, UsageDay, UsageRecord, UsageWaitDay, UsageWaitWeek

# What a report may be grouped by: columns of the ledger, or time buckets (UTC days; weeks
# from Monday 00:00 UTC).
COLUMNS = {"team": "team_name", "owner": "owner_name", "resource_class": "resource_class", "priority": "priority"}
BUCKETS = {"day": timedelta(days=1), "week": timedelta(days=7)}
GROUPS = (*COLUMNS, *BUCKETS)
TRUNC = {"day": TruncDay, "week": TruncWeek}
# Bounds on the number of time buckets one report may ask for (each is a query).
MAX_BUCKETS = {"day": 400, "week": 260}
SECONDS_PER_HOUR = 3600.0
MICROSECONDS_PER_HOUR = 3600e6
DAY = timedelta(days=1)
SOURCES = ("rollup", "ledger")


class FloatRound(Func):
    """ROUND of a float, as a float (Django's Round casts to numeric on PostgreSQL: slower)."""

    function = "ROUND"
    output_field = FloatField()


class Epoch(Func):
    """A duration in seconds, as a float (EXTRACT gives a numeric, several times slower to sum
    and round over millions of rows)."""

    template = "CAST(EXTRACT(EPOCH FROM %(expressions)s) AS double precision)"
    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django keeps durations on SQLite as integer microseconds.
        return self.as_sql(compiler, connection, template="(%(expressions)s / 1000000.0)", **extra_context)


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

    def rows(self, model=UsageRecord) -> QuerySet:
        """The ledger's rows (or the rollup's, `model`) this report reads."""
        rows = model.objects.filter(self.visible).order_by()  # no ordering in the GROUP BY
        filters = {"owner_name": self.owner, "resource_class": self.resource_class, "priority": self.priority}
        rows = rows.filter(**{column: value for column, value in filters.items() if value is not None})
        if self.team is None:
            return rows
        from teams.selectors import team_and_below_ids  # as visible_to: teams imports the ledger

        return rows.filter(team_id__in=team_and_below_ids(self.team))  # a division: its teams


@dataclass
class UsageRow:
    """One group's figures. `key`: the group's values, in `group_by`'s order."""

    key: tuple[str, ...]
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    cost: float = 0.0
    lost_gpu_hours: dict[str, float] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # attempts that ended, by outcome
    job_outcomes: dict[str, int] = field(default_factory=dict)  # of them, their job's last so far
    preempted: int = 0  # of them, those stopped to make room (MADE_ROOM), however they ended
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


# Report windows end before this: a window near the year 9999 would step its day or week
# buckets past the last date Python has (a 500). Nobody's usage is there.
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
TOO_LATE = "must be before the year 9000."
# And start after this: a default window stepped back from a `to` near the year 1 went before
# the first date Python has (a 500). Nobody's usage is there either.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
TOO_EARLY = "must be after 1970-01-01."


def window_start(end: datetime, span: timedelta) -> datetime:
    """`span` before `end`, but not before EARLIEST."""
    return end - span if end - EARLIEST > span else EARLIEST


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


def usage_report(query: UsageQuery, *, source: str = "rollup") -> UsageReport:
    """The report, from the rollup or from the ledger's rows alone (module docstring)."""
    assert source in SOURCES, source
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Compiling these scans' expressions (JIT) cost 2.8 s of a 9.4 s quarter's waits
            # query on the benchmark, and saved less than that.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")
        return _report(query, source)


def _report(query: UsageQuery, source: str) -> UsageReport:
    groups: dict[tuple, UsageRow] = {}

    def row(key) -> UsageRow:
        return groups.setdefault(key, UsageRow(key))

    if source == "ledger":
        _add_hours(query, row)
        _add_endings(query, row, windows=[(query.start, query.end)])
        waits = _wait_histograms(query, windows=[(query.start, query.end)])
    else:
        _add_hours_rolled(query, row)
        edges, days = whole_days(query.start, query.end)
        _add_endings(query, row, windows=edges)
        _add_rolled_endings(query, row, days)
        waits = _wait_histograms(query, windows=edges)
        _add_rolled_waits(query, waits, days)
    for key, histogram in waits.items():
        target = row(key)
        target.started = sum(histogram.values())
        target.wait_p50_s, target.wait_p95_s = percentile(histogram, 0.5), percentile(histogram, 0.95)
    rows = sorted(groups.values(), key=lambda r: r.key)
    total = _total(rows, waits.values())  # of the figures before rounding
    return UsageReport(query=query, rows=[_rounded(r) for r in rows], total=total)


def _total(rows: list[UsageRow], histograms: Iterable[dict[float, int]]) -> UsageRow:
    """The sum of the groups; the waits' percentiles from their histograms merged."""
    total = UsageRow(key=())
    for row in rows:
        total.gpu_hours += row.gpu_hours
        total.cpu_hours += row.cpu_hours
        total.cost += row.cost
        for cause, hours in row.lost_gpu_hours.items():
            total.lost_gpu_hours[cause] = total.lost_gpu_hours.get(cause, 0.0) + hours
        total.preempted += row.preempted
        for outcomes, totals in ((row.outcomes, total.outcomes), (row.job_outcomes, total.job_outcomes)):
            for outcome, count in outcomes.items():
                totals[outcome] = totals.get(outcome, 0) + count
    merged: dict[float, int] = defaultdict(int)
    for histogram in histograms:
        for wait, count in histogram.items():
            merged[wait] += count
    total.started = sum(merged.values())
    total.wait_p50_s, total.wait_p95_s = percentile(merged, 0.5), percentile(merged, 0.95)
    return _rounded(total)


def _rounded(row: UsageRow) -> UsageRow:
    row.gpu_hours, row.cpu_hours, row.cost = round(row.gpu_hours, 4), round(row.cpu_hours, 4), round(row.cost, 2)
    row.lost_gpu_hours = {cause: round(hours, 4) for cause, hours in sorted(row.lost_gpu_hours.items())}
    row.outcomes = dict(sorted(row.outcomes.items()))
    row.job_outcomes = {outcome: n for outcome, n in sorted(row.job_outcomes.items()) if n}
    return row


def _columns(query: UsageQuery) -> list[str]:
    return [COLUMNS[name] for name in query.group_by if name in COLUMNS]


def _key(query: UsageQuery, values: dict, bucket: datetime | date | None) -> tuple[str, ...]:
    return tuple(_day_text(bucket) if name in BUCKETS else str(values[COLUMNS[name]]) for name in query.group_by)


def _day_text(at: datetime | date) -> str:
    return (at.date() if isinstance(at, datetime) else at).isoformat()


def whole_days(start: datetime, end: datetime) -> tuple[list[tuple[datetime, datetime]], tuple[date, date] | None]:
    """[start, end) as its whole UTC days [first, last) and the part days at its edges."""
    first = bucket_start(start, "day")
    first += DAY if first < start else timedelta(0)
    last = bucket_start(end, "day")
    if first >= last:
        return [(start, end)], None
    edges = [(a, b) for a, b in ((start, first), (last, end)) if a < b]
    return edges, (first.date(), last.date())


def _add_hours(query: UsageQuery, row) -> None:
    """GPU- and CPU-hours and cost, stretch by stretch (module docstring, 1 and 2)."""
    prices = prices_by_class()
    changes = [price.effective_from for history in prices.values() for price in history]
    until = min(query.end, query.now)
    spans = stretches(query.start, until, bucket=query.bucket, cuts=changes) if query.start < until else []
    _scan_hours(query, row, [(a, b) for a, b, _ in spans], prices=prices, until=until)


def _scan_hours(query: UsageQuery, row, spans: list[tuple], *, prices: dict, until: datetime) -> None:
    """The hours of the ledger's rows inside each of `spans` (no bucket edge nor price change
    inside any), and their cost."""
    for a, b in spans:
        bucket = bucket_start(a, query.bucket) if query.bucket else None
        held = ExpressionWrapper(
            Least(Coalesce("ended_at", Value(until)), Value(b)) - Greatest("started_at", Value(a)),
            output_field=DurationField(),
        )
        # An attempt's end before its start (clocks of two hosts apart) holds nothing, as in the
        # rollup (rollup.day_parts).
        overlapping = query.rows().filter(Q(ended_at__gt=a) | Q(ended_at__isnull=True), started_at__lt=b)
        sums = overlapping.values(*_columns(query), "resource_class").annotate(
            gpu_s=Sum(F("gpus") * Greatest(Epoch(held), Value(0.0)), output_field=FloatField()),
            cpu_s=Sum(F("cpus") * Greatest(Epoch(held), Value(0.0)), output_field=FloatField()),
        )
        for values in sums:
            hours = ((values["gpu_s"] or 0.0) / SECONDS_PER_HOUR, (values["cpu_s"] or 0.0) / SECONDS_PER_HOUR)
            _add_priced(row(_key(query, values, bucket)), hours, price_at(prices.get(values["resource_class"], ()), a))


def _add_priced(target: UsageRow, hours: tuple[float, float], price: Price | None) -> None:
    gpu_h, cpu_h = hours
    target.gpu_hours += gpu_h
    target.cpu_hours += cpu_h
    if price is not None:
        target.cost += gpu_h * float(price.gpu_hour) + cpu_h * float(price.cpu_hour)


def _add_hours_rolled(query: UsageQuery, row) -> None:
    """The hours and cost of _add_hours, from the rollup where it can say them:
    1. the window (up to now) cut at UTC midnights and at price changes;
    2. whole days: closed attempts from UsageDay, one query per run of whole days with no
       price change; running attempts from their ledger rows, in memory, per run and bucket;
    3. a part day (the window's edges, a day a price changes inside): the ledger's rows."""
    prices = prices_by_class()
    changes = {price.effective_from for history in prices.values() for price in history}
    until = min(query.end, query.now)
    days = stretches(query.start, until, bucket="day", cuts=changes) if query.start < until else []
    spans = [(a, b) for a, b, _ in days]
    whole = [(a, b) for a, b in spans if b - a == DAY]
    _scan_hours(query, row, [(a, b) for a, b in spans if b - a != DAY], prices=prices, until=until)
    for a, b, _ in _runs(whole, changes):
        _add_rolled_run(query, row, a, b, prices=prices)
    if whole:
        by_bucket = _runs(whole, changes, bucket=query.bucket)
        _add_running(query, row, by_bucket, prices=prices)


def _runs(whole: list[tuple], changes: set, *, bucket: str | None = None) -> list[tuple]:
    """Whole days (ordered) joined into runs [start, end) with no price change inside, nor a
    `bucket` edge: (start, end, the bucket's start or None)."""
    runs: list[list] = []
    for a, b in whole:
        edge = bucket_start(a, bucket) if bucket else None
        if runs and runs[-1][1] == a and a not in changes and runs[-1][2] == edge:
            runs[-1][1] = b
        else:
            runs.append([a, b, edge])
    return [tuple(run) for run in runs]


def _add_rolled_run(query: UsageQuery, row, start: datetime, end: datetime, *, prices: dict) -> None:
    """Closed attempts' hours in the whole days [start, end), all at one price per class."""
    days = query.rows(UsageDay).filter(day__gte=start.date(), day__lt=end.date())
    names = [*_columns(query), "resource_class"]
    if query.bucket:
        days = days.annotate(bucket=F("day") if query.bucket == "day" else TruncWeek("day"))
        names.append("bucket")
    for values in days.values(*names).annotate(gpu_us=Sum("gpu_us"), cpu_us=Sum("cpu_us")):
        hours = (values["gpu_us"] / MICROSECONDS_PER_HOUR, values["cpu_us"] / MICROSECONDS_PER_HOUR)
        price = price_at(prices.get(values["resource_class"], ()), start)
        _add_priced(row(_key(query, values, values.get("bucket"))), hours, price)


def _add_running(query: UsageQuery, row, runs: list[tuple], *, prices: dict) -> None:
    """Running attempts' hours in `runs` (ordered; one price and one bucket each)."""
    names = [*_columns(query), "resource_class", "gpus", "cpus", "started_at"]
    running = query.rows().filter(ended_at__isnull=True, started_at__lt=runs[-1][1]).values(*names)
    ends = [end for _, end, _ in runs]
    for values in running:
        for a, b, bucket in runs[bisect_right(ends, values["started_at"]) :]:
            held = (b - max(a, values["started_at"])).total_seconds() / SECONDS_PER_HOUR
            hours = (values["gpus"] * held, values["cpus"] * held)
            _add_priced(row(_key(query, values, bucket)), hours, price_at(prices.get(values["resource_class"], ()), a))


def _point_rows(query: UsageQuery, at: str, fields: Sequence[str], *, window: tuple, **annotations):
    """The attempts whose `at` (ended_at, started_at) lies in `window`, as values grouped by
    the report's columns, its bucket (`bucket`), and `fields` (which may be `annotations`)."""
    rows = query.rows().filter(**{f"{at}__gte": window[0], f"{at}__lt": window[1]})
    if query.bucket:
        rows = rows.annotate(bucket=TRUNC[query.bucket](at, tzinfo=UTC))
    names = _columns(query) + (["bucket"] if query.bucket else [])
    return rows.annotate(**annotations).values(*names, *fields)


def _rolled(query: UsageQuery, model, days: tuple[date, date], fields: Sequence[str]):
    """The rollup's rows of the whole days `days` [first, last), as values grouped like
    _point_rows's."""
    rows = query.rows(model).filter(day__gte=days[0], day__lt=days[1])
    if query.bucket:
        rows = rows.annotate(bucket=F("day") if query.bucket == "day" else TruncWeek("day"))
    return rows.values(*_columns(query), *(["bucket"] if query.bucket else []), *fields)


def _add_endings(query: UsageQuery, row, *, windows: list[tuple]) -> None:
    """How attempts ended in `windows`, and the GPU-hours they lost by cause (docstring, 3)."""
    for window in windows:
        ends = _point_rows(query, "ended_at", ["outcome", "lost_cause"], window=window)
        last = Count("id", filter=Q(superseded=False))
        _add_ended(query, row, ends.annotate(n=Count("id"), last=last, lost=Sum("lost_gpu_hours")))


def _add_rolled_endings(query: UsageQuery, row, days: tuple[date, date] | None) -> None:
    if days:
        ends = _rolled(query, UsageDay, days, ["outcome", "lost_cause"]).filter(ended__gt=0)
        last = Sum("ended") - Sum("superseded")
        _add_ended(query, row, ends.annotate(n=Sum("ended"), last=last, lost=Sum("lost_gpu_hours")))


# The causes of an attempt stopped to make room: a preemption, a reclaim, a drain (an admin's, a
# window's, a node's fault), a spot node taken back. Its outcome is PREEMPTED unless its job
# ended there (ledger.on_job_state): the reports' "preempted" counts both.
MADE_ROOM = (LostCause.PREEMPTION, LostCause.QUOTA_RECLAIM, LostCause.DRAIN, LostCause.RECLAIM)


def _add_ended(query: UsageQuery, row, ends: Iterable[dict]) -> None:
    for values in ends:
        target = row(_key(query, values, values.get("bucket")))
        outcome = values["outcome"]
        target.outcomes[outcome] = target.outcomes.get(outcome, 0) + values["n"]
        target.job_outcomes[outcome] = target.job_outcomes.get(outcome, 0) + values["last"]
        if values["lost_cause"] in MADE_ROOM:
            target.preempted += values["n"]
        if values["lost_cause"]:
            cause = values["lost_cause"]
            target.lost_gpu_hours[cause] = target.lost_gpu_hours.get(cause, 0.0) + values["lost"]


WAIT_S = Epoch(ExpressionWrapper(F("started_at") - F("queued_at"), output_field=DurationField()))
# Waits counted to the second below 10 minutes, then to 10 s, to the minute below a day, and
# to 10 minutes beyond: a histogram of a few thousand bars whatever the number of attempts,
# built by a hash aggregate (which Postgres runs in parallel) instead of a sort of every wait.
WAIT_BAR = Case(
    When(Q(wait__lt=600), then=FloatRound("wait")),
    When(Q(wait__lt=3600), then=FloatRound(F("wait") / 10.0) * 10.0),
    When(Q(wait__lt=86400), then=FloatRound(F("wait") / 60.0) * 60.0),
    default=FloatRound(F("wait") / 600.0) * 600.0,
    output_field=FloatField(),
)


def _wait_histograms(query: UsageQuery, *, windows: list[tuple]) -> dict[tuple, dict[float, int]]:
    """key -> {wait in seconds (to its bar's precision): attempts that started in `windows`
    after waiting that long} (docstring, 4)."""
    histograms: dict[tuple, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for window in windows:
        bars = _point_rows(query, "started_at", ["bar"], window=window, wait=WAIT_S, bar=WAIT_BAR)
        _add_bars(query, histograms, bars.annotate(n=Count("id")))
    return histograms


def _add_rolled_waits(query: UsageQuery, histograms: dict, days: tuple[date, date] | None) -> None:
    """The waits of the attempts that started in the whole days `days`: closed ones from
    UsageWaitWeek for its whole weeks (unless the report is by day) and UsageWaitDay for the
    other days, running ones from the ledger's rows."""
    if days:
        first = days[0] + timedelta(days=-days[0].weekday() % 7)  # the first Monday on or after
        last = days[1] - timedelta(days=days[1].weekday())
        spans = [(UsageWaitDay, days)]
        if query.bucket != "day" and first < last:
            spans = [(UsageWaitDay, (days[0], first)), (UsageWaitWeek, (first, last)), (UsageWaitDay, (last, days[1]))]
        for model, span in spans:
            if span[0] < span[1]:
                _add_bars(query, histograms, _rolled(query, model, span, ["bar"]).annotate(n=Sum("attempts")))
        window = tuple(datetime.combine(day, datetime.min.time(), UTC) for day in days)
        running = _point_rows(query, "started_at", ["bar"], window=window, wait=WAIT_S, bar=WAIT_BAR)
        _add_bars(query, histograms, running.filter(ended_at__isnull=True).annotate(n=Count("id")))


def _add_bars(query: UsageQuery, histograms: dict, bars: Iterable[dict]) -> None:
    for values in bars:
        histograms[_key(query, values, values.get("bucket"))][values["bar"]] += values["n"]


def percentile(histogram: dict[float, int], fraction: float) -> float | None:
    """PERCENTILE_CONT's definition over a histogram: linear between the two nearest ranks."""
    count = sum(histogram.values())
    if not count:
        return None
    at = fraction * (count - 1)
    low, high = int(at), min(int(at) + 1, count - 1)
    values, seen = {}, 0
    for wait in sorted(histogram):
        for rank in (low, high):
            if seen <= rank < seen + histogram[wait]:
                values[rank] = wait
        seen += histogram[wait]
    return values[low] + (values[high] - values[low]) * (at - low)
