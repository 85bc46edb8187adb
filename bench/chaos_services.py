"""The fault campaign's own Postgres and Redis, on free ports of this machine, which it may stop,
kill and restart without touching anyone else's; and `Child`, a process in a process group of
its own that a fault can signal and the campaign can start again with the same command.

Postgres refuses to run as root, and CI runs as root: there initdb and pg_ctl run as the
`postgres` user, on a data directory it owns; elsewhere they run as the caller."""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",  # a scratch database
    "max_connections": "200",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(predicate, *, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


class Child:
    """One process of the campaign, its output appended to `log_path` across restarts."""

    def __init__(self, name: str, argv: list[str], *, log_path: Path, env: dict):
        self.name, self.argv, self.log_path, self.env = name, argv, log_path, env
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> "Child":
        with open(self.log_path, "a") as log:
            log.write(f"--- {self.name} start {self.starts + 1} at {time.time():.3f}\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """To this process alone: SIGSTOP must freeze the agent, not the tasks it runs."""
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL to the whole group, woken first in case a fault had stopped it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
        self.proc.wait(timeout=30)

    def restart(self) -> "Child":
        self.kill()
        return self.start()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


class Redis:
    """redis-server on a free port, with no persistence: a restart loses every key."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(workdir),
        ]
        self.child = Child("redis", argv, log_path=workdir / "redis.log", env=dict(os.environ))

    def start(self) -> None:
        self.child.start()
        wait_until(lambda: port_open(self.port), timeout=15, what="Redis")

    def kill(self) -> None:
        self.child.kill()


def postgres_bin() -> Path:
    """The newest installed server's binaries (Debian's layout), else pg_ctl on PATH."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if versions:
        return versions[-1]
    found = shutil.which("pg_ctl")
    if found is None:
        raise SystemExit("chaos: no Postgres server binaries (initdb, pg_ctl) found")
    return Path(found).parent


class Postgres:
    """A cluster of its own in `workdir/postgres`, started and stopped with pg_ctl."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.dir = workdir / "postgres"
        self.data = self.dir / "data"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/mlqueue"
        self.as_postgres = os.geteuid() == 0

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(postgres_bin() / program), *args]
        if self.as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def init(self) -> None:
        self.dir.mkdir()
        if self.as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        settings = {**PG_SETTINGS, "port": str(self.port), "unix_socket_directories": f"'{self.dir}'"}
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "postgres.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def restart(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "postgres.log"),
            "-w",
            "-t",
            "60",
            "-m",
            "fast",
            "restart",
        )

    def create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE mlqueue")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-w", "-m", "immediate", "stop", check=False)
