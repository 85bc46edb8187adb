import logging
import signal
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db.backends.signals import connection_created
from prometheus_client import start_http_server

from scheduling.leader.leadership import leadership_for_this_database
from scheduling.leader.worker import SchedulerWorker

IDLE_IN_TRANSACTION_TIMEOUT = "5s"


def limit_idle_transactions(sender, connection, **kwargs):
    """A scheduler paused inside a fenced transaction would keep the lease row locked and stall
    the next leader's epoch bump; Postgres ends such a session after a few idle seconds."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT}'")


def serve_metrics(port: int, address: str) -> None:
    """This process's metrics registry over HTTP, on a thread of prometheus_client's own."""
    if not (1 <= port <= 65535):
        raise CommandError("--metrics-port must be a port number, 1 to 65535")
    try:
        start_http_server(port, addr=address)
    except (OSError, ValueError) as error:  # in use, not an address of this machine
        raise CommandError(f"--metrics-port: cannot listen on {address}:{port}: {error}") from error


class Command(BaseCommand):
    help = "Run the scheduler: any number may run, exactly one leads (the others stand by)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="lead, run one pass, step down and exit")
        parser.add_argument("--tick", type=float, default=1.0, help="seconds between passes when nothing happens")
        parser.add_argument("--lease", type=float, default=10.0, help="lease duration in seconds")
        parser.add_argument("--renew", type=float, default=2.0, help="renew the lease every this many seconds")
        parser.add_argument(
            "--health-file",
            type=Path,
            help="touch this file on every loop, leading or standing by, for a liveness probe to read its age",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve this process's own counters and histograms (pass times, placements, preemptions, "
            "queue waits) at http://ADDRESS:PORT/metrics: for a scheduler whose PROMETHEUS_MULTIPROC_DIR "
            "no web process on its machine reads (a container, a machine of its own)",
        )
        parser.add_argument("--metrics-address", default="127.0.0.1", help="the address --metrics-port listens on")

    def handle(self, *args, once, tick, lease, renew, health_file, metrics_port, metrics_address, **options):
        if not (0 < tick <= 1.0):
            raise CommandError("--tick must be more than 0 and at most 1 second")
        if not (0 < renew < lease * 0.7):
            raise CommandError("--renew must be positive and well under --lease (at most 70% of it)")
        if metrics_port is not None:
            serve_metrics(metrics_port, metrics_address)
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )
        connection_created.connect(limit_idle_transactions)
        leadership = leadership_for_this_database(lease_s=lease, renew_s=renew, renew_deadline_s=lease * 0.7)
        worker = SchedulerWorker(leadership, tick_s=tick, health_file=health_file)
        signal.signal(signal.SIGTERM, worker.stop)
        signal.signal(signal.SIGINT, worker.stop)
        try:
            if once:
                self._once(worker, lease)
            else:
                worker.run()
        finally:
            leadership.step_down()

    def _once(self, worker: SchedulerWorker, lease: float) -> None:
        deadline = time.monotonic() + lease + 2
        while time.monotonic() < deadline:
            report = worker.run_once()
            if report is not None:
                self.stdout.write(
                    f"one pass as epoch {report.epoch}: {report.elapsed_ms:.0f} ms, {report.pending} "
                    f"pending, {report.placed} placed, {report.preempted} preempted"
                )
                return
            time.sleep(0.5)
        raise CommandError("another scheduler leads and its lease did not lapse; no pass was run")
