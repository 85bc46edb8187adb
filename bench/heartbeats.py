"""How many agent heartbeats per second the web tier sustains on this machine.

    python bench/heartbeats.py [--transport http|ws] [--nodes 2500] [--web 2] [--clients 2]
                               [--seconds 15] [--rate 500] [--batch-max N] [--open-spread S]
                               [--warmup S]

Creates a scratch database and registers `--nodes` virtual nodes (each with its own token),
starts `--web` daphne processes on loopback, then `--clients` load processes send idle
heartbeats (the common case: most nodes report no change), each node with its own token:
- `--transport http`: POST /api/v1/agents/NAME/heartbeat over keep-alive connections;
- `--transport ws`: every node holds its own agent WebSocket (/ws/agents/NAME/), as agents do,
  and sends its heartbeats on it (`--batch-max 1` turns the server's batching off). The sockets
  open first, as after a restart of the web tier: each at a random moment within
  `--open-spread` seconds (the agents' reconnect jitter; 0: all at once), trying again after a
  refusal with the agents' own backoff; the line gives that phase on its own.
`--connections` senders per load process each take their share of the nodes in turn: as fast
as the web tier answers, or at a fixed `--rate` per second in all (what the fleet would send:
the planning figure is 2,500 machines every 5 s = 500/s). Latency counts from when a heartbeat
was due, so a server that falls behind shows it.

Prints one JSON line: heartbeats per second, latency p50/p99 over the whole run, p99 in the
steady phase (after `--warmup` seconds, by default the time every node takes to send its first
heartbeat) and in each second of the run, errors. Latency includes how late the load process
itself woke a sender (`load_generator_late_p99_ms`): the load generator and the web tier share
this machine's cores, so the line gives the CPU of each while the load ran (from /proc and the
load processes' own clocks): the web processes' CPU per heartbeat, the cores 500/s would take at
that cost, and the cores each side kept busy. Over sockets it adds the web processes' own view
(their Prometheus histograms, agents/batches.py): batch sizes, how long a batch's oldest
heartbeat waited, a batch's own work in its thread, and how late their event loops ran.
"""

import argparse
import asyncio
import collections
import http.client
import json
import math
import multiprocessing
import os
import random
import re
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

from agents.node.heartbeat_socket import OPEN_TIMEOUT_S, RECONNECT_S, reconnect_delay  # noqa: E402
from bench.chaos_services import free_port, port_open, wait_until  # noqa: E402
from bench.latency import recreate_database  # noqa: E402
from mlqueue.gc_tuning import tune_for_server  # noqa: E402

BACKLOG = 1024  # as mlqueue.webserver listens (Twisted's default, 50, drops a burst of connects)
LAG_TICK_S = 0.01  # how often a load process checks how late its own event loop runs


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
    parser.add_argument(
        "--open-spread",
        type=float,
        default=RECONNECT_S,
        help="ws: seconds over which the sockets open, each at a random moment (0: all at once)",
    )
    parser.add_argument(
        "--warmup", type=float, help="seconds left out of the steady phase (default: one heartbeat from every node)"
    )
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_hb")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args(argv)
    if args.connections is None:
        args.connections = 8 if args.transport == "http" else math.ceil(args.nodes / args.clients)
    if args.warmup is None:
        args.warmup = args.nodes / args.rate if args.rate else 0.0
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
    open_spread: float = 0.0

    def phase(self, sender: int) -> float:
        """Where in its period sender `sender` starts (0-1): every sender of every process at its
        own moment, as agents that joined at different times."""
        return (sender * self.clients + self.index) / (self.connections * self.clients)


@dataclass
class Sent:
    """What a sender saw: per heartbeat (when it was due, its latency in ms, how late the sender
    woke for it in ms), and how many failed."""

    beats: list[tuple[float, float, float]] = field(default_factory=list)
    errors: int = 0

    def note(self, due: float, owed: float, began: float, ok: bool) -> None:
        self.beats.append((due, owed + (time.perf_counter() - began) * 1000, owed))
        self.errors += not ok


