"""The usage rollup gives exactly the figures of the ledger's row scan (the reference,
`source="ledger"`): random ledgers (attempts spanning midnights, still running, ending in the
future of a frozen `now`), random prices changing at midnight or inside a day, random
windows (whole days or not, before or past now), every grouping, filters and visibility.
And the rollup the closing transitions add up equals the one a rebuild makes, twice over."""

import io
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import Q

from scheduling import rollup
from scheduling.accounting import GROUPS, UsageQuery, usage_report, visible_to
from scheduling.models import Price, UsageDay, UsageRecord, UsageWaitDay, UsageWaitWeek
from teams.models import Membership

BASE = datetime(2026, 3, 1, tzinfo=UTC)
CLASSES = [("gpu:H100", 8), ("gpu:A100", 8), ("cpu", 0)]
OUTCOMES = [("SUCCEEDED", "", 0.0), ("PREEMPTED", "preemption", 1.0), ("FAILED", "node_loss", 1.0)]
GROUPINGS = [(name,) for name in GROUPS] + [("team", "week"), ("owner", "day"), ("resource_class", "priority")]


def random_ledger(rng: random.Random, *, now: datetime) -> None:
    """~150 jobs over three weeks before `now`: waits of seconds to a day, runs of minutes to
    three days; one in six still running; closed ones added as a closing transition adds; one in
    four closed ones runs again (a later attempt opens, superseding it, as the ledger does)."""
    people = list(Membership.objects.select_related("team", "user"))
    for job_id in range(1, rng.randint(100, 200)):
        member = rng.choice(people)
        rclass, per_node = rng.choice(CLASSES)
        started = now - timedelta(seconds=rng.uniform(0, 21 * 86400))
        gpus = per_node * rng.choice((1, 2)) if per_node else 0
        attempt, priority = 1, rng.choice(("P0", "P1", "P2", "P3"))
        while True:
            ended = started + timedelta(seconds=rng.choice((rng.uniform(60, 3600), rng.uniform(3600, 3 * 86400))))
            running = rng.random() < 1 / 6
            outcome, cause, lost = rng.choice(OUTCOMES)
            record = UsageRecord.objects.create(
                job_id=job_id,
                attempt=attempt,
                job_name=f"job-{job_id}",
                team_id=member.team_id,
                team_name=member.team.name,
                owner_id=member.user_id,
                owner_name=member.user.username,
                resource_class=rclass,
                priority=priority,
                gpus=gpus,
                cpus=rng.choice((4, 16)),
                queued_at=started - timedelta(seconds=rng.choice((0, rng.uniform(0, 900), rng.uniform(900, 86400)))),
                started_at=started,
                ended_at=None if running else ended,
                outcome="" if running else outcome,
                lost_gpu_hours=0.0 if running else round(lost * gpus * rng.uniform(0, 2), 4),
                lost_cause="" if running or not gpus else cause,
            )
            rollup.do_supersede(job_id, attempt)
            if running:
                break
            rollup.do_add_closed([record.pk])
            if rng.random() >= 1 / 4 or ended >= now:
                break
            attempt, started = attempt + 1, ended + timedelta(seconds=rng.uniform(0, 3600))


def random_prices(rng: random.Random, *, now: datetime) -> None:
    for rclass, _ in CLASSES:
        for _ in range(rng.randint(0, 3)):
            at = now - timedelta(days=rng.randint(0, 25))
            at = at.replace(hour=0, minute=0, second=0, microsecond=0) if rng.random() < 0.5 else at
            gpu, cpu = Decimal(rng.randint(0, 400)) / 100, Decimal(rng.randint(0, 10)) / 100
            Price.objects.get_or_create(
                resource_class=rclass, effective_from=at, defaults={"gpu_hour": gpu, "cpu_hour": cpu}
            )


