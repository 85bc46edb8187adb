"""Job groups at size: submitting an array creates its children in bulk, and a pass over a deep
array costs what it starts, not how many elements wait.

    python bench/groups.py [--elements 10000] [--parallelism 16] [--passes 5]
                           [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_bench]

Creates a scratch database (dropped first if it exists), migrates it, seeds the demo cluster with
every node READY, then, in this process: submits one array of `--elements` one-GPU elements at
most `--parallelism` at once through the service the API calls (timed from the call to its commit);
runs leader passes (`run_pass`, the worker's own) and times them: the first places `parallelism`
elements, the rest find the array at its limit; times re-deriving the group's state (what each
child's transition adds), right after the submit and again after `VACUUM ANALYZE`. For scale, it
then cancels that array and times passes over a second one of as many elements without a limit
(each element then waits as a single job would: what a queue of that many jobs costs a pass).
Prints one JSON line.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import setup  # noqa: E402  (the scratch database and the demo cluster)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=16)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    args = parser.parse_args(argv)
    if args.elements < 1 or args.parallelism < 1 or args.passes < 2:
        parser.error("--elements and --parallelism must be at least 1, --passes at least 2")
    return args


def submit(user, data: dict):
    from scheduling.services import check_job_submission, do_submit_job

    started = time.perf_counter()
    team, spec = check_job_submission(user=user, data=data)
    job, _ = do_submit_job(user=user, team=team, spec=spec)
    return job, (time.perf_counter() - started) * 1000


def timed_syncs(parent_id: int, count: int = 21) -> list[float]:
    """What each child's start or end adds for its group: re-deriving the parent's state from its
    children's (under the parent's row lock, as a transition does)."""
    from django.db import transaction
    from django.utils import timezone

    from scheduling.group_state import sync_group_state

    took = []
    for _ in range(count):
        started = time.perf_counter()
        with transaction.atomic():
            sync_group_state(parent_id, now=timezone.now())
        took.append((time.perf_counter() - started) * 1000)
    return took


def vacuum_analyze() -> None:
    """What autovacuum does shortly after a bulk insert: fresh statistics and a visibility map, so
    that counting a group's children is answered from the index alone."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduling_job")


def timed_passes(count: int, epoch: int) -> list[float]:
    from scheduling.leader.worker import run_pass

    took = []
    for _ in range(count):
        started = time.perf_counter()
        run_pass(epoch=epoch)
        took.append((time.perf_counter() - started) * 1000)
    return took


def main(argv=None) -> None:
    args = parse_args(argv)
    setup(args)
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduling.models import Job, SchedulerLease, Task

    SchedulerLease.objects.update_or_create(
        pk=1, defaults={"epoch": 1, "holder": "bench:1", "renewed_at": timezone.now()}
    )
    user = get_user_model().objects.get(username="victor")
    body = {
        "team": "research-vision",
        "command": ["true", "{index}"],
        "resources": {"gpu_count": 1, "gpu_type": "A100"},
    }
    parent, submit_ms = submit(user, {**body, "array": {"count": args.elements, "parallelism": args.parallelism}})
    children = Job.objects.filter(parent=parent).count()
    group_passes = timed_passes(args.passes, epoch=1)
    placed = Task.objects.filter(job__parent=parent, state="ASSIGNED").count()
    syncs = timed_syncs(parent.pk)
    vacuum_analyze()
    syncs_vacuumed = timed_syncs(parent.pk)

    Job.objects.filter(parent=parent).update(cancel_requested_at=timezone.now())  # out of the next snapshot
    Task.objects.filter(job__parent=parent, state="ASSIGNED").update(state="CANCELLED")  # their GPUs free again
    unlimited, _ = submit(user, {**body, "array": {"count": args.elements}})
    single_passes = timed_passes(args.passes, epoch=1)
    print(
        json.dumps(
            {
                "elements": args.elements,
                "children": children,
                "parallelism": args.parallelism,
                "array_submit_ms": round(submit_ms, 1),
                "placed": placed,
                "group_state_sync_ms_p50": round(statistics.median(syncs), 2),
                "group_state_sync_ms_p50_vacuumed": round(statistics.median(syncs_vacuumed), 2),
                "group_pass_ms_first": round(group_passes[0], 1),
                "group_pass_ms_p50_after": round(statistics.median(group_passes[1:]), 1),
                "unlimited_pass_ms_first": round(single_passes[0], 1),
                "unlimited_pass_ms_p50_after": round(statistics.median(single_passes[1:]), 1),
                "unlimited_placed": Task.objects.filter(job__parent=unlimited, state="ASSIGNED").count(),
            }
        )
    )


if __name__ == "__main__":
    main()