def client(load: Load, ready, go, queue) -> None:
    """One load process: its senders, started together once every process is `ready` and the
    parent says `go`. Reports (errors, beats, its own CPU seconds meanwhile, its event loop's
    lateness in ms) before it closes its sockets, which is no heartbeat's cost."""

    def report(sent: list[Sent], cpu: float, lags: list[float]) -> None:
        queue.put((sum(s.errors for s in sent), [b for s in sent for b in s.beats], cpu, lags))

    tune_for_server()  # as the web processes do: the collector's pauses are no heartbeat's cost
    if load.transport == "http":
        run_http(load, ready, go, report)
    else:
        asyncio.run(ws_load(load, ready, go, report))


def due_at(start: float, index: int, rate: float, phase: float) -> float:
    """When the `index`th heartbeat of a sender sending `rate` per second from `phase` of its
    period is due (rate 0: now). A sender sends those due within the run, none after it (one
    more per sender, 2,500 over a run, overstated the rate)."""
    return start + (index + phase) / rate if rate else time.monotonic()


def owed_ms(due: float) -> float:
    """The latency a sender that is behind already owes its next heartbeat."""
    return max(0.0, time.monotonic() - due) * 1000


def run_http(load: Load, ready, go, report) -> None:
    sent = [Sent() for _ in range(load.connections)]
    threads = [threading.Thread(target=http_sender, args=(load, i, go, sent[i])) for i in range(load.connections)]
    for thread in threads:
        thread.start()
    ready.put({})
    go.wait()
    cpu = time.process_time()
    for thread in threads:
        thread.join()
    report(sent, time.process_time() - cpu, [])


def http_sender(load: Load, i: int, go, sent: Sent) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", load.ports[i % len(load.ports)], timeout=10)
    nodes, rate = load.nodes[i :: load.connections], load.rate / load.connections
    body = json.dumps({"tasks": []}).encode()
    go.wait()
    start = time.monotonic()
    while (due := due_at(start, len(sent.beats), rate, load.phase(i))) < start + load.seconds:
        time.sleep(max(0.0, due - time.monotonic()))
        owed = owed_ms(due)
        name, token = nodes[len(sent.beats) % len(nodes)]
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
        sent.note(due, owed, began, ok)


async def ws_load(load: Load, ready, go, report) -> None:
    """Every node's socket opened (and greeted) first, then the senders take turns over them."""
    cpu = time.process_time()
    opened = Opened()
    began = time.monotonic()
    sockets = await asyncio.gather(*(open_socket(load, i, *node, opened) for i, node in enumerate(load.nodes)))
    ready.put(opened.summary(time.monotonic() - began, time.process_time() - cpu))
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    sent = [Sent() for _ in range(load.connections)]
    lags: list[float] = []
    watch = asyncio.create_task(loop_lag(lags))
    cpu = time.process_time()
    await asyncio.gather(
        *(ws_sender(load, i, sockets[i :: load.connections], sent[i]) for i in range(load.connections))
    )
    cpu = time.process_time() - cpu
    watch.cancel()
    report(sent, cpu, lags)
    await asyncio.gather(*(socket.close() for socket in sockets if socket is not None))


@dataclass
class Opened:
    """What opening the sockets took: each handshake's time to the server's hello (ms, the
    successful attempt's), and the attempts the server refused or that failed."""

    handshakes: list[float] = field(default_factory=list)
    refused: int = 0
    failed: int = 0  # sockets never opened: their nodes send no heartbeat in this run

    def summary(self, seconds: float, cpu: float) -> dict:
        return {
            "handshakes": self.handshakes,
            "refused": self.refused,
            "failed": self.failed,
            "seconds": seconds,
            "cpu": cpu,
        }


