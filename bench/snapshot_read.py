"""The leader's read of the store and its pass, with and without the reads kept between passes.

    python bench/snapshot_read.py [--pending 5000] [--running 300] [--reads 9]

Creates a scratch database with the demo cluster, `--pending` waiting one-GPU jobs and
`--running` one-GPU jobs running on its nodes, then times what a worker does each pass with
nothing changed: `build_view` (the read) and a kept `Scheduler`'s `schedule` on it, both ways:
a read that builds every object afresh (`kept=None`), and one that gives back the last read's
objects where the values are the same (`KeptReads`, what the worker keeps). Prints one JSON line
of medians over `--reads` steady passes (the first pass of each way, which builds everything,
is left out).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.queue_page import seeded_scratch_django  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=5000)
    parser.add_argument("--running", type=int, default=300)
    parser.add_argument("--reads", type=int, default=9)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_snapshot")
    args = parser.parse_args(argv)
    if min(args.pending, args.running) < 0 or args.reads < 1:
        parser.error("--pending and --running must be >= 0, --reads >= 1")
    return args


def populate(pending: int, running: int) -> None:
    """Waiting and running one-GPU jobs over the demo teams, in bulk; the running ones one GPU
    each on the demo's GPU nodes, as many as they hold."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling.models import Job, Node, Task
    from teams.models import Team

    owner = get_user_model().objects.get(username="alice")
    team = Team.objects.get(name="research-foundation-models")
    now = timezone.now()
    gpus = [(node, index) for node in Node.objects.exclude(gpu_type="") for index in range(node.gpu_count)]
    running = min(running, len(gpus))
    jobs = [
        Job(
            team=team,
            owner=owner,
            name=f"job-{i}",
            command=["true"],
            spec={"name": f"job-{i}", "team": team.name, "command": ["true"]},
            spec_digest=str(i),
            state="RUNNING" if i < running else "PENDING",
            gpu_type=gpus[i % len(gpus)][0].gpu_type if i < running else "H100",
            gpu_count=1,
            gpus_per_task=1,
            submitted_at=now,
            queued_at=now,
        )
        for i in range(running + pending)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    tasks = []
    for i, job in enumerate(jobs):
        if i < running:
            node, index = gpus[i]
            tasks.append(
                Task(job=job, rank=0, state="RUNNING", node=node, gpu_indices=[index], attempt=1, started_at=now)
            )
        else:
            tasks.append(Task(job=job, rank=0, state="PENDING"))
    Task.objects.bulk_create(tasks, batch_size=2000)


def steady_ms(reads: int, kept) -> tuple[float, float, int, int]:
    """Median ms of the read and of the kept Scheduler's pass on it, over `reads` steady passes."""
    from django.utils import timezone

    from scheduling.core.scheduler import Scheduler
    from scheduling.store_view import build_view

    scheduler, read, decide = Scheduler(), [], []
    for index in range(reads + 1):
        started = time.perf_counter()
        view = build_view(now=timezone.now(), kept=kept)
        read_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        scheduler.schedule(view.snapshot)
        if index:  # the first builds every object and the scheduler's index
            read.append(read_ms)
            decide.append((time.perf_counter() - started) * 1000)
    snapshot = view.snapshot
    return statistics.median(read), statistics.median(decide), len(snapshot.pending), len(snapshot.running)


def main(argv=None) -> None:
    args = parse_args(argv)
    seeded_scratch_django(args.database_url)
    from scheduling.cluster import KeptReads

    populate(args.pending, args.running)
    afresh_read, afresh_pass, pending, running = steady_ms(args.reads, None)
    kept_read, kept_pass, _, _ = steady_ms(args.reads, KeptReads())
    print(
        json.dumps(
            {
                "pending_jobs": pending,
                "running_jobs": running,
                "reads": args.reads,
                "afresh_read_ms": round(afresh_read, 1),
                "afresh_pass_ms": round(afresh_pass, 1),
                "kept_read_ms": round(kept_read, 1),
                "kept_pass_ms": round(kept_pass, 1),
                "read_ratio": round(kept_read / afresh_read, 3),
                "pass_ratio": round(kept_pass / afresh_pass, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
