"""How many agent heartbeats per second the web tier sustains on this machine.

    python bench/heartbeats.py [--nodes 2500] [--web 2] [--clients 4] [--seconds 15] [--rate 500]

Creates a scratch database and registers `--nodes` virtual nodes (each with its own token),
starts `--web` daphne processes on loopback, then `--clients` load processes send idle
heartbeats (the common case: most nodes report no change) over keep-alive connections,
round-robin over the nodes and the web processes: as fast as the web tier answers, or at a
fixed `--rate` per second (what the fleet would send: the planning figure is 2,500 machines
every 5 s = 500/s). Prints one JSON line: heartbeats per second, latency p50/p99, errors.
The load generator and the web tier share this machine's cores, so the line also gives the web
processes' own CPU per heartbeat (from /proc) and the cores 500/s would take at that cost.
"""

import argparse
import http.client
import json
import math
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chaos_services import free_port, port_open, wait_until  # noqa: E402
from bench.latency import recreate_database  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--web", type=int, default=2, help="daphne processes")
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections (threads) per client")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rate", type=float, default=0, help="heartbeats per second in all (0: as fast as possible)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_hb")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    return parser.parse_args(argv)


def register_nodes(count: int) -> list[tuple[str, str]]:
    """(name, token) for `count` nodes, registered through the same service the API uses."""
    from agents.services import do_register_node

    inventory = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 192, "memory_gb": 2048}
    return [(f"vn-{i:05d}", do_register_node(name=f"vn-{i:05d}", inventory=inventory)[1]) for i in range(count)]


def client(
    ports: list[int], nodes: list[tuple[str, str]], seconds: float, connections: int, rate: float, queue
) -> None:
    """`connections` threads, each with its own keep-alive connection and share of the nodes,
    sending heartbeats back to back or spaced to its share of `rate`. Latency counts from when
    a heartbeat was due, so a server that falls behind shows it. Reports (count, errors,
    latencies in ms) through `queue`."""
    results = []
    threads = [
        threading.Thread(
            target=connection_loop,
            args=(ports[i % len(ports)], nodes[i::connections], seconds, rate / connections, results),
        )
        for i in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put((sum(r[0] for r in results), sum(r[1] for r in results), [ms for r in results for ms in r[2]]))


def connection_loop(port: int, nodes: list[tuple[str, str]], seconds: float, rate: float, results: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies, errors, index = [], 0, 0
    body = json.dumps({"tasks": []}).encode()
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        due = start + index / rate if rate else time.monotonic()
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
        name, token = nodes[index % len(nodes)]
        index += 1
        began = time.perf_counter() - max(0.0, time.monotonic() - due)
        try:
            conn.request(
                "POST",
                f"/api/v1/agents/{name}/heartbeat",
                body,
                {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            response = conn.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
        latencies.append((time.perf_counter() - began) * 1000)
        errors += not ok
    results.append((len(latencies), errors, latencies))


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nearest_rank(values: list[float], percentile: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


def main(argv=None) -> None:
    args = parse_args(argv)
    env = {
        **os.environ,
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "SECURE_SSL_REDIRECT": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    }
    recreate_database(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    nodes = register_nodes(args.nodes)
    ports = [free_port() for _ in range(args.web)]
    web = [
        subprocess.Popen(
            [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port), "mlqueue.asgi:application"],
            cwd=ROOT,
            env=env,
        )
        for port in ports
    ]
    try:
        # Each daphne listens once it has loaded the application: a fixed wait was too short on
        # a loaded machine (every heartbeat an error, connection refused).
        for port in ports:
            wait_until(lambda port=port: port_open(port), timeout=60, what=f"the web process on port {port}")
        cpu_before = sum(cpu_seconds(proc.pid) for proc in web)
        queue = multiprocessing.Queue()
        share = [nodes[i :: args.clients] for i in range(args.clients)]
        per_client = args.rate / args.clients if args.rate else 0.0
        workers = [
            multiprocessing.Process(
                target=client, args=(ports, share[i], args.seconds, args.connections, per_client, queue)
            )
            for i in range(args.clients)
        ]
        for worker in workers:
            worker.start()
        results = [queue.get() for _ in workers]
        for worker in workers:
            worker.join()
        web_cpu = sum(cpu_seconds(proc.pid) for proc in web) - cpu_before
    finally:
        for proc in web:
            proc.terminate()
            proc.wait(timeout=10)
    latencies = [ms for _, _, batch in results for ms in batch]
    total = sum(count for count, _, _ in results)
    print(
        json.dumps(
            {
                "virtual_nodes": args.nodes,
                "web_processes": args.web,
                "clients": args.clients * args.connections,
                "target_rate": args.rate or None,
                "seconds": args.seconds,
                "heartbeats": total,
                "heartbeats_per_s": round(total / args.seconds, 1),
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(nearest_rank(latencies, 99), 1),
                "errors": sum(errors for _, errors, _ in results),
                # The web tier's own CPU per heartbeat, and the cores 500/s would take at that cost.
                "web_cpu_ms_per_heartbeat": round(web_cpu * 1000 / max(total, 1), 2),
                "web_cores_for_500_per_s": round(web_cpu / max(total, 1) * 500, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
