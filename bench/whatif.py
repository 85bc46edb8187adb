"""How long a what-if preview takes at the size it is allowed (MLQ_WHATIF_MAX_JOBS).

    python bench/whatif.py [--jobs 10000] [--days 7] [--seed 1]
        [--database-url postgres://.../mlqueue_bench_whatif]

Creates a scratch database with the demo teams and fleet (224 GPUs) and a usage ledger of
`--jobs` jobs submitted over `--days` days (seeded: 1 to 32 GPUs, mostly small, lognormal
runtimes, about 70% of the fleet's GPU-hours, a tenth preempted once), then times what a
preview does: the size check (`count_jobs`), the export of the window as a trace, and the
replay under the current and a proposed quota (the Celery task's body, run in this process).
Prints one JSON line: the jobs, each stage's wall seconds and the replay's jobs per minute.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import recreate_database  # noqa: E402

START = datetime(2026, 4, 6, tzinfo=UTC)
TEAMS = (("research-foundation-models", 0.4), ("research-vision", 0.2), ("production-ranking", 0.4))
SIZES = ((1, 0.45), (2, 0.15), (4, 0.15), (8, 0.17), (16, 0.05), (32, 0.03))
CLASSES = (("gpu:H100", 0.6), ("gpu:A100", 0.3), ("gpu:L40S", 0.1))
TARGET_LOAD = 0.7
FLEET_GPUS = 224


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_whatif")
    return parser.parse_args(argv)


def pick(rng: random.Random, weighted) -> object:
    return rng.choices([value for value, _ in weighted], [weight for _, weight in weighted])[0]


def ledger_rows(args) -> list:
    """The ledger's rows: each job's attempts, runtimes scaled to TARGET_LOAD of the fleet."""
    from scheduling.models import LostCause, UsageRecord
    from teams.models import Team

    rng = random.Random(args.seed)
    team_ids = dict(Team.objects.values_list("name", "id"))
    span = args.days * 86400
    shapes = [
        (pick(rng, TEAMS), pick(rng, SIZES), pick(rng, CLASSES), rng.lognormvariate(0, 1.2)) for _ in range(args.jobs)
    ]
    # Runtimes in proportion to the draws, scaled so the GPU-hours fill TARGET_LOAD of the window.
    scale = TARGET_LOAD * FLEET_GPUS * span / sum(gpus * weight for _, gpus, _, weight in shapes)
    rows = []
    for index, (team, gpus, rclass, weight) in enumerate(shapes):
        job_id, submit = 1_000_000 + index, START + timedelta(seconds=rng.uniform(0, span))
        runtime = timedelta(seconds=max(60.0, weight * scale))
        common = {"job_id": job_id, "team_id": team_ids[team], "team_name": team, "owner_id": 1, "owner_name": "alice"}
        common |= {
            "job_name": f"job-{index}",
            "resource_class": rclass,
            "priority": "P2",
            "gpus": gpus,
            "cpus": gpus * 8,
        }
        started = submit + timedelta(seconds=rng.uniform(0, 600))
        if rng.random() < 0.1:  # preempted once, a third of its run so far lost
            cut = runtime / 2
            lost = gpus * cut.total_seconds() / 3 / 3600
            rows.append(
                UsageRecord(
                    **common,
                    attempt=1,
                    queued_at=submit,
                    started_at=started,
                    ended_at=started + cut,
                    outcome="PREEMPTED",
                    lost_gpu_hours=lost,
                    lost_cause=LostCause.PREEMPTION,
                )
            )
            submit, started = started + cut, started + cut + timedelta(seconds=120)
            runtime = runtime - cut * 2 / 3
            common["attempt"] = 2
        rows.append(
            UsageRecord(
                **{"attempt": 1, **common},
                queued_at=submit,
                started_at=started,
                ended_at=started + runtime,
                outcome="SUCCEEDED",
            )
        )
    return rows


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, round(time.perf_counter() - started, 2)


def main(argv=None) -> dict:
    args = parse_args(argv)
    env = {**os.environ, "DATABASE_URL": args.database_url, "DJANGO_SETTINGS_MODULE": "mlqueue.settings", "DEBUG": "1"}
    env.pop("REDIS_URL", None)  # the replay runs here, not in a worker
    env["MLQ_WHATIF_MAX_JOBS"] = str(max(args.jobs * 2, 1))
    env["MLQ_WHATIF_MAX_DAYS"] = str(int(args.days) + 2)
    env["MLQ_WHATIF_TIME_LIMIT_S"] = "3600"
    recreate_database(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "seed_demo"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling import history
    from scheduling.models import UsageRecord
    from scheduling.whatif import do_run_preview, do_start_preview
    from teams.models import Team

    UsageRecord.objects.bulk_create(ledger_rows(args), batch_size=5000)
    end = START + timedelta(days=args.days)
    jobs, count_s = timed(lambda: history.count_jobs(START, end))
    export, export_s = timed(lambda: history.export_window(START, end, as_of=min(timezone.now(), end)))
    team = Team.objects.get(name="research-vision")
    preview = do_start_preview(
        user=get_user_model().objects.get(username="ops"),
        team=team,
        rclass="gpu:H100",
        changes={"guaranteed": 10},
        start=START,
        end=end,
    )
    preview.refresh_from_db()
    if preview.state == "QUEUED":  # embedded mode runs the task eagerly at commit; else run it here
        do_run_preview(preview_id=preview.pk)
    preview.refresh_from_db()
    replay_s = round((preview.finished_at - preview.started_at).total_seconds(), 2)
    figures = {
        "jobs": args.jobs,
        "days": args.days,
        "candidates": jobs,
        "exported": len(export.jobs),
        "state": preview.state,
        "count_ms": round(count_s * 1000, 1),
        "export_s": export_s,
        "preview_s": replay_s,
        "replayed_jobs_per_min": round(2 * len(export.jobs) / replay_s * 60) if replay_s else None,
    }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