def random_window(rng: random.Random, *, now: datetime) -> tuple[datetime, datetime]:
    start = now - timedelta(days=rng.randint(1, 24), seconds=rng.choice((0, rng.uniform(0, 86400))))
    end = start + timedelta(days=rng.randint(0, 26), seconds=rng.choice((0, rng.uniform(1, 86400))))
    if rng.random() < 0.3:  # whole UTC days
        start, end = start.replace(hour=0, minute=0, second=0), end.replace(hour=0, minute=0, second=0)
        end += timedelta(days=1) if end <= start else timedelta(0)
    return start, end


def figures(report) -> list:
    def one(row):
        return (row.key, row.gpu_hours, row.cpu_hours, row.cost, row.lost_gpu_hours, row.outcomes,
                row.job_outcomes, row.started, row.wait_p50_s, row.wait_p95_s)  # fmt: skip

    return [one(row) for row in report.rows] + [one(report.total)]


@pytest.mark.parametrize("seed", range(8))
def test_the_rollup_answers_exactly_what_the_ledgers_rows_do(demo, seed):
    rng = random.Random(seed)
    now = BASE + timedelta(days=rng.randint(20, 40), seconds=rng.uniform(0, 86400))
    random_ledger(rng, now=now)
    random_prices(rng, now=now)
    users = [None, *get_user_model().objects.order_by("username")]
    for _ in range(25):
        start, end = random_window(rng, now=now)
        user = rng.choice(users)
        member = rng.choice(list(Membership.objects.select_related("team", "user")))
        query = UsageQuery(
            start=start,
            end=end,
            now=now,
            group_by=rng.choice(GROUPINGS),
            visible=Q() if user is None else visible_to(user),
            team=member.team.name if rng.random() < 0.2 else None,
            owner=member.user.username if rng.random() < 0.2 else None,
            resource_class=rng.choice(CLASSES)[0] if rng.random() < 0.2 else None,
            priority=rng.choice(("P1", "P2")) if rng.random() < 0.2 else None,
        )
        reference = figures(usage_report(query, source="ledger"))
        assert figures(usage_report(query)) == reference, query
    assert figures(usage_report(query)) != [], "a report has at least its total"


def rollup_rows() -> list[list]:
    """Every row of the rollup's three tables, by key, without ids."""
    tables = (UsageDay, UsageWaitDay, UsageWaitWeek)
    rows = (model.objects.order_by(*model._meta.constraints[0].fields).values() for model in tables)
    return [[{k: v for k, v in row.items() if k != "id"} for row in table] for table in rows]


def test_a_rebuild_makes_the_rollup_the_closing_transitions_made_and_is_idempotent(demo):
    now = BASE + timedelta(days=30, hours=7)
    random_ledger(random.Random(99), now=now)
    added = rollup_rows()
    assert (
        len(added[0]) > 50 and sum(r["ended"] for r in added[0]) == UsageRecord.objects.exclude(ended_at=None).count()
    )
    out = io.StringIO()
    call_command("rebuild_usage_rollup", stdout=out)
    closed = UsageRecord.objects.exclude(ended_at=None).count()
    assert out.getvalue().startswith(f"rolled up {closed} closed attempts: {len(added[0])} day rows")
    assert rollup_rows() == added
    superseded = UsageRecord.objects.filter(superseded=True).count()
    assert superseded > 10 and sum(r["superseded"] for r in added[0]) == superseded
    assert sum(r["attempts"] for r in added[1]) == sum(r["attempts"] for r in added[2]) == closed
    call_command("rebuild_usage_rollup", stdout=io.StringIO())
    assert rollup_rows() == added


def test_an_attempt_spanning_midnights_is_split_across_its_days_to_the_microsecond():
    start = datetime(2026, 3, 1, 22, 30, 0, 250, tzinfo=UTC)
    end = datetime(2026, 3, 3, 0, 15, tzinfo=UTC)
    parts = list(rollup.day_parts(start, end))
    assert parts == [
        (start.date(), (timedelta(hours=1, minutes=30) - timedelta(microseconds=250)) // timedelta(microseconds=1)),
        (datetime(2026, 3, 2).date(), 86_400_000_000),
        (end.date(), 900_000_000),
    ]
    assert sum(us for _, us in parts) == (end - start) // timedelta(microseconds=1)
    assert list(rollup.day_parts(start, start)) == []
