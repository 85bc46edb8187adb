"""What the web tier spends on requests that do next to nothing: the floor under a submit.

    python bench/web_floor.py [--requests 2000] [--clients 16] [--load-processes 2] [--web 2]

Starts the web tier as bench/submit.py does (a scratch database with the demo teams and fleet,
`deploy/entrypoint.sh web` on loopback with `--web` daphne workers), then sends, one kind after
another, `--requests` requests over `--clients` keep-alive connections spread over
`--load-processes` processes:

- `healthz`: GET /healthz, answered by an ASGI layer in front of Django (mlqueue/health.py): what
  daphne alone costs a request, its HTTP parsing, its event loop and the answer;
- `api_404`: GET of an unknown /api/ path, answered by a middleware before sessions,
  authentication, URL routing or any view (the least a request through daphne and Django costs);
- `job_read`: an authenticated GET /api/v1/jobs/{id} of one job (DRF: the bearer token, the
  caller's teams, the job with its tasks);
- `submit`: POST /api/v1/jobs, each a distinct one-GPU job (bench/submit.py's spec).

Prints one JSON line with, per kind, requests/s, p50 ms and the web processes', Postgres's and
the load generator's CPU per request (from /proc, as bench/submit.py). On two cores a kind can
reach at most 2,000 / (its CPU per request in all, ms) requests/s: issue 19's 500 single
submits a second need 4 ms in all.
"""

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import submit  # noqa: E402
from bench.chaos_services import free_port  # noqa: E402

KINDS = ("healthz", "api_404", "job_read", "submit")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests of each kind")
    parser.add_argument("--clients", type=int, default=16, help="keep-alive connections in all")
    parser.add_argument("--load-processes", type=int, default=2)
    parser.add_argument("--web", type=int, default=2, help="web worker processes (MLQ_WEB_WORKERS)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_floor")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args(argv)
    if args.requests < args.clients or args.clients < 1 or args.load_processes < 1 or args.web < 1:
        parser.error("--clients, --load-processes and --web must be at least 1, --requests at least --clients")
    return args


def request_of(kind: str, n: int, job_id: int) -> tuple[str, str, str | None]:
    if kind == "healthz":
        return "GET", "/healthz", None
    if kind == "api_404":
        return "GET", "/api/v1/no-such-path", None
    if kind == "job_read":
        return "GET", f"/api/v1/jobs/{job_id}", None
    return "POST", "/api/v1/jobs", json.dumps({**submit.SPEC, "client_job_id": f"floor-{n}"})


def load_process(port: int, token: str, kind: str, numbers: list[list[int]], job_id: int, queue) -> None:
    """One thread per connection, each sending its requests back to back; reports (statuses,
    ms of each request, this process's CPU seconds)."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    results: list[tuple[int, float]] = []
    began_cpu = time.process_time()

    def run(mine: list[int]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for n in mine:
            method, path, body = request_of(kind, n, job_id)
            began = time.perf_counter()
            conn.request(method, path, body, headers)
            response = conn.getresponse()
            response.read()
            results.append((response.status, (time.perf_counter() - began) * 1000))

    threads = [threading.Thread(target=run, args=(mine,)) for mine in numbers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put((results, time.process_time() - began_cpu))


def measure(args, port: int, token: str, kind: str, job_id: int) -> dict:
    """One kind's figures: requests/s, p50, CPU per request of web, Postgres and load."""
    connections = [list(range(c, args.requests, args.clients)) for c in range(args.clients)]
    shares = [connections[p :: args.load_processes] for p in range(args.load_processes)]
    queue = multiprocessing.Queue()
    workers = [
        multiprocessing.Process(target=load_process, args=(port, token, kind, share, job_id, queue), daemon=True)
        for share in shares
    ]
    cpu_before, began = submit.cpu_now(), time.perf_counter()
    for worker in workers:
        worker.start()
    reports = [queue.get(timeout=600) for _ in workers]
    seconds, cpu = time.perf_counter() - began, submit.cpu_delta(cpu_before)
    for worker in workers:
        worker.join()
    statuses = [status for results, _ in reports for status, _ in results]
    per = 1000 / len(statuses)
    return {
        "per_s": round(len(statuses) / seconds, 1),
        "p50_ms": round(statistics.median(ms for results, _ in reports for _, ms in results), 1),
        "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
        "web_cpu_ms": round(cpu["web"] * per, 2),
        "postgres_cpu_ms": round(cpu["postgres"] * per, 2),
        # The load processes' own start (spawning a process) is in their CPU: a small overcount.
        "load_cpu_ms": round(sum(cpu for _, cpu in reports) * per, 2),
    }


def warm_up(port: int, token: str) -> int:
    """Every worker answered a submit (each connection lands on one of the workers' sockets);
    returns the id of the last job submitted, the one `job_read` reads."""
    job_id = None
    for n in range(32):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        spec = {**submit.SPEC, "client_job_id": f"warmup-{n}"}
        conn.request(
            "POST",
            "/api/v1/jobs",
            json.dumps(spec),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        job_id = json.loads(response.read())["id"]
        conn.close()
    return job_id


def main(argv=None) -> None:
    args = parse_args(argv)
    env = submit.server_env(args)
    token = submit.setup(env)
    port = free_port()
    web = submit.start_web(env, port)
    try:
        job_id = warm_up(port, token)
        submit.WATCHED["web"] = submit.process_tree(web.pid)
        figures = {kind: measure(args, port, token, kind, job_id) for kind in KINDS}
    finally:
        submit.stop_web(web)
    print(json.dumps({"requests": args.requests, "clients": args.clients, "web_workers": args.web, **figures}))


if __name__ == "__main__":
    main()
