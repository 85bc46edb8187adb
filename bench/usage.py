"""How fast the usage API answers over a quarter of the ledger.

    python bench/usage.py [--days 90] [--jobs-per-day 20000] [--database-url postgres://.../mlqueue_bench_usage]

Creates a scratch database with the demo teams and users, writes `--days` x `--jobs-per-day`
jobs' attempts into the usage ledger with COPY (one in ten preempted once and run again,
losing work; a few prices changing during the quarter), then times GET /api/v1/usage through
the whole stack (the test client: URL routing, authentication, DRF, JSON) for the quarter by
team as an admin (the target: under 500 ms), by week, and as a team lead. COPY bypasses the
transitions that keep the daily rollup, so the bench rebuilds it (`rollup_build_s`, as
`manage.py rebuild_usage_rollup` would) before the requests. Prints one JSON line with the
median milliseconds of each over several requests, and the same quarter by team read from
the ledger's rows alone (`quarter_by_team_scan_ms`, the reference).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import recreate_database  # noqa: E402

END = datetime(2026, 4, 1, tzinfo=UTC)
CLASSES = [("gpu:H100", 8), ("gpu:A100", 8), ("gpu:L40S", 4), ("cpu", 0)]
COLUMNS = (
    "job_id, attempt, job_name, team_id, team_name, owner_id, owner_name, resource_class, priority, gpus, cpus, "
    "queued_at, started_at, ended_at, outcome, stop_reason, failure_class, lost_gpu_hours, lost_cause, lost_since, "
    "superseded"
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--jobs-per-day", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_usage")
    return parser.parse_args(argv)


def attempts(days: int, per_day: int, people: list[tuple]):
    """The ledger's rows: each job waits up to an hour, runs up to 12 hours; one in ten is
    preempted part way (losing up to an hour since its checkpoint) and runs again."""
    rng = random.Random(18)
    start = END - timedelta(days=days)
    job_id = 0
    for day in range(days):
        for _ in range(per_day):
            job_id += 1
            team_id, team, owner_id, owner = people[job_id % len(people)]
            rclass, per_node = CLASSES[job_id % len(CLASSES)]
            gpus = per_node * rng.choice((1, 1, 1, 2, 4)) if per_node else 0
            queued = start + timedelta(days=day, seconds=rng.uniform(0, 86_400))
            began = queued + timedelta(seconds=rng.expovariate(1 / 600))
            ended = began + timedelta(seconds=rng.uniform(60, 12 * 3600))
            common = (f"job-{job_id}", team_id, team, owner_id, owner, rclass, f"P{job_id % 4}", gpus, 16)
            if job_id % 10 == 0:
                cut = began + (ended - began) / 3
                lost = gpus * rng.uniform(0, 1)
                checkpoint = cut - timedelta(hours=lost / gpus) if gpus else began
                yield (
                    job_id,
                    1,
                    *common,
                    queued,
                    began,
                    cut,
                    "PREEMPTED",
                    "PREEMPTED",
                    "INFRA",
                    lost,
                    "preemption",
                    checkpoint,
                    True,  # its job ran again
                )
                began, queued = cut + timedelta(seconds=rng.expovariate(1 / 300)), cut
            yield (
                job_id,
                2 if job_id % 10 == 0 else 1,
                *common,
                queued,
                began,
                ended,
                "SUCCEEDED",
                "",
                "",
                0.0,
                "",
                None,
                False,
            )


def populate(days: int, per_day: int) -> int:
    from django.db import connection

    from scheduling.models import Price
    from teams.models import Membership

    people = [
        (m.team_id, m.team.name, m.user_id, m.user.username)
        for m in Membership.objects.select_related("team", "user").order_by("id")
    ]
    rows = 0
    connection.ensure_connection()
    with connection.connection.cursor() as raw, raw.copy(f"COPY scheduling_usagerecord ({COLUMNS}) FROM STDIN") as copy:
        for row in attempts(days, per_day, people):
            copy.write_row(row)
            rows += 1
    for rclass, _ in CLASSES:  # a price at the start, and a change in the middle of the quarter
        Price.objects.create(
            resource_class=rclass, gpu_hour=2, cpu_hour=0.05, effective_from=END - timedelta(days=days)
        )
        Price.objects.create(
            resource_class=rclass, gpu_hour=2.5, cpu_hour=0.04, effective_from=END - timedelta(days=days // 2)
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_usagerecord")
    return rows


def request_ms(client, params: dict, requests: int) -> float:
    timings = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get("/api/v1/usage", params, secure=True)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (response.status_code, response.headers, response.content[:500])
    return round(statistics.median(timings[1:]), 1)


def scan_ms(quarter: dict) -> float:
    """The quarter by team from the ledger's rows alone, once, checked equal to the rollup's."""
    from django.contrib.auth import get_user_model
    from django.utils.dateparse import parse_datetime

    from scheduling import accounting

    user = get_user_model().objects.get(username="ops")
    start, end = parse_datetime(quarter["from"]), parse_datetime(quarter["to"])
    query = accounting.UsageQuery(start=start, end=end, now=end, visible=accounting.visible_to(user))
    started = time.perf_counter()
    scanned = accounting.usage_report(query, source="ledger")
    elapsed = round((time.perf_counter() - started) * 1000, 1)
    rolled = accounting.usage_report(query)
    assert (scanned.rows, scanned.total) == (rolled.rows, rolled.total), "the rollup and the scan disagree"
    return elapsed


def main(argv=None) -> None:
    args = parse_args(argv)
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-usage"),
        "ALLOWED_HOSTS": "testserver",
        "MLQ_DB_POOL": "0",
    }
    env.pop("REDIS_URL", None)
    recreate_database(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    seed = [sys.executable, "manage.py", "seed_demo", "--force"]
    subprocess.run(seed, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    started = time.perf_counter()
    rows = populate(args.days, args.jobs_per_day)
    figures = {"days": args.days, "jobs": args.days * args.jobs_per_day, "attempts": rows}
    figures["load_s"] = round(time.perf_counter() - started, 1)
    from scheduling import rollup

    started = time.perf_counter()
    built = rollup.do_rebuild()
    figures["rollup_build_s"] = round(time.perf_counter() - started, 1)
    figures["rollup_rows"] = built["days"] + built["waits"]
    quarter = {"from": (END - timedelta(days=args.days)).isoformat(), "to": END.isoformat()}
    clients = {}
    for username in ("ops", "rita"):
        clients[username] = Client()
        clients[username].force_login(get_user_model().objects.get(username=username))
    figures["quarter_by_team_ms"] = request_ms(clients["ops"], {**quarter, "group_by": "team"}, args.requests)
    figures["quarter_by_team_week_ms"] = request_ms(clients["ops"], {**quarter, "group_by": "team,week"}, args.requests)
    figures["quarter_lead_by_owner_ms"] = request_ms(clients["rita"], {**quarter, "group_by": "owner"}, args.requests)
    figures["quarter_by_team_scan_ms"] = scan_ms(quarter)
    figures["target_ms"] = 500
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
