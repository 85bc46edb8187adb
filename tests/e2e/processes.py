"""Helpers for tests that run real mlqueue processes against the test database."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def scratch_database_url(suffix: str) -> str:
    """A database for a process that drops and creates its own (a benchmark): on the suite's
    server, named after the suite's DATABASE_URL ("mlqueue" -> "mlqueue_<suffix>"), so two
    suites given different DATABASE_URLs never share one."""
    url = urlsplit(settings.DATABASE_URL)
    return url._replace(path=f"{url.path}_{suffix}").geturl()


def process_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    # The test settings: production's, but with the test run's fast password hasher, so the
    # demo users the tests create can log in to these processes. `tests` imports because each
    # process runs `manage.py` or `-m module` from ROOT, which puts ROOT first on sys.path.
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        PYTHONUNBUFFERED="1",
        DEBUG="0",
        MLQ_DB_POOL="1",
        MLQ_SERVE_STATIC="1",
        SECRET_KEY=settings.SECRET_KEY,
    )  # DEBUG off refuses to start without one
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Process:
    """A child process whose output goes to a file the test can read while it runs."""

    def __init__(self, args: list[str], log_path: Path, **env):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=process_env(**env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text()

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.log.close()


def scheduler(tmp_path: Path, name: str, *args: str, **env) -> Process:
    return Process(["manage.py", "run_scheduler", *args], tmp_path / f"{name}.log", **env)


def wait_for(predicate, *, timeout: float, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