async def open_socket(load: Load, i: int, name: str, token: str, opened: Opened):
    """Node `name`'s socket, opened at a random moment within the spread and, as an agent does,
    again after a pause when a handshake fails (agents.node.heartbeat_socket); None after
    OPEN_ATTEMPTS failures (an agent would heartbeat over HTTP meanwhile)."""
    from websockets.asyncio.client import connect

    url = f"ws://127.0.0.1:{load.ports[i % len(load.ports)]}/ws/agents/{name}/"
    await asyncio.sleep(random.uniform(0, load.open_spread))
    for failures in range(1, OPEN_ATTEMPTS + 1):
        began = time.monotonic()
        try:
            socket = await connect(  # no keepalive pings: an agent's heartbeats are its keepalive
                url,
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=OPEN_TIMEOUT_S,
                ping_interval=None,
            )
            hello = json.loads(await asyncio.wait_for(socket.recv(), 30))
        except (OSError, TimeoutError, websockets.WebSocketException):
            opened.refused += 1
            if failures < OPEN_ATTEMPTS:
                await asyncio.sleep(reconnect_delay(failures))
            continue
        assert hello == {"hello": {"heartbeats": True}}, hello
        opened.handshakes.append((time.monotonic() - began) * 1000)
        return socket
    opened.failed += 1
    return None


async def loop_lag(lags: list[float]) -> None:
    """How late (ms) the load process's own event loop wakes a task due every LAG_TICK_S: the
    share of the latencies that is the load generator's, not the server's."""
    while True:
        began = time.monotonic()
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, time.monotonic() - began - LAG_TICK_S) * 1000)


async def ws_sender(load: Load, i: int, sockets: list, sent: Sent) -> None:
    sockets = [socket for socket in sockets if socket is not None]
    if not sockets:
        return
    rate = load.rate / load.connections
    start = time.monotonic()
    while (due := due_at(start, len(sent.beats), rate, load.phase(i))) < start + load.seconds:
        index = len(sent.beats)
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
        sent.note(due, owed, began, ok)


async def ws_reply(socket, index: int) -> dict:
    """The reply to heartbeat `index`, past any late reply to an earlier one that timed out."""
    while True:
        reply = json.loads(await socket.recv())
        if reply.get("id") == index:
            return reply


# The web processes' own view of socket heartbeats (agents/batches.py).
HISTOGRAMS = {
    "batch": "mlqueue_heartbeat_batch_size",
    "batch_wait": "mlqueue_heartbeat_batch_wait_seconds",
    "batch_work": "mlqueue_heartbeat_batch_seconds",
    "web_loop_lag": "mlqueue_event_loop_lag_seconds",
}
SAMPLE = re.compile(r"^(\w+?)(_bucket|_sum|_count)(?:\{(.*)\})?$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(ports: list[int]) -> collections.Counter:
    """Every sample of HISTOGRAMS the web processes have so far, summed over them (each process
    serves its own /metrics here), by (name, kind of work or "", suffix, bucket bound or None)."""
    found: collections.Counter = collections.Counter()
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            for line in response.read().decode().splitlines():
                key, _, value = line.rpartition(" ")
                if (match := SAMPLE.match(key)) and match.group(1) in HISTOGRAMS.values():
                    labels = dict(LABEL.findall(match.group(3) or ""))
                    le = float(labels["le"]) if "le" in labels else None
                    found[match.group(1), labels.get("work", ""), match.group(2), le] += float(value)
    return found


def histogram_figures(samples: collections.Counter, work: str, prefix: str = "") -> dict:
    """The mean of each histogram between two scrapes, for one kind of work, and its p99 as the
    bound of the bucket that holds it (batch: requests; the others in ms)."""
    figures = {}
    for label, name in HISTOGRAMS.items():
        kind = "" if label == "web_loop_lag" else work
        count, total = samples[name, kind, "_count", None], samples[name, kind, "_sum", None]
        buckets = sorted((le, n) for (h, k, end, le), n in samples.items() if (h, k, end) == (name, kind, "_bucket"))
        p99 = next((le for le, n in buckets if n >= 0.99 * count), None) if count else None
        scale, unit = (1, "") if label == "batch" else (1000, "_ms")
        mean = "mean_batch" if label == "batch" else f"{label}_mean{unit}"  # mean_batch: as in older lines
        figures[f"{prefix}{mean}"] = round(total / count * scale, 1) if count else None
        figures[f"{prefix}{label}_p99_le{unit}"] = (
            "+Inf" if p99 == math.inf else None if p99 is None else round(p99 * scale, 1)
        )
    return figures


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids) -> dict[int, float]:
    """cpu_seconds of each of `pids` still running: one that has exited since it was listed (a
    pooled database connection closed, a worker restarted) is left out, not an error."""
    found = {}
    for pid in pids:
        try:
            found[pid] = cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def nearest_rank(values: list[float], percentile: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percentile / 100 * len(ordered))) - 1]


