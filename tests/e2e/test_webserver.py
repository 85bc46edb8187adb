"""The web role's launcher (mlqueue/webserver.py): several daphne workers on one port, the
kernel spreading connections over them, a worker that dies started again, SIGTERM stopping them
all, and a worker that cannot start stopping the tier with its status."""

import http.client
import os
import signal
from pathlib import Path

import pytest

from tests.e2e.cluster import free_port
from tests.e2e.processes import Process, wait_for

pytestmark = pytest.mark.e2e


def status_of(port: int, path: str = "/healthz", conn: http.client.HTTPConnection | None = None) -> int:
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0


def workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(child) for child in children)


def established_on(pid: int, port: int) -> int:
    """How many of `pid`'s sockets are connections accepted on `port` (/proc/net/tcp)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":  # ESTABLISHED
            inodes.add(fields[9])
    mine = {
        link.readlink().name.removeprefix("socket:[").removesuffix("]")
        for link in Path(f"/proc/{pid}/fd").iterdir()
        if link.readlink().name.startswith("socket:")
    }
    return len(inodes & mine)


def test_two_workers_share_the_port_are_restarted_and_stop_together(tmp_path):
    port = free_port()
    argv = ["-m", "mlqueue.webserver", "--workers", "2", "-b", "127.0.0.1", "-p", str(port), "-v", "0"]
    web = Process(argv, tmp_path / "web.log", ALLOWED_HOSTS="127.0.0.1")
    try:
        wait_for(lambda: status_of(port) == 200, timeout=60, what=f"/healthz:\n{web.output()}")
        first, second = wait_for(lambda: len(workers_of(web.pid)) == 2 and workers_of(web.pid), timeout=30)
        # Sixteen keep-alive connections, each through Django once: both workers hold some.
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(16)]
        assert {status_of(port, "/api/v1/jobs", conn) for conn in conns} == {401}
        assert established_on(first, port) > 0 and established_on(second, port) > 0
        assert established_on(first, port) + established_on(second, port) == 16
        for conn in conns:
            conn.close()

        os.kill(first, signal.SIGKILL)
        replaced = wait_for(lambda: first not in workers_of(web.pid) and len(workers_of(web.pid)) == 2, timeout=30)
        assert replaced and second in workers_of(web.pid)
        wait_for(lambda: all(status_of(port) == 200 for _ in range(8)), timeout=60, what="both workers serving")
        assert "exited with status -9; starting it again" in web.output()

        web.signal(signal.SIGTERM)
        assert web.proc.wait(timeout=40) == 0
        assert not Path(f"/proc/{second}").exists() or "zombie" in Path(f"/proc/{second}/status").read_text()
    finally:
        web.stop()


def test_a_worker_that_cannot_start_stops_the_tier_with_its_status(tmp_path):
    argv = ["-m", "mlqueue.webserver", "--workers", "2", "-b", "127.0.0.1", "-p", str(free_port()), "--no-such-option"]
    web = Process(argv, tmp_path / "web.log")
    try:
        assert web.proc.wait(timeout=60) == 2  # daphne's own usage error
        assert "at its start; stopping the web tier" in web.output()
    finally:
        web.stop()
