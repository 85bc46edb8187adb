"""The usage rollup: the ledger's closed attempts summed per UTC day (scheduling.models.UsageDay,
UsageWaitDay), so a report over a quarter reads a few thousand rows instead of millions.

1. An attempt adds, to each UTC day it held its GPUs and CPUs, the microseconds it held them
   there (an attempt spanning midnight is split); to the day it ended, one ending of its
   outcome and the GPU-hours it lost (and, once its job runs again, one superseded ending:
   `do_supersede`); to the day and the week it started, one wait in its histogram bar.
2. `do_add_closed` adds the attempts a transition has just closed, in that transition's
   transaction (scheduling/ledger.py): an upsert that adds to the day's row
   (`ON CONFLICT ... DO UPDATE SET x = x + excluded.x`), so concurrent closes never lose one.
3. `do_end_preempted` moves a closed attempt from PREEMPTED (or REQUEUED) to the end its job
   was given there (FAILED, CANCELLED), in that transition's transaction.
4. `do_rebuild` empties the rollup and adds every closed attempt again (after a repair of
   the ledger, and in the migration that created it): idempotent.

Only closed attempts are rolled up: a running attempt's figures still grow, so the reports
read those from the ledger's rows (scheduling/accounting.py). Nothing here reads the clock.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime, time, timedelta

from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Round

from scheduling.accounting import WAIT_BAR, WAIT_S
from scheduling.models import (
    ROLLUP_KEY,
    USAGE_DAY_KEY,
    USAGE_WAIT_DAY_KEY,
    UsageDay,
    UsageRecord,
    UsageWaitDay,
    UsageWaitWeek,
)

DAY = timedelta(days=1)
MICROSECOND = timedelta(microseconds=1)
# The ledger's columns an attempt's part of the rollup is made of.
FIELDS = (
    *ROLLUP_KEY[1:],
    *("gpus", "cpus", "started_at", "ended_at", "outcome", "lost_cause", "lost_gpu_hours", "superseded", "bar"),
)
USAGE_SUMS = ("gpu_us", "cpu_us", "ended", "lost_gpu_hours", "superseded")
# Rows held in memory by a rebuild before they are written.
FLUSH_EVERY = 200_000


def utc_day(at: datetime) -> date:
    return at.astimezone(UTC).date()


def day_parts(start: datetime, end: datetime) -> Iterator[tuple[date, int]]:
    """[start, end) cut at UTC midnights: (each day, the microseconds of it inside)."""
    at = start
    while at < end:
        stop = min(end, datetime.combine(utc_day(at) + DAY, time(), UTC))
        yield utc_day(at), (stop - at) // MICROSECOND
        at = stop


class Rollup:
    """The rollup's rows for some closed attempts, summed in memory before one upsert."""

    def __init__(self) -> None:
        self.days: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0.0, 0])
        self.waits: Counter[tuple] = Counter()
        self.week_waits: Counter[tuple] = Counter()

    def add(self, row: dict) -> None:
        """One closed attempt (FIELDS), by the module docstring's rule 1."""
        group = tuple(row[name] for name in ROLLUP_KEY[1:])
        how = (row["outcome"], row["lost_cause"])
        for day, held in day_parts(row["started_at"], row["ended_at"]):
            sums = self.days[(day, *group, *how)]
            sums[0] += row["gpus"] * held
            sums[1] += row["cpus"] * held
        ending = self.days[(utc_day(row["ended_at"]), *group, *how)]
        ending[2] += 1
        ending[3] += row["lost_gpu_hours"]
        ending[4] += row["superseded"]
        started = utc_day(row["started_at"])
        self.waits[(started, *group, row["bar"])] += 1
        self.week_waits[(started - timedelta(days=started.weekday()), *group, row["bar"])] += 1

    def __len__(self) -> int:
        return len(self.days) + len(self.waits) + len(self.week_waits)

    def write(self, models: tuple = ()) -> None:
        """Add these rows to the rollup's tables (`models`: UsageDay, UsageWaitDay, UsageWaitWeek
        or a migration's), and forget them."""
        day, wait, week = models or (UsageDay, UsageWaitDay, UsageWaitWeek)
        _upsert(day._meta.db_table, USAGE_DAY_KEY, USAGE_SUMS, [(*key, *sums) for key, sums in self.days.items()])
        for model, waits in ((wait, self.waits), (week, self.week_waits)):
            _upsert(model._meta.db_table, USAGE_WAIT_DAY_KEY, ("attempts",), [(*key, n) for key, n in waits.items()])
            waits.clear()
        self.days.clear()