def main(argv=None) -> None:
    args = parse_args(argv)
    env = web_environment(args)
    recreate_database(args.database_url)
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    nodes = register_nodes(args.nodes)
    ports = [free_port() for _ in range(args.web)]
    web = [start_web(port, env) for port in ports]
    try:
        # Each daphne listens once it has loaded the application: a fixed wait was too short on
        # a loaded machine (every heartbeat an error, connection refused).
        for port in ports:
            wait_until(lambda port=port: port_open(port), timeout=60, what=f"the web process on port {port}")
        results, opened, web_cpu, web_cpu_opening, served_before, served = run_loads(args, nodes, ports, web)
    finally:
        for proc in web:
            proc.terminate()
        for proc in web:
            try:
                proc.wait(timeout=60)  # it closes 1,250 sockets first
            except subprocess.TimeoutExpired:
                proc.kill()
    sockets = args.transport == "ws"
    figures = {
        "transport": args.transport,
        "virtual_nodes": args.nodes,
        "web_processes": args.web,
        "clients": args.clients * args.connections,
        "target_rate": args.rate or None,
        "seconds": args.seconds,
        **heartbeat_figures(args, results, web_cpu),
        **(opening_figures(opened, web_cpu_opening) if sockets else {}),
        **(histogram_figures(served_before, "sockets", prefix="open_") if sockets else {}),
        **(histogram_figures(served, "heartbeats") if sockets else {}),
    }
    print(json.dumps(figures))


def web_environment(args: argparse.Namespace) -> dict[str, str]:
    return {
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


def start_web(port: int, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "daphne", "-v", "0"),
            *("-e", f"tcp:port={port}:interface=127.0.0.1:backlog={BACKLOG}"),
            "mlqueue.asgi:application",
        ],
        cwd=ROOT,
        env=env,
    )


def run_loads(args: argparse.Namespace, nodes: list, ports: list[int], web: list[subprocess.Popen]) -> tuple:
    """Open every socket, then send heartbeats from every load process at once. Returns their
    results, what opening reported, the web processes' CPU seconds heartbeating and opening,
    and the web processes' histograms after opening and over the heartbeats."""
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
            open_spread=args.open_spread,
        )
        for i in range(args.clients)
    ]
    # Daemons: if this process fails, they end with it instead of keeping it waiting at exit.
    workers = [multiprocessing.Process(target=client, args=(load, ready, go, queue), daemon=True) for load in loads]
    cpu_before = sum(cpu_seconds(proc.pid) for proc in web)
    for worker in workers:
        worker.start()
    # every socket open: their handshakes are not the heartbeats' cost, and have a line of their own
    opened = [ready.get(timeout=600) for _ in workers]
    web_cpu_opening = sum(cpu_seconds(proc.pid) for proc in web) - cpu_before
    served_before = scrape(ports) if args.transport == "ws" else collections.Counter()
    cpu_before = sum(cpu_seconds(proc.pid) for proc in web)
    go.set()
    results = [queue.get() for _ in workers]
    web_cpu = sum(cpu_seconds(proc.pid) for proc in web) - cpu_before
    served = scrape(ports) if args.transport == "ws" else collections.Counter()
    served.subtract(served_before)
    for worker in workers:
        worker.join()
    return results, opened, web_cpu, web_cpu_opening, served_before, served


