"""How many agent heartbeats per second the web tier sustains on this machine.

    python bench/heartbeats.py [--transport http|ws] [--nodes 2500] [--web 2] [--clients 2]
                               [--seconds 15] [--rate 500] [--batch-max N]

Creates a scratch database and registers `--nodes` virtual nodes (each with its own token),
starts `--web` daphne processes on loopback, then `--clients` load processes send idle
heartbeats (the common case: most nodes report no change), each node with its own token:
- `--transport http`: POST /api/v1/agents/NAME/heartbeat over keep-alive connections;
- `--transport ws`: every node holds its own agent WebSocket (/ws/agents/NAME/), as agents do,
  and sends its heartbeats on it (`--batch-max 1` turns the server's batching off).
`--connections` senders per load process each take their share of the nodes in turn: as fast
as the web tier answers, or at a fixed `--rate` per second in all (what the fleet would send:
the planning figure is 2,500 machines every 5 s = 500/s). Latency counts from when a heartbeat
was due, so a server that falls behind shows it.

Prints one JSON line: heartbeats per second, latency p50/p99, errors. The load generator and
the web tier share this machine's cores, so the line gives the CPU of each while the load ran
(from /proc and the load processes' own clocks): the web processes' CPU per heartbeat, the
cores 500/s would take at that cost, and the cores each side kept busy.
"""

import argparse
import asyncio
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
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import websockets

ROOT = Path(__file__).resolve().parent.parent
OPEN_ATTEMPTS = 5
sys.path.insert(0, str(ROOT))

from bench.chaos_services import free_port, port_open, wait_until  # noqa: E402
from bench.latency import recreate_database  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["http", "ws"], default="http")
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--web", type=int, default=2, help="daphne processes")
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    parser.add_argument(
        "--connections",
        type=int,
        help="senders per client, each over its own connection in turn (default: http 8; ws one per node, as agents)",
    )
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rate", type=float, default=0, help="heartbeats per second in all (0: as fast as possible)")
    parser.add_argument("--batch-max", type=int, help="the web's MLQ_HEARTBEAT_BATCH_MAX (ws; 1: no batching)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_hb")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args(argv)
    if args.connections is None:
        args.connections = 8 if args.transport == "http" else math.ceil(args.nodes / args.clients)
    return args


def register_nodes(count: int) -> list[tuple[str, str]]:
    """(name, token) for `count` nodes, registered through the same service the API uses, and
    READY as after their first heartbeat: a fleet's steady state, where a heartbeat writes
    nothing (a first one records the node READY, a write the run would otherwise count)."""
    from agents.services import do_register_node
    from scheduling.nodes import note_alive

    inventory = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 192, "memory_gb": 2048}
    registered = [do_register_node(name=f"vn-{i:05d}", inventory=inventory) for i in range(count)]
    for node, _ in registered:
        note_alive(node)
    return [(node.name, token) for node, token in registered]


@dataclass
class Load:
    """What one load process was asked to do."""

    transport: str
    ports: list[int]
    nodes: list[tuple[str, str]]
    seconds: float
    connections: int
    rate: float  # this process's share, per second; 0: as fast as answered
    index: int  # of `clients` load processes: the senders of all of them are spread over time
    clients: int

    def phase(self, sender: int) -> float:
        """Where in its period sender `sender` starts (0-1): every sender of every process at its
        own moment, as agents that joined at different times."""
        return (sender * self.clients + self.index) / (self.connections * self.clients)


@dataclass
class Sent:
    """What a sender saw: latencies in ms (one per heartbeat) and how many failed."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0


def client(load: Load, ready, go, queue) -> None:
    """One load process: its senders, started together once every process is `ready` and the
    parent says `go`. Reports (count, errors, latencies in ms, its own CPU seconds meanwhile)
    before it closes its sockets, which is no heartbeat's cost."""

    def report(sent: list[Sent], cpu: float) -> None:
        latencies = [ms for s in sent for ms in s.latencies]
        queue.put((len(latencies), sum(s.errors for s in sent), latencies, cpu))

    if load.transport == "http":
        run_http(load, ready, go, report)
    else:
        asyncio.run(ws_load(load, ready, go, report))


