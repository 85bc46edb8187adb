"""Submit-to-ASSIGNED latency on an idle cluster, through the real scheduler process.

    python bench/latency.py [--jobs 200] [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_bench]
                            [--redis-url redis://127.0.0.1:6379/14]

Creates a scratch database (dropped first if it exists), migrates it, seeds the demo cluster
with every node READY, starts `manage.py run_scheduler`, then submits one-GPU jobs one at a
time, as a user would, and times each from its commit to its assignment being visible in the
store (polled every 2 ms). Each job then reports a clean exit so the cluster stays idle.
Prints one JSON line.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scratch_db import recreate_database  # noqa: E402  (re-exported: every bench imports it from here)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return args


def manage(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def setup(args) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "DEBUG": "1",
    }
    recreate_database(args.database_url)
    manage("migrate", "--verbosity", "0", env=env)
    manage("seed_demo", "--force", env=env)
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from scheduling.models import Node

    Node.objects.update(state="READY")
    return env


def submit_and_wait(user, index: int) -> float:
    """Seconds from the job's commit to its assignment."""
    from scheduling import reports
    from scheduling.models import Task
    from scheduling.services import check_job_submission, do_submit_job

    data = {
        "team": "research-vision",
        "command": ["true"],
        "client_job_id": f"latency-{index}",
        "resources": {"gpu_count": 1, "gpu_type": "A100"},
    }
    team, spec = check_job_submission(user=user, data=data)
    job, _ = do_submit_job(user=user, team=team, spec=spec)
    committed = time.monotonic()
    while time.monotonic() < committed + 10:
        task = Task.objects.filter(job=job, state="ASSIGNED").values("attempt").first()
        if task:
            seen = time.monotonic()
            reports.do_report_exited(job_id=job.pk, rank=0, attempt=task["attempt"], exit_code=0)
            return seen - committed
        time.sleep(0.002)
    raise SystemExit(f"job {job.pk} was not assigned within 10 s")


def nearest_rank(values: list[float], percentile: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


def main(argv=None) -> None:
    args = parse_args(argv)
    env = setup(args)
    scheduler = subprocess.Popen(
        [sys.executable, "manage.py", "run_scheduler"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from django.contrib.auth import get_user_model

        from scheduling.models import SchedulerLease

        deadline = time.monotonic() + 30
        while not SchedulerLease.objects.filter(pk=1, epoch__gt=0).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        user = get_user_model().objects.get(username="victor")
        latencies = [submit_and_wait(user, i) * 1000 for i in range(args.jobs)]
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=15)
    print(
        json.dumps(
            {
                "jobs": len(latencies),
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(nearest_rank(latencies, 99), 1),
                "max_ms": round(max(latencies), 1),
                "mean_ms": round(statistics.mean(latencies), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