def heartbeat_figures(args: argparse.Namespace, results: list, web_cpu: float) -> dict:
    """The heartbeat phase: the whole run, its steady part (after the warmup) and each second."""
    beats = [beat for _, batch, _, _ in results for beat in batch]
    start = min(due for due, _, _ in beats)
    latencies = [ms for _, ms, _ in beats]
    steady = [ms for due, ms, _ in beats if due - start >= args.warmup]
    by_second: dict[int, list[float]] = collections.defaultdict(list)
    for due, ms, _ in beats:
        by_second[int(due - start)].append(ms)
    total = len(beats)
    load_cpu = sum(cpu for _, _, cpu, _ in results)
    lags = [lag for _, _, _, batch in results for lag in batch]
    return {
        "heartbeats": total,
        "heartbeats_per_s": round(total / args.seconds, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(nearest_rank(latencies, 99), 1),
        "warmup_s": round(args.warmup, 2),
        "warmup_heartbeats": total - len(steady),
        "steady_heartbeats": len(steady),
        "steady_p50_ms": round(statistics.median(steady), 1) if steady else None,
        "steady_p99_ms": round(nearest_rank(steady, 99), 1) if steady else None,
        # p99 of the heartbeats due in each second of the run, in order.
        "p99_ms_by_second": [round(nearest_rank(by_second[s], 99)) for s in sorted(by_second)],
        "errors": sum(errors for errors, _, _, _ in results),
        # The web tier's own CPU per heartbeat, and the cores 500/s would take at that cost.
        "web_cpu_ms_per_heartbeat": round(web_cpu * 1000 / max(total, 1), 2),
        "web_cores_for_500_per_s": round(web_cpu / max(total, 1) * 500, 2),
        # The cores each side kept busy while the load ran (this machine has os.cpu_count()).
        "web_cores": round(web_cpu / args.seconds, 2),
        "load_generator_cores": round(load_cpu / args.seconds, 2),
        "load_generator_cpu_ms_per_heartbeat": round(load_cpu * 1000 / max(total, 1), 2),
        # How late the load processes woke their senders (part of every latency above), and
        # their event loops in general (ws).
        "load_generator_late_p99_ms": round(nearest_rank([owed for _, _, owed in beats], 99), 1),
        "load_generator_loop_lag_p99_ms": round(nearest_rank(lags, 99), 1) if lags else None,
        "machine_cores": os.cpu_count(),
        "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0]),
    }


def opening_figures(opened: list[dict], web_cpu: float) -> dict:
    """The sockets' opening phase (before any heartbeat): how long until all were greeted, each
    handshake's time, the attempts refused, and the web tier's CPU per socket."""
    handshakes = [ms for each in opened for ms in each["handshakes"]]
    return {
        "open_s": round(max(each["seconds"] for each in opened), 1),
        "open_sockets": len(handshakes),
        "open_refused": sum(each["refused"] for each in opened),
        "open_failed": sum(each["failed"] for each in opened),
        "open_handshake_p50_ms": round(statistics.median(handshakes), 1),
        "open_handshake_p99_ms": round(nearest_rank(handshakes, 99), 1),
        "open_web_cpu_ms_per_socket": round(web_cpu * 1000 / max(len(handshakes), 1), 2),
        "open_load_generator_cpu_s": round(sum(each["cpu"] for each in opened), 1),
    }


if __name__ == "__main__":
    main()
