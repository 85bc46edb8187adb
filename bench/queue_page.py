"""How fast the queue page renders with 50,000 jobs in the database.

    python bench/queue_page.py [--jobs 50000] [--database-url postgres://.../mlqueue_bench_queue]

Creates a scratch database with the demo teams and `--jobs` jobs (a tenth still pending or
running, the rest ended), then renders the page as a member and as an admin, for the views
people use: active jobs in queue order, all jobs newest first, and a page far back. Prints one
JSON line with the median milliseconds of each over several renders.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import recreate_database  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--renders", type=int, default=7)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_queue")
    return parser.parse_args(argv)


def populate(count: int) -> None:
    """`count` jobs over the demo teams, in bulk (the submit path is not what is measured)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling.models import Job, Task
    from teams.models import Team

    owners = {u.username: u for u in get_user_model().objects.all()}
    teams = [
        (Team.objects.get(name=t), owners[u])
        for t, u in (
            ("research-foundation-models", "alice"),
            ("research-vision", "victor"),
            ("production-ranking", "bob"),
        )
    ]
    now, states = timezone.now(), ["SUCCEEDED"] * 7 + ["FAILED", "CANCELLED"] + ["PENDING"]
    for first in range(0, count, 5000):
        jobs = [_job(i, teams[i % 3], states[i % len(states)], now) for i in range(first, min(count, first + 5000))]
        Job.objects.bulk_create(jobs)
        Task.objects.bulk_create([Task(job=job, rank=0, state=job.state) for job in jobs])


def _job(i: int, team_owner, state: str, now):
    from datetime import timedelta

    from scheduling.models import Job

    team, owner = team_owner
    spec = {"name": f"job-{i}", "team": team.name, "command": ["true"]}
    return Job(
        team=team,
        owner=owner,
        name=f"job-{i}",
        command=["true"],
        spec=spec,
        spec_digest=str(i),
        state=state,
        gpu_type="H100",
        gpu_count=8,
        gpus_per_task=8,
        submitted_at=now - timedelta(seconds=i),
        pending_reason_code="INSUFFICIENT_CAPACITY" if state == "PENDING" else "",
        pending_reason_message="needs 8 H100; 0 of 128 free" if state == "PENDING" else "",
    )


def render_ms(client, url: str, renders: int) -> float:
    timings = []
    for _ in range(renders):
        started = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    return round(statistics.median(timings[1:]), 1)


def seeded_scratch_django(database_url: str) -> None:
    """A fresh database at `database_url`, migrated and seeded with the demo (no Redis), and
    Django set up on it in this process, for benchmarks that render pages or query it."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "DEBUG": "1",
        "ALLOWED_HOSTS": "testserver",
        "MLQ_DB_POOL": "0",
    }
    env.pop("REDIS_URL", None)
    recreate_database(database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    os.environ.update(env)
    import django

    django.setup()


def main(argv=None) -> None:
    args = parse_args(argv)
    seeded_scratch_django(args.database_url)
    from django.test import Client

    populate(args.jobs)
    figures = {"jobs": args.jobs}
    for username in ("alice", "ops"):
        client = Client()
        client.login(username=username, password="demo")
        figures[f"{username}_active_ms"] = render_ms(client, "/queue/", args.renders)
        figures[f"{username}_all_newest_ms"] = render_ms(client, "/queue/?state=all&sort=-id", args.renders)
        figures[f"{username}_all_page_300_ms"] = render_ms(client, "/queue/?state=all&sort=-id&page=300", args.renders)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
