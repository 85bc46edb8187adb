"""How fast the nodes console renders a 2,500-machine fleet, server side.

    python bench/nodes_page.py [--nodes 2500] [--database-url postgres://.../mlqueue_bench_nodes]

Creates a scratch database with the demo and a fleet grown to `--nodes` machines (the planning
figure: a fifth of them 8-GPU hosts of mixed types, the rest CPU machines, 2 zones, 32 racks),
most READY, some cordoned, draining, suspect or lost, and a running 8-GPU task on every other
GPU host. Then renders, as the site admin, the whole page, the live fragment it re-fetches
every 5 s, a rack-filtered page, a node's page, and a bulk drain of one rack. Prints one JSON
line with the median milliseconds of each over several renders (target: the page <= 300 ms).
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.queue_page import render_ms, seeded_scratch_django  # noqa: E402

GPU_TYPES = ("H100", "A100", "L40S")
RACKS_PER_ZONE = 16
# Every 50th node is in some state other than READY, in turn.
OTHER_STATES = (("CORDONED", "READY", "CORDONED"), ("DRAINING", "READY", "DRAINING"), ("SUSPECT", "SUSPECT", ""))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--renders", type=int, default=7)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_nodes")
    return parser.parse_args(argv)


def populate(total: int) -> int:
    """Grow the demo fleet to `total` nodes and put a running task on every other GPU host;
    returns how many tasks run."""
    from django.utils import timezone

    from scheduling.models import Node

    now, existing = timezone.now(), Node.objects.count()
    Node.objects.update(state="READY", health="READY", first_heartbeat_at=now)
    nodes = [_node(i, total, now) for i in range(existing, total)]
    Node.objects.bulk_create(nodes, batch_size=1000)
    return _running_tasks(now)


def _node(i: int, total: int, now):
    from scheduling.models import Node

    zone, rack = 1 + i % 2, 1 + (i // 2) % RACKS_PER_ZONE
    gpu_type = GPU_TYPES[i % 3] if i < total // 5 else ""
    state, health, admin = ("READY", "READY", "")
    if i % 50 == 0:
        state, health, admin = OTHER_STATES[(i // 50) % len(OTHER_STATES)]
    if i % 250 == 0:
        state, health, admin = ("LOST", "LOST", "")
    return Node(
        name=f"z{zone}-r{rack}-{gpu_type.lower() or 'cpu'}-{i:04d}",
        zone=f"z{zone}",
        rack=f"z{zone}-r{rack}",
        gpu_type=gpu_type,
        gpu_count=8 if gpu_type else 0,
        cpu_count=192 if gpu_type else 96,
        memory_gb=1024,
        labels={"ib": "ndr400"} if gpu_type == "H100" else {},
        state=state,
        health=health,
        admin_state=admin,
        admin_reason="bench" if admin else "",
        state_reason="bench" if state != "READY" else "",
        first_heartbeat_at=now,
    )


def _running_tasks(now) -> int:
    """One running 8-GPU job on every other READY GPU host (in bulk: submitting is not measured)."""
    from django.contrib.auth import get_user_model

    from scheduling.models import Job, Node, Task
    from teams.models import Team

    team, owner = Team.objects.get(name="research-vision"), get_user_model().objects.get(username="victor")
    hosts = list(Node.objects.filter(state="READY").exclude(gpu_type="").order_by("id")[::2])
    jobs = Job.objects.bulk_create(
        [
            Job(team=team, owner=owner, name=f"run-{n.name}", command=["true"], spec={}, spec_digest=n.name,
                state="RUNNING", gpu_type=n.gpu_type, gpu_count=8, gpus_per_task=8, submitted_at=now)
            for n in hosts
        ],
        batch_size=1000,
    )  # fmt: skip
    Task.objects.bulk_create(
        [
            Task(job=job, rank=0, state="RUNNING", node=n, gpu_indices=list(range(8)), started_at=now)
            for job, n in zip(jobs, hosts, strict=True)
        ],
        batch_size=1000,
    )
    return len(jobs)


def bulk_drain_ms(client, rack: str) -> tuple[float, int]:
    from scheduling.models import Node

    count = Node.objects.filter(rack=rack).count()
    started = time.perf_counter()
    response = client.post("/nodes/", {"action": "drain", "reason": "bench", "racks": [rack]})
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 302, response.status_code
    return round(elapsed, 1), count


def main(argv=None) -> None:
    args = parse_args(argv)
    seeded_scratch_django(args.database_url)
    from django.test import Client

    from scheduling.models import Node

    running = populate(args.nodes)
    client = Client()
    client.login(username="ops", password="demo")
    some_node = Node.objects.exclude(gpu_type="").order_by("-id").values_list("name", flat=True).first()
    page = client.get("/nodes/")
    figures = {
        "nodes": Node.objects.count(),
        "running_tasks": running,
        "page_kb": round(len(page.content) / 1024),
        "page_ms": render_ms(client, "/nodes/", args.renders),
        "heatmap_fragment_ms": render_ms(client, "/nodes/?part=heatmap", args.renders),
        "rack_filtered_ms": render_ms(client, "/nodes/?rack=z1-r3", args.renders),
        "state_filtered_ms": render_ms(client, "/nodes/?state=READY&gpu_type=H100", args.renders),
        "node_page_ms": render_ms(client, f"/nodes/{some_node}/", args.renders),
    }
    figures["bulk_drain_rack_ms"], figures["bulk_drain_rack_nodes"] = bulk_drain_ms(client, "z2-r5")
    figures["target_page_ms"] = 300
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