def due_at(start: float, index: int, rate: float, phase: float) -> float:
    """When the `index`th heartbeat of a sender sending `rate` per second from `phase` of its
    period is due (rate 0: now)."""
    return start + (index + phase) / rate if rate else time.monotonic()


def owed_ms(due: float) -> float:
    """The latency a sender that is behind already owes its next heartbeat."""
    return max(0.0, time.monotonic() - due) * 1000


def run_http(load: Load, ready, go, report) -> None:
    sent = [Sent() for _ in range(load.connections)]
    threads = [threading.Thread(target=http_sender, args=(load, i, go, sent[i])) for i in range(load.connections)]
    for thread in threads:
        thread.start()
    ready.put(True)
    go.wait()
    cpu = time.process_time()
    for thread in threads:
        thread.join()
    report(sent, time.process_time() - cpu)


def http_sender(load: Load, i: int, go, sent: Sent) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", load.ports[i % len(load.ports)], timeout=10)
    nodes, rate = load.nodes[i :: load.connections], load.rate / load.connections
    body = json.dumps({"tasks": []}).encode()
    go.wait()
    start = time.monotonic()
    while time.monotonic() < start + load.seconds:
        due = due_at(start, len(sent.latencies), rate, load.phase(i))
        time.sleep(max(0.0, due - time.monotonic()))
        owed = owed_ms(due)
        name, token = nodes[len(sent.latencies) % len(nodes)]
        began = time.perf_counter()
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
        sent.latencies.append(owed + (time.perf_counter() - began) * 1000)
        sent.errors += not ok


async def ws_load(load: Load, ready, go, report) -> None:
    """Every node's socket opened (and greeted) first, then the senders take turns over them."""
    from websockets.asyncio.client import connect

    opening = asyncio.Semaphore(8)  # not 1,250 handshakes at once on a loaded machine

    async def open_socket(i: int, name: str, token: str):
        url = f"ws://127.0.0.1:{load.ports[i % len(load.ports)]}/ws/agents/{name}/"
        for attempt in range(OPEN_ATTEMPTS):  # as an agent does, try again when a handshake fails
            try:
                async with opening:
                    socket = await connect(url, additional_headers={"Authorization": f"Bearer {token}"})
                    hello = json.loads(await asyncio.wait_for(socket.recv(), 30))
            except (OSError, TimeoutError, websockets.WebSocketException):
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(1)
                continue
            assert hello == {"hello": {"heartbeats": True}}, hello
            return socket

    sockets = await asyncio.gather(*(open_socket(i, *node) for i, node in enumerate(load.nodes)))
    ready.put(True)
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    sent = [Sent() for _ in range(load.connections)]
    cpu = time.process_time()
    await asyncio.gather(
        *(ws_sender(load, i, sockets[i :: load.connections], sent[i]) for i in range(load.connections))
    )
    report(sent, time.process_time() - cpu)
    await asyncio.gather(*(socket.close() for socket in sockets))


async def ws_sender(load: Load, i: int, sockets: list, sent: Sent) -> None:
    rate = load.rate / load.connections
    start = time.monotonic()
    while time.monotonic() < start + load.seconds:
        index = len(sent.latencies)
        due = due_at(start, index, rate, load.phase(i))
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        owed = owed_ms(due)
        socket = sockets[index % len(sockets)]
        began = time.perf_counter()
        try:
            await socket.send(json.dumps({"type": "heartbeat", "id": index, "body": {"tasks": []}}))
            reply = await asyncio.wait_for(ws_reply(socket, index), 10)
            ok = reply["status"] == 200
        except (OSError, TimeoutError, ValueError, websockets.ConnectionClosed):
            ok = False
        sent.latencies.append(owed + (time.perf_counter() - began) * 1000)
        sent.errors += not ok


