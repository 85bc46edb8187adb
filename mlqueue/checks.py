"""mlqueue's own `manage.py check --deploy` warnings, beside Django's (security.W0xx) and the
secret_env keys' (scheduling/secrets.py: mlqueue.E001, mlqueue.W001):

- mlqueue.W002: MLQ_BASE_URL points at this machine's loopback (its default is
  http://127.0.0.1:8000): every link in a notification (notifications/services.py) would lead
  nowhere for the people who get it.
- mlqueue.W003: the bootstrap join token MLQ_AGENT_JOIN_TOKEN is short. It registers nodes for
  as long as it is set, is never listed and cannot be revoked (agents/tokens.py
  check_join_token), so it must at least not be guessable.
- mlqueue.E002, mlqueue.E003: DATABASE_URL, REDIS_URL unset. The server then runs embedded
  (mlqueue/settings.py): a SQLite file, or an in-memory channel layer, a file cache and Celery
  run eagerly in each process; it starts (the demo and the tests rely on it) but is no
  production deployment. (A malformed URL stops the server at start: mlqueue/env_settings.py.)

All only with DEBUG off: a development machine runs on loopback with the demo's token."""

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

MIN_JOIN_TOKEN_LENGTH = 32

BASE_URL_LOOPBACK = (
    "MLQ_BASE_URL is {url!r}: the links in notifications (emails, webhooks) point at this machine's "
    "loopback, which nobody who reads them can reach."
)
BASE_URL_HINT = "Set MLQ_BASE_URL to the address people open the web UI at, e.g. https://mlqueue.example.com."
SHORT_JOIN_TOKEN = (
    "MLQ_AGENT_JOIN_TOKEN is {length} characters long: this bootstrap join token registers nodes for as long as it "
    "is set, is never listed and cannot be revoked, so a short one can be guessed."
)
JOIN_TOKEN_HINT = (
    "Prefer `manage.py create_join_token` tokens (bounded in time and uses, revocable) and unset "
    f"MLQ_AGENT_JOIN_TOKEN; if you keep it, make it at least {MIN_JOIN_TOKEN_LENGTH} random characters: "
    "python3 -c 'import secrets; print(secrets.token_urlsafe(40))'."
)

EMBEDDED_DATABASE = (
    "DATABASE_URL is not set: the server runs on a SQLite file in MLQ_VAR_DIR, embedded mode for a single "
    "machine's demo, not a deployment (every process would need that one file)."
)
DATABASE_HINT = (
    "Set DATABASE_URL to the PostgreSQL database, e.g. postgres://mlqueue:PASSWORD@db.internal:5432/mlqueue."
)
EMBEDDED_REDIS = (
    "REDIS_URL is not set: the server runs embedded, with an in-memory channel layer (no live views or agent "
    "sockets across processes), a file cache and Celery tasks run eagerly in the web process."
)
REDIS_HINT = "Set REDIS_URL to the Redis server, e.g. redis://redis.internal:6379/0 (rediss:// with TLS)."


def is_loopback_url(url: str) -> bool:
    """Whether the URL's host is localhost or a loopback address (the default's 127.0.0.1)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@checks.register(checks.Tags.security, deploy=True)
def check_base_url(app_configs=None, **kwargs):
    if settings.DEBUG or not is_loopback_url(settings.MLQ_BASE_URL):
        return []
    message = BASE_URL_LOOPBACK.format(url=settings.MLQ_BASE_URL)
    return [checks.Warning(message, hint=BASE_URL_HINT, id="mlqueue.W002")]


@checks.register(checks.Tags.security, deploy=True)
def check_join_token_length(app_configs=None, **kwargs):
    token = settings.MLQ_AGENT_JOIN_TOKEN
    if settings.DEBUG or not token or len(token) >= MIN_JOIN_TOKEN_LENGTH:
        return []
    return [checks.Warning(SHORT_JOIN_TOKEN.format(length=len(token)), hint=JOIN_TOKEN_HINT, id="mlqueue.W003")]


@checks.register(checks.Tags.database, deploy=True)
def check_embedded_stores(app_configs=None, **kwargs):
    """No DATABASE_URL or no REDIS_URL with DEBUG off: embedded mode, which starts, but is no deployment."""
    if settings.DEBUG:
        return []
    found = []
    if not settings.DATABASE_URL:
        found.append(checks.Error(EMBEDDED_DATABASE, hint=DATABASE_HINT, id="mlqueue.E002"))
    if not settings.REDIS_URL:
        found.append(checks.Error(EMBEDDED_REDIS, hint=REDIS_HINT, id="mlqueue.E003"))
    return found
