"""How fast the forecast's weekly accuracy report answers over a quarter of starts.

    python bench/forecast_weeks.py [--days 90] [--jobs-per-day 20000]
                                   [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_bench_fcweeks]

Creates a scratch database with the demo teams and `--days` x `--jobs-per-day` StartForecast
rows (one a started job, spread over the days and the three demo teams; their forecasts some
minutes to hours off, a few without a likely start), then times
`forecast_accuracy_by_week` over the whole range for every team and for one team with nothing
cached, then with the weeks that are over cached (every later view), and the API for an admin.
Prints one JSON line with the median milliseconds of each over several runs.
"""

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.queue_page import seeded_scratch_django  # noqa: E402

END = datetime(2026, 11, 30, tzinfo=UTC)

# One row a job: started at an even spread over the days; the first forecast up to 3 h late
# or early, the last up to 20 min; every tenth without a likely start.
POPULATE = """
INSERT INTO scheduling_startforecast
    (team_id, first_latest, first_likely, first_at, last_latest, last_likely, last_at, started_at)
SELECT teams.ids[1 + n %% 3],
       s + make_interval(secs => (n * 7919) %% 10800 - 5400 + 1800),
       CASE WHEN n %% 10 = 0 THEN NULL ELSE s + make_interval(secs => (n * 104729) %% 10800 - 5400) END,
       s - interval '3 hours',
       s + make_interval(secs => (n * 7919) %% 1200 - 300),
       CASE WHEN n %% 10 = 0 THEN NULL ELSE s + make_interval(secs => (n * 104729) %% 1200 - 600) END,
       s - interval '1 minute',
       s
FROM generate_series(0::bigint, %(rows)s - 1) AS n,
     LATERAL (SELECT %(start)s::timestamptz + make_interval(secs => n * %(spacing)s) AS s) AS started,
     (SELECT array_agg(id ORDER BY name) AS ids FROM teams_team WHERE parent_id IS NOT NULL) AS teams
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--jobs-per-day", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_fcweeks")
    return parser.parse_args(argv)


def populate(days: int, per_day: int) -> int:
    from django.db import connection

    rows = days * per_day
    with connection.cursor() as cursor:
        cursor.execute(POPULATE, {"rows": rows, "start": END - timedelta(days=days), "spacing": 86400 / per_day})
        cursor.execute("ANALYZE scheduling_startforecast")
    return rows


def median_ms(call, runs: int) -> float:
    timings = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(timings[1:]), 1)  # the first warms the caches


def main(argv=None) -> None:
    args = parse_args(argv)
    seeded_scratch_django(args.database_url)
    from django.core.cache import cache
    from django.test import Client

    from scheduling.forecast_accuracy import forecast_accuracy_by_week

    started = time.perf_counter()
    rows = populate(args.days, args.jobs_per_day)
    populate_s = round(time.perf_counter() - started, 1)
    start = END - timedelta(days=args.days)
    weeks = forecast_accuracy_by_week(start, END)
    assert sum(week.jobs for week in weeks) == rows, (sum(week.jobs for week in weeks), rows)
    client = Client()
    client.login(username="ops", password="demo")
    url = f"/api/v1/forecast-accuracy?from={start.date()}&to={END.date()}"

    def cold(teams=None):
        cache.clear()
        forecast_accuracy_by_week(start, END, teams)

    # Cold: nothing cached (the first view of a quarter); warm: the weeks that are over cached,
    # as any later view finds them (the bench's weeks are all over).
    figures = {
        "rows": rows,
        "weeks": len(weeks),
        "populate_s": populate_s,
        "all_teams_cold_ms": median_ms(cold, args.runs),
        "one_team_cold_ms": median_ms(lambda: cold(["research-vision"]), args.runs),
        "all_teams_warm_ms": median_ms(lambda: forecast_accuracy_by_week(start, END), args.runs),
        "api_admin_warm_ms": median_ms(lambda: client.get(url), args.runs),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
