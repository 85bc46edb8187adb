"""The web application's own CPU per socket heartbeat, without the server or a load generator.

    python bench/heartbeat_app.py [--batch 20] [--waves 50] [--rounds 7]

bench/heartbeats.py measures the whole web tier under load, where the machine's other work
moves the figure by 10-20% from one run to the next, more than most changes to the heartbeat's
path (and its batches grow with the load, which cuts their cost per heartbeat). This drives the
ASGI application (routing, the agent socket's consumer, the batch with its thread hop, SQL and
Redis) in-process, as daphne would, over `--batch` sockets: in each wave every socket sends one
idle heartbeat, which makes one batch of `--batch`, and waits for its reply. Twisted and
autobahn (the frames, the TCP writes) are not in it.

Prints one JSON line: the process's CPU per heartbeat (the median over `--rounds` rounds of
`--waves` waves, after one round of warm-up), the event loop's thread's share of it, and each
round's figure.
"""

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.latency import recreate_database  # noqa: E402

REPLY_TIMEOUT_S = 30  # a reply that never comes fails the run instead of hanging it
INVENTORY = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 192, "memory_gb": 2048}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20, help="sockets, each sending one heartbeat a wave")
    parser.add_argument("--waves", type=int, default=50, help="waves a round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_hb_app")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    return parser.parse_args(argv)


def setup(args: argparse.Namespace) -> list[tuple[str, str]]:
    """A scratch database with `--batch` READY nodes; returns their (name, token)."""
    env = {
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    }
    recreate_database(args.database_url)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env={**os.environ, **env}, check=True
    )
    os.environ.update(env)
    import django

    django.setup()
    from agents.services import do_register_node
    from scheduling.nodes import note_alive

    registered = [do_register_node(name=f"app-{i:04d}", inventory=INVENTORY) for i in range(args.batch)]
    for node, _ in registered:
        note_alive(node)
    return [(node.name, token) for node, token in registered]


def scope(name: str, token: str) -> dict:
    path = f"/ws/agents/{name}/"
    return {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode()), (b"host", b"127.0.0.1")],
        "subprotocols": [],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


async def measure(args: argparse.Namespace, nodes: list[tuple[str, str]]) -> dict:
    """Open every socket, then run the rounds; each round's (process, event loop thread) CPU per
    heartbeat."""
    from mlqueue.asgi import application
    from mlqueue.gc_tuning import tune_for_server

    sockets = []
    for name, token in nodes:
        inbox, outbox = asyncio.Queue(), asyncio.Queue()
        app = asyncio.ensure_future(application(scope(name, token), inbox.get, outbox.put))
        inbox.put_nowait({"type": "websocket.connect"})
        sockets.append((inbox, outbox, app))
    for _, outbox, _ in sockets:
        accepted, hello = await reply_from(outbox), await reply_from(outbox)
        assert accepted["type"] == "websocket.accept" and json.loads(hello["text"]) == {"hello": {"heartbeats": True}}
    tune_for_server()  # as the web processes do
    rounds, sent = [], 0
    for _ in range(args.rounds + 1):
        began, began_loop = time.process_time(), time.thread_time()
        for _ in range(args.waves):
            sent += 1
            for inbox, _, _ in sockets:
                text = json.dumps({"type": "heartbeat", "id": sent, "body": {"tasks": []}})
                inbox.put_nowait({"type": "websocket.receive", "text": text})
            for _, outbox, _ in sockets:
                reply = json.loads((await reply_from(outbox))["text"])
                assert (reply["id"], reply["status"]) == (sent, 200), reply
        beats = args.waves * len(sockets)
        rounds.append(((time.process_time() - began) / beats, (time.thread_time() - began_loop) / beats))
    for inbox, _, _ in sockets:
        inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
    await asyncio.gather(*(app for _, _, app in sockets))
    return rounds[1:]  # the first warms up


async def reply_from(outbox: asyncio.Queue) -> dict:
    return await asyncio.wait_for(outbox.get(), REPLY_TIMEOUT_S)


def main(argv=None) -> None:
    args = parse_args(argv)
    rounds = asyncio.run(measure(args, setup(args)))
    figures = {
        "batch": args.batch,
        "heartbeats": args.batch * args.waves * args.rounds,
        "app_cpu_us_per_heartbeat": round(statistics.median(cpu for cpu, _ in rounds) * 1e6, 1),
        "event_loop_thread_cpu_us_per_heartbeat": round(statistics.median(loop for _, loop in rounds) * 1e6, 1),
        "rounds_us": [round(cpu * 1e6) for cpu, _ in rounds],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