def _upsert(table: str, key: tuple[str, ...], sums: tuple[str, ...], rows: list[tuple], batch: int = 2000) -> None:
    """Insert rows, adding their sums to any row already there with the same key (PostgreSQL
    and SQLite both read this upsert)."""
    columns = ", ".join((*key, *sums))
    adds = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in sums)
    one = "(" + ", ".join(["%s"] * (len(key) + len(sums))) + ")"
    with connection.cursor() as cursor:
        for at in range(0, len(rows), batch):
            chunk = rows[at : at + batch]
            values = ", ".join([one] * len(chunk))
            sql = f"INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT ({', '.join(key)}) DO UPDATE SET {adds}"
            cursor.execute(sql, [value for row in chunk for value in row])


def closed_rows(rows: QuerySet) -> Iterable[dict]:
    """The closed attempts among `rows`, as the dicts Rollup.add reads (the wait's bar computed
    by the same expression the ledger's reports use)."""
    return rows.filter(ended_at__isnull=False).annotate(wait=WAIT_S, bar=WAIT_BAR).values(*FIELDS)


def do_add_closed(record_ids: list[int]) -> None:
    """Add the attempts just closed (module docstring, 2). The caller's transaction closed them."""
    rollup = Rollup()
    for row in closed_rows(UsageRecord.objects.filter(id__in=record_ids).order_by()):
        rollup.add(row)
    rollup.write()


def do_supersede(job_id: int, attempt: int) -> None:
    """The job's attempt `attempt` has just opened: its earlier closed attempts are no longer
    its last. Marks them and adds each to its end day's `superseded`, in the caller's
    transaction (the one that opened the attempt), so the rollup and the ledger agree."""
    earlier = UsageRecord.objects.select_for_update().filter(
        job_id=job_id, attempt__lt=attempt, ended_at__isnull=False, superseded=False
    )
    rows = list(earlier.values("id", "ended_at", "outcome", "lost_cause", *ROLLUP_KEY[1:]))
    if not rows:
        return
    UsageRecord.objects.filter(id__in=[row["id"] for row in rows]).update(superseded=True)
    for row in rows:
        key = {name: row[name] for name in (*ROLLUP_KEY[1:], "outcome", "lost_cause")}
        UsageDay.objects.filter(day=utc_day(row["ended_at"]), **key).update(superseded=F("superseded") + 1)


def do_end_preempted(job_id: int, outcome: str, *, left_as: tuple[str, ...]) -> None:
    """The job's last attempt closed as it left its nodes PREEMPTED (`left_as`: that, or the
    ledger's REQUEUED), and the leader's verdict, or a cancel, ended the job there (its restart
    policy fails it, it was cancelled meanwhile): the attempt ended the job as `outcome`, which the
    ledger's row and its part of the rollup now say, in the caller's transaction (QA: a job failed
    for good counted among the PREEMPTED, which resume). Its lost work keeps its cause."""
    rows = UsageRecord.objects.select_for_update().filter(job_id=job_id, superseded=False, outcome__in=left_as)
    closed = list(closed_rows(rows))
    if not closed:
        return
    rows.update(outcome=outcome)
    taken, given = Rollup(), Rollup()
    for row in closed:
        taken.add(row)
        given.add({**row, "outcome": outcome})
    # Taken away by an update (an upsert's row to insert must hold no negative sum); its waits
    # stay where they are (they are not kept by outcome).
    for key, (gpu_us, cpu_us, ended, lost, superseded) in taken.days.items():
        held = UsageDay.objects.filter(**dict(zip(USAGE_DAY_KEY, key, strict=True)))
        held.update(
            gpu_us=F("gpu_us") - gpu_us,
            cpu_us=F("cpu_us") - cpu_us,
            ended=F("ended") - ended,
            lost_gpu_hours=Round(F("lost_gpu_hours") - lost, 4),  # as the ledger's rows hold them
            superseded=F("superseded") - superseded,
        )
        held.filter(gpu_us=0, cpu_us=0, ended=0, superseded=0).delete()  # as a rebuild leaves it
    given.waits.clear()
    given.week_waits.clear()
    given.write()


def do_rebuild(*, record=UsageRecord, day=UsageDay, wait=UsageWaitDay, week=UsageWaitWeek) -> dict:
    """Rebuild the rollup from the ledger (module docstring, 3). The models may be a
    migration's. Closes wait for it (the ledger is locked against writes while it reads)."""
    attempts, models = 0, (day, wait, week)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {record._meta.db_table} IN SHARE MODE")
        for model in models:
            model.objects.all().delete()
        rollup = Rollup()
        for row in closed_rows(record.objects.order_by("started_at")).iterator(chunk_size=10_000):
            rollup.add(row)
            attempts += 1
            if len(rollup) >= FLUSH_EVERY:
                rollup.write(models)
        rollup.write(models)
    if connection.vendor == "postgresql":  # the planner's row counts, for the reports' plans
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {', '.join(model._meta.db_table for model in models)}")
    return {"attempts": attempts, "days": day.objects.count(), "waits": wait.objects.count() + week.objects.count()}
