"""Settings for the test suite (and the processes the end-to-end tests start): real Postgres
and Redis by default, as `make test` runs it. Kept out of the shipped `mlqueue` package.

The database and the Redis database come from DATABASE_URL and REDIS_URL (the defaults below
otherwise), and everything the suite starts uses those too, so two suites can share a machine:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mlqueue_b REDIS_URL=redis://127.0.0.1:6379/12 pytest

(pytest-django creates test_mlqueue_b; the benchmarks' scratch databases are named after it,
and their Redis databases are MLQ_TEST_LATENCY_REDIS_URL and MLQ_TEST_HEARTBEATS_REDIS_URL.)

Under pytest-xdist (`-n 3`, as `make test` runs it) each worker has its own test database
(test_mlqueue_b_gw0, ...) and its own Redis database: MLQ_TEST_REDIS_DBS lists them (e.g. "12,8,7"
for gw0, gw1, gw2); unset, gw0 keeps REDIS_URL's and the others take 1, 2, ... A second suite on
the machine sets its own list."""

import os
from urllib.parse import urlsplit

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mlqueue")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")


def worker_redis_dbs(own: str, listed: str) -> list[str]:
    """The Redis databases of the xdist workers gw0, gw1, ...: MLQ_TEST_REDIS_DBS's list when set,
    else REDIS_URL's own for gw0 and 1, 2, 3, ... (skipping it) for the others."""
    return [db.strip() for db in listed.split(",") if db.strip()] or [
        own,
        *(str(n) for n in range(1, 16) if str(n) != own),
    ]


def worker_redis_url(url: str, worker: str, listed: str) -> str:
    """`url` on the Redis database of xdist worker `worker` ("gw2"). Each worker has a test
    database of its own (pytest-django names it test_<name>_gw<N>) and needs a Redis database of
    its own too: liveness's heartbeat set, the cache's counters and the channel layer's queues are
    one per Redis database, and every worker's nodes have the same names."""
    parts = urlsplit(url)
    dbs = worker_redis_dbs(parts.path.lstrip("/") or "0", listed)
    index = int(worker.removeprefix("gw"))
    if index >= len(dbs):
        raise ValueError(f"MLQ_TEST_REDIS_DBS={listed!r} names {len(dbs)} Redis databases, too few for xdist {worker}")
    return parts._replace(path=f"/{dbs[index]}").geturl()


# In the environment, so that every process the worker starts inherits its Redis database.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["REDIS_URL"] = worker_redis_url(
        os.environ["REDIS_URL"], os.environ["PYTEST_XDIST_WORKER"], os.environ.get("MLQ_TEST_REDIS_DBS", "")
    )
# The test process opens and drops its database: pooled sessions would keep it busy. (The
# processes the end-to-end tests start use the pool, as production does.)
os.environ.setdefault("MLQ_DB_POOL", "0")
# Production settings refuse to start without a key when DEBUG is off; the processes the
# end-to-end tests start inherit this one (tests/e2e/processes.py passes it on).
os.environ.setdefault("SECRET_KEY", "mlqueue-test-suite-only-key-7f3c9a1e5b2d4f60a8c6e1d3b5f7a9c2e4d6f8a0")

from mlqueue.settings import *  # noqa: E402,F403

# The test client speaks plain HTTP; the production redirect is checked by `check --deploy`.
SECURE_SSL_REDIRECT = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
