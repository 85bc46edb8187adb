"""Settings read from the environment as numbers in a range and as service URLs
(mlqueue/settings.py): each bad value stops the server with an ImproperlyConfigured naming the
variable, what it was set to and what it takes, not a bare ValueError at the first request."""

import os
from urllib.parse import urlsplit

import dj_database_url
import redis.connection
from django.core.exceptions import ImproperlyConfigured

from mlqueue.env_values import number_in

# Not unix://: the same URL is Celery's broker, and kombu has no such transport (a review: the
# server started, then every task publish failed).
REDIS_SCHEMES = ("redis", "rediss")
POSTGRES_ENGINE = "django.db.backends.postgresql"
# The leader calls a node SUSPECT after this many missed heartbeats (MLQ_SUSPECT_AFTER_S).
SUSPECT_AFTER_HEARTBEATS = 3

BAD_REDIS_URL = (
    "REDIS_URL is not a Redis URL ({why}): it must start with redis:// or rediss:// (Celery's broker reads it too), "
    "e.g. redis://redis.internal:6379/0 (unset: embedded mode, no Redis)"
)
BAD_DATABASE_URL = (
    "DATABASE_URL is not a PostgreSQL URL ({why}): use postgres://USER:PASSWORD@HOST:5432/NAME "
    "(postgresql:// too; unset: embedded mode, a SQLite file)"
)
NO_HEARTBEATS = "MLQ_HEARTBEAT_INTERVAL_S={interval:g} must be above 0: agents heartbeat this often"
LEASE_TOO_SHORT = (
    "MLQ_OUTAGE_BOUND_S={bound:g} must be above {times} x MLQ_HEARTBEAT_INTERVAL_S ({interval:g} s), i.e. above "
    "{least:g} s: it is the agents' lease, renewed by each heartbeat; a lease no longer than the {times} missed "
    "heartbeats after which the leader calls a node SUSPECT kills running tasks before the leader has noticed "
    "anything (and one of at most a heartbeat kills them while the control plane is up)"
)


def env_number(
    name: str,
    default: float,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    unit: str = "",
) -> float:
    """A finite number from the environment within the bounds given (`default` when unset)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default

    def fits(number: float) -> bool:
        low = (above is None or number > above) and (at_least is None or number >= at_least)
        return low and (at_most is None or number <= at_most)

    return number_in(name, raw, raw, _what(above, at_least, at_most, unit), fits)


def _what(above: float | None, at_least: float | None, at_most: float | None, unit: str) -> str:
    """ "a number of seconds > 0", "a number from 0 to 1", ..."""
    kind = f"a number of {unit}" if unit else "a number"
    if at_least is not None and at_most is not None:
        return f"{kind} from {at_least:g} to {at_most:g}"
    bounds = [f"> {above:g}"] if above is not None else []
    bounds += [f">= {at_least:g}"] if at_least is not None else []
    bounds += [f"<= {at_most:g}"] if at_most is not None else []
    return " ".join([kind, " and ".join(bounds)]) if bounds else kind


def env_seconds_above_zero(name: str, default: float) -> float:
    return env_number(name, default, above=0, unit="seconds")


def check_lease_terms(*, bound_s: float, interval_s: float) -> None:
    """The outage bound is the agents' lease, renewed at every heartbeat (agents/heartbeats.py
    lease_terms): it must outlast the heartbeats the leader waits for before it calls a node
    SUSPECT, or agents kill their tasks over a few late heartbeats."""
    if not interval_s > 0:
        raise ImproperlyConfigured(NO_HEARTBEATS.format(interval=interval_s))
    least = SUSPECT_AFTER_HEARTBEATS * interval_s
    if not bound_s > least:
        times = SUSPECT_AFTER_HEARTBEATS
        raise ImproperlyConfigured(LEASE_TOO_SHORT.format(bound=bound_s, times=times, interval=interval_s, least=least))


def _scheme(url: str) -> str:
    """The URL's scheme, '' when it has none (or no '://' after it)."""
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        scheme = url.partition(":")[0]
    return scheme if url.lower().startswith(f"{scheme}://") else ""


def _which_scheme(url: str) -> str:
    """Only the scheme is ever shown: the rest of the URL may hold a password."""
    scheme = _scheme(url)
    return f"its scheme is {scheme + '://'!r}" if scheme else "it has no scheme://"


def check_redis_url(url: str) -> str:
    """REDIS_URL as redis-py, Celery's broker and the channel layer will read it; '' (embedded)."""
    if url and _scheme(url) not in REDIS_SCHEMES:
        raise ImproperlyConfigured(BAD_REDIS_URL.format(why=_which_scheme(url)))
    try:
        redis.connection.parse_url(url) if url else None
    except ValueError as exc:
        raise ImproperlyConfigured(BAD_REDIS_URL.format(why=str(exc))) from None
    return url


def database_from_url(url: str) -> dict:
    """DATABASE_URL as Django's database settings: PostgreSQL only (the pool and the options
    settings.py gives it are psycopg's)."""
    try:
        database = dj_database_url.parse(url, conn_max_age=0, conn_health_checks=True)
    except dj_database_url.UnknownSchemeError:
        database = {}
    except ValueError:
        why = "it does not parse: a port that is not a number, or a password to %-encode?"
        raise ImproperlyConfigured(BAD_DATABASE_URL.format(why=why)) from None
    if database.get("ENGINE") != POSTGRES_ENGINE:
        raise ImproperlyConfigured(BAD_DATABASE_URL.format(why=_which_scheme(url)))
    return database
