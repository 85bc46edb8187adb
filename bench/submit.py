"""Sustained submits per second through the real web tier, and idempotency under that load.

    python bench/submit.py [--jobs 2000] [--clients 16] [--load-processes 2] [--web 2]
                           [--resubmits 200] [--races 100] [--batch N]
                           [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_bench_submits]
                           [--redis-url redis://127.0.0.1:6379/15]

Creates a scratch database, migrates it, seeds the demo teams and fleet and issues alice an API
token. Starts the web tier the way production does (`deploy/entrypoint.sh web`, on loopback,
with `--web` worker processes: MLQ_WEB_WORKERS), then `--clients` keep-alive connections,
spread over `--load-processes` processes, POST `--jobs` distinct one-GPU jobs to /api/v1/jobs,
each with its own client_job_id, back to back. Then the idempotency check, all at once on every
connection: `--resubmits` of those client_job_ids sent again twice each (each answer must be
200 with the first job's id), and `--races` new client_job_ids each sent by two connections at
the same moment (one 201, one 200, the same id). Finally it counts the rows: exactly one job,
one task and one SUBMITTED event per distinct client_job_id.

Prints one JSON line: submits/s, p50/p99 ms, errors, what the idempotency check found, and CPU
per submit from /proc of the web processes, of this database's Postgres backends and of the
load generator, with how busy the machine's cores were meanwhile (others' work included).

Single submits go through the submit lane (mlqueue/submit_lane.py), which writes those that
reach a web process together as one group; `MLQ_SUBMIT_LANE=0 python bench/submit.py` measures
Django's own path instead, on the same code.

`--batch N`: every phase posts batches of N specs to /api/v1/jobs/batch instead (the timed
jobs dealt to the connections N at a time; the resubmits and races too, so racing copies of an
id travel in two batches at once). The figures are then per job (jobs/s, CPU per job), p50/p99
per request, `errors` counts jobs not answered 201, and `requests` says how many were sent.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.chaos_services import free_port, port_open, wait_until  # noqa: E402
from bench.heartbeats import cpu_of, nearest_rank  # noqa: E402
from bench.latency import manage, recreate_database  # noqa: E402

TEAM = "research-foundation-models"
SPEC = {"name": "bench-submit", "team": TEAM, "command": ["true"], "resources": {"gpu_count": 1, "gpu_type": "H100"}}
WARMUP_PER_CONNECTION = 2
BARRIER_TIMEOUT_S = 600


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16, help="keep-alive connections in all")
    parser.add_argument("--load-processes", type=int, default=2, help="processes the connections are spread over")
    parser.add_argument("--web", type=int, default=2, help="web worker processes (MLQ_WEB_WORKERS)")
    parser.add_argument("--resubmits", type=int, default=200, help="submitted client_job_ids sent again, twice each")
    parser.add_argument("--races", type=int, default=100, help="new client_job_ids sent by two connections at once")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_bench_submits")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--batch", type=int, default=0, metavar="N", help="post N specs a request to /jobs/batch")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.clients < 2 or args.load_processes < 1 or args.web < 1:
        parser.error("--jobs, --load-processes and --web must be at least 1, --clients at least 2")
    if args.resubmits > args.jobs:
        parser.error("--resubmits cannot exceed --jobs")
    if not 0 <= args.batch <= 1000:
        parser.error("--batch must be between 1 and 1000 (0: single submits)")
    return args


def server_env(args) -> dict:
    return {
        **os.environ,
        # The entrypoint runs `daphne` and `python` from PATH, as in the image.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DATABASE_URL": args.database_url,
        "REDIS_URL": args.redis_url,
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        "DEBUG": "0",
        "SECURE_SSL_REDIRECT": "0",
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        # One user submits everything here; the per-user limit (120/minute) is a policy, not a cost.
        "MLQ_SUBMIT_RATE": "100000/minute",
        "MLQ_WEB_WORKERS": str(args.web),
    }


def setup(env: dict) -> str:
    """A fresh database with the demo teams and fleet; returns a new API token of alice's."""
    recreate_database(env["DATABASE_URL"])
    manage("migrate", "--verbosity", "0", env=env)
    manage("seed_demo", "--force", env=env)
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from teams.services import do_create_token

    return do_create_token(user=get_user_model().objects.get(username="alice"), name="bench-submit")[1]


# --- the load: each connection a thread with its own keep-alive HTTP connection


