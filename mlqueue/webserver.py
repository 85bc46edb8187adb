"""The web tier's processes: several daphne workers serving one port.

    python -m mlqueue.webserver [--workers N] [--bind 0.0.0.0] [--port 8000] [daphne options ...]

One daphne process runs Django's synchronous code in one thread at a time, so it uses one core
whatever the machine has (bench/submit.py: 18 submits/s on two cores with one). This launcher
binds the port once per worker with SO_REUSEPORT and hands each worker its own socket
(`daphne --fd`): the kernel spreads new connections evenly over the sockets. One shared socket
would not do: a worker accepts every connection waiting at once, so a burst of keep-alive
clients would all land on whichever worker woke first.

Every worker runs the same application with the same options (any daphne option after this
launcher's own). Not daphne's --proxy-headers, which believes X-Forwarded-For from anyone: the
application takes it from trusted proxies only (mlqueue/proxies.py, MLQ_TRUSTED_PROXIES). A
worker that exits after it has served for a while, or that a signal killed, is started again on
the same socket; one that exits with an error status within STARTUP_S of its start stops the
tier with that status, as a single daphne would have failed: bad settings are for the operator
to see, not for a restart loop to hide. SIGTERM and SIGINT stop every
worker (daphne finishes what it serves), SIGKILL after STOP_TIMEOUT_S.

`--workers` defaults to MLQ_WEB_WORKERS, else to the CPUs this process may run on: its affinity,
bounded by its cgroup's CPU quota (a container's `--cpus`, a pod's CPU limit). Each worker
holds its own Postgres pool (MLQ_DB_POOL_MAX connections at most): count them against
Postgres's max_connections. The workers count their Prometheus counters in shared files
(scheduling/metrics.py), so /metrics sums them whichever worker serves the scrape: in
PROMETHEUS_MULTIPROC_DIR when it is set, else in a directory of their own, removed at exit.
"""

import argparse
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

STARTUP_S = 10.0
STOP_TIMEOUT_S = 30.0
RESTART_DELAY_S = 1.0
BACKLOG = 1024
APPLICATION = "mlqueue.asgi:application"


CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"


def cgroup_cpu_quota(v2_cpu_max: str = CGROUP_V2_CPU_MAX, v1_dir: str = CGROUP_V1_CPU) -> float | None:
    """The CPUs this process's cgroup may use (quota / period), or None with no quota."""
    try:
        quota, period = open(v2_cpu_max).read().split()[:2]  # "max 100000" or "200000 100000"
    except (OSError, ValueError):
        try:
            quota = open(os.path.join(v1_dir, "cpu.cfs_quota_us")).read().strip()  # -1: none
            period = open(os.path.join(v1_dir, "cpu.cfs_period_us")).read().strip()
        except OSError:
            return None
    if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or not period.isdigit() or int(period) <= 0:
        return None
    return int(quota) / int(period) if int(quota) > 0 else None


def usable_cpus(quota: float | None = None, affinity: int | None = None) -> int:
    affinity = len(os.sched_getaffinity(0)) if affinity is None else affinity
    quota = cgroup_cpu_quota() if quota is None else quota
    return max(1, min(affinity, math.ceil(quota))) if quota else affinity


BAD_WORKERS_ENV = "MLQ_WEB_WORKERS={raw!r} is not a whole number: set it to the daphne processes to run (at least 1)"
# daphne would rewrite the client's address from anyone's header before the application could
# tell a trusted proxy from a client that forged it (mlqueue/proxies.py).
NO_PROXY_HEADERS = (
    "{option}: not with mlqueue: daphne would believe X-Forwarded-For from any client; set "
    "MLQ_TRUSTED_PROXIES to the proxies in front instead (docs/deploy.md)"
)

# The port is taken (another server, an old web tier still stopping) or not this process's to
# take (below 1024, an address not on this machine): said in one line, not an OSError traceback.
CANNOT_LISTEN = (
    "cannot listen on {host}:{port}: {reason}; free the port or choose another with --port "
    "(-p; the image's web role passes PORT, BIND_ADDRESS for --bind)"
)


def default_workers(parser: argparse.ArgumentParser) -> int:
    """MLQ_WEB_WORKERS, else the CPUs this process may use; a usage error naming the variable
    when it is not a number."""
    raw = os.environ.get("MLQ_WEB_WORKERS", "").strip()
    if not raw:
        return usable_cpus()
    try:
        return int(raw)
    except ValueError:
        parser.error(BAD_WORKERS_ENV.format(raw=raw))


def parse_args(argv=None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = default_workers(parser)
    parser.add_argument("--workers", type=int, default=default, help="daphne processes (MLQ_WEB_WORKERS)")
    parser.add_argument("-b", "--bind", default="0.0.0.0")
    parser.add_argument("-p", "--port", type=int, default=8000)
    args, daphne_args = parser.parse_known_args(argv)
    if args.workers < 1:
        parser.error("--workers (MLQ_WEB_WORKERS) must be at least 1")
    for option in daphne_args:
        if option.startswith("--proxy"):
            parser.error(NO_PROXY_HEADERS.format(option=option.partition("=")[0]))
    return args, daphne_args


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets on the port, or exit 1 with CANNOT_LISTEN."""
    try:
        return [listening_socket(host, port) for _ in range(count)]
    except OSError as exc:
        say(CANNOT_LISTEN.format(host=host, port=port, reason=exc.strerror or exc))
        sys.exit(1)


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


class Worker:
    """One daphne process on its own socket; started again on the same socket when it exits."""

    def __init__(self, sock: socket.socket, daphne_args: list[str]):
        self.sock, self.daphne_args = sock, daphne_args
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> None:
        fd = self.sock.fileno()
        argv = [sys.executable, "-m", "daphne", "--fd", str(fd), *self.daphne_args, APPLICATION]
        self.proc = subprocess.Popen(argv, pass_fds=(fd,))
        self.started_at = time.monotonic()

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def failed_at_start(self) -> bool:
        """It exited by itself with an error soon after its start (bad settings, a port it
        cannot serve). Killed by a signal (an operator, the OOM killer) is not a failure of its
        own: it is started again, however soon after its start."""
        status = self.exited()
        return status is not None and status > 0 and time.monotonic() - self.started_at < STARTUP_S

    def stop(self) -> None:
        if self.exited() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stop(signum, frame):
    raise Stop


def say(message: str) -> None:
    print(f"mlqueue.webserver: {message}", file=sys.stderr, flush=True)


def supervise(workers: list[Worker]) -> int:
    """Keep every worker running until a signal (0) or a worker that fails at its start (its status)."""
    for worker in workers:
        worker.start()
    try:
        while True:
            for worker in workers:
                if worker.failed_at_start():
                    say(f"a worker exited with status {worker.exited()} at its start; stopping the web tier")
                    return worker.exited()
                if worker.exited() is not None:
                    say(f"worker pid {worker.proc.pid} exited with status {worker.exited()}; starting it again")
                    time.sleep(RESTART_DELAY_S)
                    worker.start()
            time.sleep(0.5)
    except Stop:
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for worker in workers:
            worker.stop()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in workers:
            worker.wait(deadline)


def main(argv=None) -> None:
    args, daphne_args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    sockets = listening_sockets(args.bind, args.port, args.workers)
    own_metrics_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        own_metrics_dir = tempfile.mkdtemp(prefix="mlqueue-web-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_metrics_dir  # the workers inherit it
    try:
        status = supervise([Worker(sock, daphne_args) for sock in sockets])
    finally:
        if own_metrics_dir is not None:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
