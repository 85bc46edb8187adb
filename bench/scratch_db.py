"""A benchmark's scratch database: dropped if it exists, then created as a copy of a template
that already holds every migration, so that the bench's own `migrate` has nothing left to do.

Migrating an empty database takes 7-8 s of CPU here (more on a loaded machine); copying the
template (`CREATE DATABASE ... TEMPLATE`) takes a tenth of a second. The template's name carries
a digest of every migration file, so a changed or added migration makes a new template (and
drops the old ones). Its first user builds it under a Postgres advisory lock: the suite's
workers, running benches side by side, build it once and copy it in turn.
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import psycopg

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_PREFIX = "mlq_bench_template_"
LOCK_KEY = 0x6D6C71  # "mlq": one lock for building and copying templates


def migrations_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def recreate_database(url: str, *, migrated: bool = True) -> None:
    """An empty database at `url` (`migrated=False`), or a copy of the migrated template."""
    name = urlparse(url).path.lstrip("/")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not migrated:
            conn.execute(f'CREATE DATABASE "{name}"')
            return
        conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
        try:
            template = TEMPLATE_PREFIX + migrations_digest()
            if not _exists(conn, template):
                _build(conn, url.rsplit("/", 1)[0], template)
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))


def _exists(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def _build(conn, server: str, template: str) -> None:
    """Migrate a new database and only then give it the template's name: a build that fails
    half-way leaves no template behind."""
    building = template + "_building"
    for (old,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (TEMPLATE_PREFIX + "%",)):
        conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{building}"')
    env = {
        **os.environ,
        "DATABASE_URL": f"{server}/{building}",
        "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-template",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')