class Connection:
    def __init__(self, port: int, token: str, timeout: float = 30):
        self.port = port
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def submit(self, client_job_id: str) -> tuple[int, int | None, float]:
        """(status, job id, ms) of one submit; status 0 when the connection failed."""
        began = time.perf_counter()
        try:
            self.conn.request(
                "POST", "/api/v1/jobs", json.dumps({**SPEC, "client_job_id": client_job_id}), self.headers
            )
            response = self.conn.getresponse()
            body = response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            self.conn.close()
            return 0, None, (time.perf_counter() - began) * 1000
        job_id = json.loads(body).get("id") if status in (200, 201) else None
        return status, job_id, (time.perf_counter() - began) * 1000

    def submit_batch(self, client_job_ids: list[str]) -> tuple[list[tuple[str, int, int | None]], float]:
        """((client_job_id, status, job id) of each spec, ms) of one batch; a refused or failed
        request gives each spec its status (0: the connection failed) and no job."""
        began = time.perf_counter()
        specs = [{**SPEC, "client_job_id": cid} for cid in client_job_ids]
        try:
            self.conn.request("POST", "/api/v1/jobs/batch", json.dumps({"jobs": specs}), self.headers)
            response = self.conn.getresponse()
            body = response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            self.conn.close()
            status, body = 0, b""
        ms = (time.perf_counter() - began) * 1000
        if status not in (200, 201):
            return [(cid, status, None) for cid in client_job_ids], ms
        return [(row["client_job_id"], row["status"], row["id"]) for row in json.loads(body)["jobs"]], ms

    def send(self, client_job_ids: list[str], batch: int) -> tuple[list[tuple], list[float]]:
        """(client_job_id, status, job id, ms) of each spec and ms of each request, one after another."""
        if not batch:
            answers = [(cid, *self.submit(cid)) for cid in client_job_ids]
            return answers, [ms for *_, ms in answers]
        answers, requests = [], []
        for start in range(0, len(client_job_ids), batch):
            replies, ms = self.submit_batch(client_job_ids[start : start + batch])
            answers += [(*reply, ms) for reply in replies]
            requests.append(ms)
        return answers, requests


