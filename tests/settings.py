"""Settings for the test suite (and the processes the end-to-end tests start): real Postgres
and Redis by default, as `make test` runs it. Kept out of the shipped `mlqueue` package.

The database and the Redis database come from DATABASE_URL and REDIS_URL (the defaults below
otherwise), and everything the suite starts uses those too, so two suites can share a machine:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/mlqueue_b REDIS_URL=redis://127.0.0.1:6379/12 pytest

(pytest-django creates test_mlqueue_b; the benchmarks' scratch databases are named after it,
and their Redis databases are MLQ_TEST_LATENCY_REDIS_URL and MLQ_TEST_HEARTBEATS_REDIS_URL.)"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mlqueue")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
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
