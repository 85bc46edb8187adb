"""What one submit and one schedule fire cost the process that does them, in-process.

    python bench/submit_cost.py [--submits 200] [--fires 200] [--nodes 36] [--profile N] [--batch N]
                                [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_bench_submit]
                                [--redis-url redis://127.0.0.1:6379/14]

Creates a scratch database (dropped first if it exists), migrates it and seeds the demo
cluster (36 nodes; `--nodes` adds 8 x H100 machines in 2 zones of 16 racks up to that many:
every submit checks the spec against the whole fleet). Then, as alice: `--submits` distinct
one-GPU jobs through the submit service (check_job_submission + do_submit_job, as the API
calls them), and `--fires` fire times of an every-5-minutes schedule through fire_due (one
fire = a claim and a submit). Each is timed alone: CPU milliseconds of this process
(time.process_time: the database's own work is not in it) and wall milliseconds, with the
SQL queries it sent. Prints one JSON line of medians. `--profile N` prints the N costliest
functions of the fires to stderr first (cumulative; PROFILE_SORT=tottime: their own time).
`--batch N` also submits `--submits` more jobs N at a time through the batch service
(check_job_batch + do_submit_job_batch, as POST /api/v1/jobs/batch calls them): the medians of
each batch's CPU and wall milliseconds divided by N, and its queries.
"""

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import manage, recreate_database  # noqa: E402

SPEC = {
    "name": "tiny",
    "team": "research-foundation-models",
    "command": ["true"],
    "resources": {"gpu_count": 1, "gpu_type": "H100"},
}
FIRST_FIRE = datetime(2026, 10, 22, 0, 5, tzinfo=UTC)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--fires", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=36)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--batch", type=int, default=0, metavar="N")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_submit")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args(argv)
    if args.submits < 1 or args.fires < 1:
        parser.error("--submits and --fires must be at least 1")
    return args


def setup(args) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-submit-cost-key"),
        "DEBUG": "0",
    }
    recreate_database(args.database_url)
    manage("migrate", "--verbosity", "0", env=env)
    manage("seed_demo", "--force", env=env)
    os.environ.update(env)
    import django

    django.setup()


def grow_fleet(total: int) -> None:
    from scheduling.models import Node

    have = Node.objects.count()
    extra = [
        Node(name=f"bench-{n:05d}", zone=f"z{n % 2 + 1}", rack=f"z{n % 2 + 1}-r{n % 16 + 1}", gpu_type="H100")
        for n in range(max(0, total - have))
    ]
    for node in extra:
        node.gpu_count, node.cpu_count, node.memory_gb = 8, 96, 1024
    Node.objects.bulk_create(extra)


class Timer:
    """CPU ms, wall ms and queries of each timed call."""

    def __init__(self):
        self.cpu, self.wall, self.queries = [], [], []

    def time(self, call):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        # The log keeps the last 9,000 queries: past that a count would read 0.
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as captured:
            cpu, wall = time.process_time(), time.perf_counter()
            result = call()
            self.cpu.append((time.process_time() - cpu) * 1000)
            self.wall.append((time.perf_counter() - wall) * 1000)
        self.queries.append(len(captured))
        return result

    def figures(self, prefix: str) -> dict:
        return {
            f"{prefix}_cpu_ms_p50": round(statistics.median(self.cpu), 2),
            f"{prefix}_wall_ms_p50": round(statistics.median(self.wall), 2),
            f"{prefix}_queries_p50": statistics.median(self.queries),
        }


def submits(count: int) -> dict:
    from django.contrib.auth import get_user_model

    from scheduling import services

    alice = get_user_model().objects.get(username="alice")
    timer = Timer()

    def submit(n: int):
        team, spec = services.check_job_submission(user=alice, data={**SPEC, "client_job_id": f"bench-{n}"})
        job, created = services.do_submit_job(user=alice, team=team, spec=spec)
        assert created, job.pk

    for n in range(count):
        timer.time(lambda n=n: submit(n))
    return timer.figures("submit")


def batches(count: int, size: int) -> dict:
    from django.contrib.auth import get_user_model

    from scheduling import submit_batch

    alice = get_user_model().objects.get(username="alice")
    timer = Timer()

    def submit(first: int):
        specs = [{**SPEC, "client_job_id": f"batch-{n}"} for n in range(first, first + size)]
        checked = submit_batch.check_job_batch(user=alice, data={"jobs": specs})
        outcomes = submit_batch.do_submit_job_batch(user=alice, checked=checked)
        assert all(outcome.status == 201 for outcome in outcomes), outcomes

    for first in range(0, count, size):
        timer.time(lambda first=first: submit(first))
    return {
        "batch": size,
        "batch_cpu_ms_per_job_p50": round(statistics.median(timer.cpu) / size, 3),
        "batch_wall_ms_per_job_p50": round(statistics.median(timer.wall) / size, 3),
        "batch_queries_p50": statistics.median(timer.queries),
    }


def fires(count: int, profile: int) -> dict:
    """Fire times of one schedule, one after another, each fired a second after it is due.
    CaptureQueriesContext keeps each query's SQL; its cost is in both figures alike."""
    from django.contrib.auth import get_user_model

    from scheduling import schedules

    alice = get_user_model().objects.get(username="alice")
    data = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "concurrency": "allow", "spec": SPEC}
    team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
    schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec, now=FIRST_FIRE - timedelta(minutes=5))
    timer, profiler = Timer(), cProfile.Profile()
    fire_due = (lambda *, now: profiler.runcall(schedules.fire_due, now=now)) if profile else schedules.fire_due
    for n in range(count):
        now = FIRST_FIRE + timedelta(minutes=5 * n, seconds=1)
        fired = timer.time(lambda now=now: fire_due(now=now))
        assert len(fired) == 1 and fired[0].outcome == "SUBMITTED", fired
    if profile:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(
            profile
        )
    return timer.figures("fire")


def main(argv=None) -> None:
    args = parse_args(argv)
    setup(args)
    grow_fleet(args.nodes)
    figures = {"submits": args.submits, "fires": args.fires, "nodes": args.nodes}
    figures.update(submits(args.submits))
    if args.batch:
        figures.update(batches(args.submits, args.batch))
    figures.update(fires(args.fires, args.profile))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