def load_process(port: int, token: str, plans: list[dict], queue) -> None:
    """One thread per plan (a connection). Each sends its warm-up submits, waits until every
    connection of every process has, sends its timed submits back to back, waits again, then
    sends its share of the idempotency check. Reports per connection (answers, CPU seconds)."""
    answers = [None] * len(plans)

    def run(index: int, plan: dict) -> None:
        # A batch waits its turn behind the others' (seconds each with 1,000 specs): no timeout
        # shorter than a whole run's barrier.
        batch = plan["batch"]
        conn = Connection(port, token, timeout=BARRIER_TIMEOUT_S if batch else 30)
        conn.send(plan["warmup"], batch)
        # With a timeout: a connection must not outlive a run whose main process gave up.
        plan["barrier"].wait(timeout=BARRIER_TIMEOUT_S)
        timed, requests = [], []
        for ids in plan["timed"]:  # one batch each (one id each without --batch)
            replies, ms = conn.send(ids, batch)
            timed += replies
            requests += ms
        plan["barrier"].wait(timeout=BARRIER_TIMEOUT_S)
        again, _ = conn.send(plan["again"], batch)
        answers[index] = {"timed": timed, "again": again, "requests": requests}

    threads = [threading.Thread(target=run, args=(i, plan)) for i, plan in enumerate(plans)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put((answers, time.process_time()))


def plan_connections(args) -> list[dict]:
    """What each connection sends. Timed ids are dealt round-robin; each resubmitted and each
    raced id goes to two different connections, so its two copies travel at the same time."""
    rng = random.Random(19)
    timed = [f"bench-{n}" for n in range(args.jobs)]
    again = [cid for cid in rng.sample(timed, args.resubmits) for _ in range(2)]
    again += [f"race-{n}" for n in range(args.races) for _ in range(2)]
    size = args.batch or 1
    batches = [timed[start : start + size] for start in range(0, len(timed), size)]
    plans = [
        {
            "warmup": [f"warmup-{c}-{n}" for n in range(WARMUP_PER_CONNECTION)],
            "timed": batches[c :: args.clients],
            "batch": args.batch,
        }
        for c in range(args.clients)
    ]
    for c, plan in enumerate(plans):
        plan["again"] = again[c :: args.clients]  # neighbours in `again` land on neighbouring connections
    return plans


def run_load(args, port: int, token: str, web_pid: int) -> tuple[list[dict], float, float, dict]:
    """(each connection's answers, seconds of the timed phase, the load generator's CPU s, the
    CPU the web tier and Postgres spent in the timed phase)."""
    plans = plan_connections(args)
    barrier = multiprocessing.Barrier(args.clients + 1)
    for plan in plans:
        plan["barrier"] = barrier
    queue = multiprocessing.Queue()
    shares = [plans[p :: args.load_processes] for p in range(args.load_processes)]
    # Daemons: if this process fails, they end with it instead of keeping it waiting at exit.
    workers = [
        multiprocessing.Process(target=load_process, args=(port, token, share, queue), daemon=True) for share in shares
    ]
    for worker in workers:
        worker.start()
    barrier.wait(timeout=BARRIER_TIMEOUT_S)  # every warm-up sent: every web worker is up
    WATCHED["web"] = process_tree(web_pid)
    began, web_cpu_before = time.perf_counter(), cpu_now()
    barrier.wait(timeout=BARRIER_TIMEOUT_S)  # every timed submit answered
    seconds, web_cpu = time.perf_counter() - began, cpu_delta(web_cpu_before)
    reports = [queue.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    return [a for answers, _ in reports for a in answers], seconds, sum(cpu for _, cpu in reports), web_cpu


# --- CPU from /proc


WATCHED: dict[str, list[int]] = {"web": []}  # the web tier's processes, found once it is warm


def process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def database_backends() -> list[int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def cpu_now() -> dict:
    """CPU seconds of each web process and of each of this database's backends, and the
    machine's jiffies."""
    return {"web": cpu_of(WATCHED["web"]), "postgres": cpu_of(database_backends()), "machine": busy_jiffies()}


def cpu_delta(before: dict) -> dict:
    """The CPU spent since `before`. A process that started meanwhile (a backend connecting)
    counts from zero; one that ended meanwhile (a pooled connection closed) is not counted: what
    it spent is gone from /proc with it, so the figure can only be low, never a failed run."""
    after = cpu_now()
    spent = {
        kind: sum(cpu - before[kind].get(pid, 0.0) for pid, cpu in after[kind].items()) for kind in ("web", "postgres")
    }
    busy, total = (a - b for a, b in zip(after["machine"], before["machine"], strict=True))
    return {**spent, "machine_busy": busy / max(total, 1)}


# --- the web tier and the verdict


def start_web(env: dict, port: int) -> subprocess.Popen:
    web = subprocess.Popen(
        [str(ROOT / "deploy" / "entrypoint.sh"), "web"],
        cwd=ROOT,
        env={**env, "BIND_ADDRESS": "127.0.0.1", "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(lambda: port_open(port), timeout=120, what=f"the web tier on port {port}")
    return web


def stop_web(web: subprocess.Popen) -> None:
    os.killpg(web.pid, signal.SIGTERM)
    try:
        web.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(web.pid, signal.SIGKILL)
        web.wait(timeout=10)


def idempotency(args, answers: list[dict]) -> dict:
    """What the second submits of each client_job_id answered, and the rows there are."""
    from scheduling.models import Job, Task
    from teams.models import AuditEvent, EventKind

    first = {cid: job_id for a in answers for cid, status, job_id, _ in a["timed"] if status == 201}
    seen: dict[str, list[tuple[int, int | None]]] = {}
    for a in answers:
        for cid, status, job_id, _ in a["again"]:
            seen.setdefault(cid, []).append((status, job_id))
    wrong = 0
    for cid, replies in seen.items():
        if cid in first:  # a resubmit: both 200 with the first job's id
            wrong += sum(status != 200 or job_id != first[cid] for status, job_id in replies)
        else:  # a race: one created it, the other got the same job back
            statuses = sorted(status for status, _ in replies)
            wrong += statuses != [200, 201] or len({job_id for _, job_id in replies}) != 1
    distinct = args.clients * WARMUP_PER_CONNECTION + args.jobs + args.races
    jobs = Job.objects.filter(team__name=TEAM).count()
    tasks = Task.objects.filter(job__team__name=TEAM).count()
    events = AuditEvent.objects.filter(kind=EventKind.SUBMITTED, job__team__name=TEAM).count()
    return {
        "resubmits": args.resubmits * 2,
        "races": args.races,
        "idempotency_wrong_answers": wrong,
        "distinct_client_job_ids": distinct,
        "job_rows": jobs,
        "task_rows": tasks,
        "submitted_events": events,
        "extra_rows": (jobs - distinct) + (tasks - distinct) + (events - distinct),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if shutil.which("daphne", path=server_env(args)["PATH"]) is None:
        raise SystemExit("bench/submit.py: daphne is not installed in this Python environment")
    env = server_env(args)
    token = setup(env)
    port = free_port()
    web = start_web(env, port)
    try:
        answers, seconds, load_cpu, cpu = run_load(args, port, token, web.pid)
    finally:
        stop_web(web)
    timed = [status for a in answers for _, status, _, _ in a["timed"]]
    latencies = [ms for a in answers for ms in a["requests"]]
    per_job = 1000 / len(timed)
    unit = "job" if args.batch else "submit"  # without --batch, the names of the earlier rounds' lines
    figures = {
        "jobs": len(timed),
        **({"batch": args.batch, "requests": len(latencies)} if args.batch else {}),
        "clients": args.clients,
        "web_processes": len(WATCHED["web"]),  # the launcher (when MLQ_WEB_WORKERS applies) and its workers
        "web_workers": args.web,
        "seconds": round(seconds, 2),
        f"{unit}s_per_s": round(len(timed) / seconds, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(nearest_rank(latencies, 99), 1),
        "errors": sum(status != 201 for status in timed),
        f"web_cpu_ms_per_{unit}": round(cpu["web"] * per_job, 2),
        f"postgres_cpu_ms_per_{unit}": round(cpu["postgres"] * per_job, 2),
        # The load generator's share: its CPU (warm-up and idempotency check included) per timed job.
        f"load_cpu_ms_per_{unit}": round(load_cpu * per_job, 2),
        "machine_cores": os.cpu_count(),
        "machine_busy_share": round(cpu["machine_busy"], 2),
    }
    figures.update(idempotency(args, answers))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