async def ws_reply(socket, index: int) -> dict:
    """The reply to heartbeat `index`, past any late reply to an earlier one that timed out."""
    while True:
        reply = json.loads(await socket.recv())
        if reply.get("id") == index:
            return reply


def batches(ports: list[int]) -> tuple[float, float]:
    """(heartbeats, batches) the web processes have answered from sockets so far: their
    mlqueue_heartbeat_batch_size histograms (each process serves its own /metrics here)."""
    found = {"sum": 0.0, "count": 0.0}
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            for line in response.read().decode().splitlines():
                name, _, value = line.partition(" ")
                for kind in found:
                    if name == f"mlqueue_heartbeat_batch_size_{kind}":
                        found[kind] += float(value)
    return found["sum"], found["count"]


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
        **({"MLQ_HEARTBEAT_BATCH_MAX": str(args.batch_max)} if args.batch_max else {}),
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
        queue, ready, go = multiprocessing.Queue(), multiprocessing.Queue(), multiprocessing.Event()
        per_client = args.rate / args.clients if args.rate else 0.0
        loads = [
            Load(
                transport=args.transport,
                ports=ports,
                nodes=nodes[i :: args.clients],
                seconds=args.seconds,
                connections=args.connections,
                rate=per_client,
                index=i,
                clients=args.clients,
            )
            for i in range(args.clients)
        ]
        workers = [multiprocessing.Process(target=client, args=(load, ready, go, queue)) for load in loads]
        for worker in workers:
            worker.start()
        for _ in workers:
            ready.get(timeout=300)  # every socket open: their handshakes are not the heartbeats' cost
        batched_before = batches(ports)
        cpu_before = sum(cpu_seconds(proc.pid) for proc in web)
        go.set()
        results = [queue.get() for _ in workers]
        web_cpu = sum(cpu_seconds(proc.pid) for proc in web) - cpu_before
        batched = [after - before for after, before in zip(batches(ports), batched_before, strict=True)]
        for worker in workers:
            worker.join()
    finally:
        for proc in web:
            proc.terminate()
        for proc in web:
            try:
                proc.wait(timeout=60)  # it closes 1,250 sockets first
            except subprocess.TimeoutExpired:
                proc.kill()
    latencies = [ms for _, _, batch, _ in results for ms in batch]
    total = sum(count for count, _, _, _ in results)
    load_cpu = sum(cpu for _, _, _, cpu in results)
    print(
        json.dumps(
            {
                "transport": args.transport,
                "virtual_nodes": args.nodes,
                "web_processes": args.web,
                "clients": args.clients * args.connections,
                "target_rate": args.rate or None,
                "seconds": args.seconds,
                "heartbeats": total,
                "heartbeats_per_s": round(total / args.seconds, 1),
                "p50_ms": round(statistics.median(latencies), 1),
                "p99_ms": round(nearest_rank(latencies, 99), 1),
                "errors": sum(errors for _, errors, _, _ in results),
                # The web tier's own CPU per heartbeat, and the cores 500/s would take at that cost.
                "web_cpu_ms_per_heartbeat": round(web_cpu * 1000 / max(total, 1), 2),
                "web_cores_for_500_per_s": round(web_cpu / max(total, 1) * 500, 2),
                # The cores each side kept busy while the load ran (this machine has os.cpu_count()).
                "web_cores": round(web_cpu / args.seconds, 2),
                "load_generator_cores": round(load_cpu / args.seconds, 2),
                "load_generator_cpu_ms_per_heartbeat": round(load_cpu * 1000 / max(total, 1), 2),
                "machine_cores": os.cpu_count(),
                # Socket heartbeats per batch the web processes answered (agents/batches.py).
                "mean_batch": round(batched[0] / batched[1], 1) if batched[1] else None,
            }
        )
    )


if __name__ == "__main__":
    main()
