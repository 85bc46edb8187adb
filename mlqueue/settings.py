"""mlqueue settings, read from the environment.

With no DATABASE_URL / REDIS_URL the same code runs embedded: a SQLite file, an in-memory
channel layer and Celery tasks run eagerly in-process. Postgres and Redis are what tests,
benchmarks and production use.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from mlqueue.env_settings import (
    SUSPECT_AFTER_HEARTBEATS,
    check_lease_terms,
    check_redis_url,
    database_from_url,
    env_number,
    env_seconds_above_zero,
)
from mlqueue.env_values import env_backlog, env_choice, env_max_evictions, env_min_runtime, env_seconds
from mlqueue.redis_client import (
    BLOCKING_CONNECT_TIMEOUT_S,
    BLOCKING_SOCKET_TIMEOUT_S,
    COMMAND_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MLQ_VAR_DIR", BASE_DIR / "var"))
# Multiprocess metrics write a file per process there (docs/metrics.md): a directory on a tmpfs
# emptied at boot is gone after it, and every process would fail at its first metric.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


DEBUG = env_bool("DEBUG", False)
NO_SECRET_KEY = (
    "SECRET_KEY is not set and DEBUG is off: refusing to start with a key anyone can read in the source. "
    "Set SECRET_KEY to a long random value, e.g. the output of "
    "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`, kept the same on every web process "
    "(or set DEBUG=1 on a development machine)."
)
# Sessions, CSRF tokens and password-reset links are signed with it: a known key lets anyone
# forge a login. The fallback is only for a laptop (`check --deploy` flags it, security.W009).
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(NO_SECRET_KEY)
    SECRET_KEY = "django-insecure-mlqueue-development-key-do-not-deploy"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_prometheus",
    "teams",
    "agents",
    "scheduling",
    "notifications",
    "mlqueue.apps.ServerConfig",  # mlqueue's own `check --deploy` warnings (mlqueue/checks.py)
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "mlqueue.middleware.DatabaseOutages",  # a database outage is a 503, wherever it is raised
    "mlqueue.middleware.RefuseControlCharacters",
    "mlqueue.middleware.ApiNotFound",  # with DEBUG on too, an unmatched /api/ path answers in JSON
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "mlqueue.htmx_login.HtmxLoginRedirect",  # htmx meets login_required: the browser goes to the login page
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "mlqueue.urls"
WSGI_APPLICATION = "mlqueue.wsgi.application"
ASGI_APPLICATION = "mlqueue.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "teams.context_processors.navigation",
            ],
        },
    },
]

# --- Database: Postgres in tests and production, a SQLite file when embedded.
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    # A connection pool per process (psycopg_pool): under ASGI, requests run in varying
    # threads, so Django's persistent connections would reconnect on nearly every request.
    # CONN_HEALTH_CHECKS: Django then gives the pool psycopg_pool's check_connection, so a pooled
    # connection that a Postgres restart broke is replaced when taken, not failed by a request.
    DATABASES = {"default": database_from_url(DATABASE_URL)}
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = 3  # a host that never answers too
    if env_bool("MLQ_DB_POOL", True):
        # `timeout`: how long a request waits for a connection before it answers 503
        # (mlqueue/middleware.py). While Postgres is down every request waits this long.
        DATABASES["default"]["OPTIONS"]["pool"] = {
            "min_size": env_int("MLQ_DB_POOL_MIN", 1),
            "max_size": env_int("MLQ_DB_POOL_MAX", 10),
            "timeout": 2,
        }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "mlqueue.sqlite3",
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: heartbeats, the Celery broker and the channel layer. Unset: all in-process.
REDIS_URL = check_redis_url(os.environ.get("REDIS_URL", ""))
if REDIS_URL:
    # Redis is a cache: each process counts in its own memory while it fails (mlqueue/cache.py).
    # Short timeouts everywhere: a Redis that stops answering must not hold a request or a pass.
    # The same timeouts as mlqueue.redis_client's, which says why each is what it is.
    CACHES = {
        "default": {
            "BACKEND": "mlqueue.cache.FallbackRedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_timeout": COMMAND_TIMEOUT_S},
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "mlqueue.channel_layer.ShortWaitRedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_connect_timeout": BLOCKING_CONNECT_TIMEOUT_S,
                        "socket_timeout": BLOCKING_SOCKET_TIMEOUT_S,
                    }
                ]
            },
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
    # A publish (the grace deadline's kill, scheduling/stopping.py) gives up within about 2 s when
    # Redis is down or hung; the leader's sweep kills on time without it. The socket timeout must
    # stay above the worker's 1 s BRPOP.
    CELERY_BROKER_CONNECTION_TIMEOUT = BLOCKING_CONNECT_TIMEOUT_S
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "socket_connect_timeout": BLOCKING_CONNECT_TIMEOUT_S,
        "socket_timeout": BLOCKING_SOCKET_TIMEOUT_S,
    }
    CELERY_TASK_PUBLISH_RETRY_POLICY = {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.2,
    }
else:
    # Shared by the processes of one machine (web, scheduler), as Redis would be.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# Back to the login page, not Django admin's "Logged out" page (whose link leads to /admin/).
LOGOUT_REDIRECT_URL = LOGIN_URL

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
# Django serves /static/ itself only when asked (development, tests, a single-machine demo);
# production runs `collectstatic` and lets the reverse proxy serve STATIC_ROOT.
MLQ_SERVE_STATIC = env_bool("MLQ_SERVE_STATIC", DEBUG)

# Submissions are small JSON documents; anything larger is a mistake or an attack.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MLQ_MAX_BODY_BYTES", 256 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "teams.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "mlqueue.parsers.LimitedJSONParser",
        "mlqueue.yaml_body.LimitedYAMLParser",
        "mlqueue.yaml_body.LimitedXYAMLParser",
        "mlqueue.yaml_body.LimitedTextYAMLParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "mlqueue.negotiation.FormatNegotiation",  # ?format=csv: a 400, not a 404
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "mlqueue.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "mlqueue API",
    "DESCRIPTION": "Submit, inspect and cancel jobs; read queues, teams, quotas and nodes.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TaskStateEnum": "scheduling.models.TaskState",
        "NodeStateEnum": "scheduling.models.NodeState",
        "RestartModeEnum": "scheduling.spec.RESTART_MODES",
        "ScheduleConcurrencyEnum": "scheduling.models.Concurrency",
        "FireOutcomeEnum": "scheduling.models.FireOutcome",
        "EventKindEnum": "teams.models.EventKind",
        "NotifyEventEnum": "scheduling.notify_spec.Event",
        "StopCauseEnum": "scheduling.stop_requests.CAUSES",
        "TaskExitCauseEnum": "agents.protocol.EXIT_CAUSES",
        "TaskIsolationEnum": "scheduling.models.TaskIsolation",
    },
}

# --- Production hardening: on unless DEBUG; each can be turned off behind a proxy that does it.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
X_FRAME_OPTIONS = "DENY"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {
        "quiet_heartbeats": {"()": "mlqueue.log_filters.QuietHeartbeats"},
        "refusals_without_tracebacks": {"()": "mlqueue.log_filters.RefusalsWithoutTracebacks"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django's own default gives `django` a console handler of its own under DEBUG: every
        # line of Django's (runserver's access log in make demo) came out twice.
        "django": {"handlers": [], "level": "INFO"},
        "django.db.backends": {"level": "WARNING"},
        # runserver's access log (make demo): a line per successful heartbeat drowned the rest.
        "django.channels.server": {"filters": ["quiet_heartbeats"]},
        "django.request": {"filters": ["refusals_without_tracebacks"]},
    },
}

# --- mlqueue itself.
MLQ_GPU_TYPES = env_list("MLQ_GPU_TYPES", "H100,A100,L40S")
# The currency of the prices admins set (docs/usage.md): a label on costs, never converted.
MLQ_CURRENCY = os.environ.get("MLQ_CURRENCY", "USD")
MLQ_MAX_RUNTIME_HOURS = env_number("MLQ_MAX_RUNTIME_HOURS", 720.0, above=0, unit="hours")
MLQ_AGENT_JOIN_TOKEN = os.environ.get("MLQ_AGENT_JOIN_TOKEN", "")
# Retry back-off after an application failure: base x 2^retries, capped.
MLQ_RETRY_BACKOFF_BASE_S = env_seconds("MLQ_RETRY_BACKOFF_BASE_S", 30.0)
MLQ_RETRY_BACKOFF_MAX_S = env_seconds("MLQ_RETRY_BACKOFF_MAX_S", 3600.0)
# Fault injection for the failover tests only: the leader waits this long between deciding
# and applying, so a test can pause it mid-pass. Never set in production.
MLQ_FAULT_APPLY_DELAY_S = env_seconds("MLQ_FAULT_APPLY_DELAY_S", 0.0)
# Fault injection for the fault campaign only (bench/chaos.py): a file naming a failpoint
# (scheduling/leader/failpoints.py); the scheduler that reaches that point kills itself. Never set in
# production.
MLQ_FAILPOINT_FILE = os.environ.get("MLQ_FAILPOINT_FILE", "")
# The outage bound (README, "Outages"): running tasks survive a control-plane outage (Postgres,
# Redis, the web tier, the scheduler) this long. It is the agents' lease: an agent that has not
# renewed for this long has killed its tasks (its supervisors do, even if the agent is stuck),
# and only after it plus a margin may the leader call the node LOST and requeue its tasks.
# Kubernetes' default eviction delay and Slurm's SlurmdTimeout are 5 minutes too.
MLQ_OUTAGE_BOUND_S = env_seconds_above_zero("MLQ_OUTAGE_BOUND_S", 300.0)
# Node agents heartbeat every 5 s; the leader calls a node SUSPECT after 3 missed heartbeats
# (nothing new is placed there) and LOST only after the bound and the margin. The bound, the
# agents' lease renewed at each heartbeat, must be longer than those 3 heartbeats (checked here).
MLQ_HEARTBEAT_INTERVAL_S = env_seconds_above_zero("MLQ_HEARTBEAT_INTERVAL_S", 5.0)
check_lease_terms(bound_s=MLQ_OUTAGE_BOUND_S, interval_s=MLQ_HEARTBEAT_INTERVAL_S)
MLQ_SUSPECT_AFTER_S = SUSPECT_AFTER_HEARTBEATS * MLQ_HEARTBEAT_INTERVAL_S
MLQ_LOST_MARGIN_S = env_seconds("MLQ_LOST_MARGIN_S", 30.0)
# When at least this share of the nodes (and at least MIN_NODES of them) fall silent at once,
# the fault is the control plane's, not theirs: the leader calls none of them LOST until they
# are heard again, and then restarts its clocks (Kubernetes' "full disruption" mode).
MLQ_FULL_DISRUPTION_SHARE = env_number("MLQ_FULL_DISRUPTION_SHARE", 0.55, at_least=0, at_most=1)
MLQ_FULL_DISRUPTION_MIN_NODES = env_int("MLQ_FULL_DISRUPTION_MIN_NODES", 3)
# Web processes batch the heartbeats they answered into Postgres (one statement each time):
# the liveness that survives Redis losing its data, and the only one while Redis is down.
MLQ_LIVENESS_FLUSH_S = env_seconds_above_zero("MLQ_LIVENESS_FLUSH_S", 10.0)
# Heartbeats from agents' sockets are answered in batches (agents/batches.py): a batch waits
# this long for company after its first heartbeat (plus however long the previous batch takes),
# and takes at most MAX of them; a MAX of 1 answers each alone, as over HTTP.
MLQ_HEARTBEAT_BATCH_WAIT_S = env_seconds("MLQ_HEARTBEAT_BATCH_WAIT_S", 0.01)
MLQ_HEARTBEAT_BATCH_MAX = env_int("MLQ_HEARTBEAT_BATCH_MAX", 500)


# Per class of the PREEMPTOR: victims younger than this are not preempted for priority by it.
# An incident (P0) waits for nobody by default. MLQ_PREEMPT_MIN_RUNTIME_S, the older setting,
# when set still applies to P1-P3.
MLQ_PREEMPT_MIN_RUNTIME = env_min_runtime("MLQ_PREEMPT_MIN_RUNTIME", "MLQ_PREEMPT_MIN_RUNTIME_S")
# A team's job within its guarantee reclaims borrowed capacity only after waiting this long
# (0: at once), so room that frees up by itself comes to it first (BENCHMARKS.md: reclaim churn).
MLQ_RECLAIM_AFTER_WAIT_S = env_seconds("MLQ_RECLAIM_AFTER_WAIT_S", 0.0)
# Reclaim in turn: a job within its guarantee reclaims only while no job before it in the queue
# waits for the room it would free, and is nominated to the nodes it freed (docs/reclaim.md);
# under a deep backlog only: from the pass whose waiting jobs ask MLQ_RECLAIM_IN_TURN_BACKLOG
# times a class's capacity, until they ask less than MLQ_RECLAIM_IN_TURN_BACKLOG_OFF times it
# ("always": the rule in every pass).
MLQ_RECLAIM_IN_TURN = env_bool("MLQ_RECLAIM_IN_TURN", True)


MLQ_RECLAIM_IN_TURN_BACKLOG = env_backlog("MLQ_RECLAIM_IN_TURN_BACKLOG", 1.0)
MLQ_RECLAIM_IN_TURN_BACKLOG_OFF = env_backlog("MLQ_RECLAIM_IN_TURN_BACKLOG_OFF", 0.0)
QUEUE_ORDERS = ("weighted_shortest", "fair_share")


# The queue order within a priority class (scheduling/core/queue_order.py):
# weighted_shortest ranks jobs by expected GPU-time times (1 + their team's share); fair_share
# gives teams turns by share, shortest first within a turn (BENCHMARKS.md: the two compared).
MLQ_QUEUE_ORDER = env_choice("MLQ_QUEUE_ORDER", QUEUE_ORDERS)
# A job that ran and waits again (evicted, its node lost, retried) counts its wait for the
# overdue line (the oldest first, the reservations) from its requeue, not from its submit, as
# Kueue's default requeuing timestamp does. Off by default: on the whole Philly trace it cut the
# longest wait at 512 GPUs from 2.11 x EASY backfill's to 0.71 x, but raised the JCT at 640
# GPUs from 0.76 x to 0.85 x (BENCHMARKS.md, "Requeued victims and the overdue line").
MLQ_OVERDUE_SINCE_REQUEUE = env_bool("MLQ_OVERDUE_SINCE_REQUEUE", False)


# Victims of a reclaim (docs/reclaim.md): a job preempted this many times is not reclaimed
# again until the owner has waited 2 hours ('none': no cap); those that checkpointed within the
# last MLQ_RECLAIM_CHECKPOINT_STEP_S go first, then the longest expected remaining
# (MLQ_RECLAIM_LONGEST_FIRST; 0: the least work lost, then the newest).
MLQ_RECLAIM_MAX_EVICTIONS = env_max_evictions("MLQ_RECLAIM_MAX_EVICTIONS", 2)
MLQ_RECLAIM_LONGEST_FIRST = env_bool("MLQ_RECLAIM_LONGEST_FIRST", True)
MLQ_RECLAIM_CHECKPOINT_STEP_S = env_seconds("MLQ_RECLAIM_CHECKPOINT_STEP_S", 720.0)
MLQ_MAX_LOG_CHARS = env_int("MLQ_MAX_LOG_CHARS", 10_000_000)  # per task attempt and stream, in Postgres
# Job groups: the most elements (or trials) one array (or sweep) may have; the lines of a task
# attempt's metrics file whose reports are kept (past it the rest are dropped and the job's
# timeline says so; scheduling/job_metrics.py).
MLQ_MAX_GROUP_SIZE = env_int("MLQ_MAX_GROUP_SIZE", 10_000)
MLQ_MAX_METRIC_REPORTS = env_int("MLQ_MAX_METRIC_REPORTS", 100_000)
# Where a pipeline's runs keep their files: a step's {run_dir} is <root>/<pipeline name>/<run id>
# (docs/pipelines.md). In production a filesystem every node mounts at the same path; the
# default, under var/, serves one machine and the demo.
MLQ_PIPELINE_RUN_ROOT = os.environ.get("MLQ_PIPELINE_RUN_ROOT", str(VAR_DIR / "pipeline-runs"))
# `GET /api/v1/jobs/{id}/logs?follow=1` (scheduling/web/logstream.py): how often a stream looks for
# new lines, how long it may stay quiet before a keep-alive comment, and how long it lasts at most.
MLQ_LOG_FOLLOW_POLL_S = env_seconds("MLQ_LOG_FOLLOW_POLL_S", 1.0)
MLQ_LOG_FOLLOW_HEARTBEAT_S = env_seconds("MLQ_LOG_FOLLOW_HEARTBEAT_S", 15.0)
MLQ_LOG_FOLLOW_MAX_S = env_seconds("MLQ_LOG_FOLLOW_MAX_S", 3600.0)
# The start-time forecast (scheduling/leader/forecasting.py): at most one per this many seconds,
# after a pass, and at most this many simulated passes each; what the simulated future evicts
# ("all" as configured; "priority": no reclaim; "none": cheaper, less exact; BENCHMARKS.md).
MLQ_FORECAST_INTERVAL_S = env_seconds("MLQ_FORECAST_INTERVAL_S", 5.0)
MLQ_FORECAST_MAX_PASSES = env_int("MLQ_FORECAST_MAX_PASSES", 45)
MLQ_FORECAST_EVICTIONS = env_choice("MLQ_FORECAST_EVICTIONS", ("all", "priority", "none"))
# Schedules (scheduling/schedules.py): Celery beat looks for due fire times this often (the fast
# path), and the leader between its passes (the guarantee, and the only firer in embedded mode).
MLQ_SCHEDULE_BEAT_S = env_seconds("MLQ_SCHEDULE_BEAT_S", 10.0)
MLQ_SCHEDULE_SWEEP_S = env_seconds("MLQ_SCHEDULE_SWEEP_S", 10.0)


# --- Abuse limits and who may reach what (SECURITY.md).
def env_positive(name: str, default: int) -> int:
    value = env_int(name, default)
    if value < 1:
        raise ImproperlyConfigured(f"{name}={value} must be at least 1")
    return value


def env_rate(name: str, default: str) -> str | None:
    """A DRF throttle rate such as "120/minute"; "off" turns the limit off (None)."""
    raw = os.environ.get(name, "").strip() or default
    if raw.lower() == "off":
        return None
    count, _, period = raw.partition("/")
    if not count.isdigit() or int(count) < 1 or period not in {"second", "minute", "hour", "day"}:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate: use N/second, N/minute, N/hour, N/day or off")
    return raw


def env_networks(name: str, default: str) -> tuple:
    """Comma-separated CIDRs, checked now so a typo stops the server instead of opening /metrics."""
    import ipaddress

    try:
        return tuple(ipaddress.ip_network(item) for item in env_list(name, default))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc} (use CIDRs such as 10.0.0.0/8, comma-separated)") from None


# What-if previews of a quota change (scheduling/whatif.py): the longest window of history a
# preview replays, the most jobs it may hold (bench/whatif.py: 10,000 jobs of a week, replayed
# twice on the demo fleet, took 217 s on a shared machine), and the seconds a preview may run.
MLQ_WHATIF_MAX_DAYS = env_positive("MLQ_WHATIF_MAX_DAYS", 31)
MLQ_WHATIF_MAX_JOBS = env_positive("MLQ_WHATIF_MAX_JOBS", 10_000)
MLQ_WHATIF_TIME_LIMIT_S = env_positive("MLQ_WHATIF_TIME_LIMIT_S", 600)

# Failed logins (web, admin, the token exchange): past MAX_FAILURES for one user name, or
# MAX_FAILURES_PER_ADDRESS from one client address, within WINDOW_S, further attempts are refused
# (429) without checking the password, for WINDOW_S. An address is shared by everyone behind a
# NAT or proxy, hence its larger allowance. Counters live in the cache (teams/login_limits.py).
MLQ_LOGIN_MAX_FAILURES = env_positive("MLQ_LOGIN_MAX_FAILURES", 10)
MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS = env_positive("MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS", 30)
MLQ_LOGIN_WINDOW_S = env_positive("MLQ_LOGIN_WINDOW_S", 600)
# Job submissions per user (POST /api/v1/jobs). Arrays and sweeps are one submit; a script
# submitting one job a second stays under it. Benchmarks that submit over HTTP may raise it.
MLQ_SUBMIT_RATE = env_rate("MLQ_SUBMIT_RATE", "120/minute")
# Dry runs per user (POST /api/v1/jobs/dry-run): each runs a scheduling pass over the whole
# waiting queue (a few hundred ms at 5,000 pending jobs), so a loop of them is bounded.
MLQ_DRY_RUN_RATE = env_rate("MLQ_DRY_RUN_RATE", "30/minute")
# Single submits (POST /api/v1/jobs with a bearer token) that arrive together are written in
# one transaction by a lane in front of Django (mlqueue/submit_lane.py), each answered as the
# view answers it. Off: every submit goes through Django alone.
MLQ_SUBMIT_LANE = env_bool("MLQ_SUBMIT_LANE", True)
# Job specs in one POST /api/v1/jobs/batch (each counts against MLQ_SUBMIT_RATE, and the body
# against MLQ_MAX_BODY_BYTES).
MLQ_SUBMIT_BATCH_MAX = env_positive("MLQ_SUBMIT_BATCH_MAX", 1000)
# Seconds a web process remembers an API token it accepted (teams/authentication.py): revoking
# it, or changing its user, still takes effect at the next request. 0: read it every request.
MLQ_TOKEN_CACHE_S = env_int("MLQ_TOKEN_CACHE_S", 10)
# A live-view socket re-reads its user's teams (and that the user is still active and logged
# in) when its cached copy is older than this, on the next event it receives.
MLQ_WS_RECHECK_S = env_seconds("MLQ_WS_RECHECK_S", 30.0)
# The teams page and the quotas API show every team's guarantees, borrowing limits, use and fair
# share to every signed-in user, as Slurm's sshare does (aggregates only: jobs stay team-private).
# Off: only members (and the leads above them, and admins) see a team's numbers.
MLQ_QUOTAS_PUBLIC = env_bool("MLQ_QUOTAS_PUBLIC", True)
# /metrics: a scrape with `Authorization: Bearer <MLQ_METRICS_TOKEN>`, or from these networks.
MLQ_METRICS_TOKEN = os.environ.get("MLQ_METRICS_TOKEN", "")
MLQ_METRICS_ALLOWED_NETWORKS = env_networks("MLQ_METRICS_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
# The reverse proxies in front of the web tier whose X-Forwarded-For and X-Forwarded-Proto are
# believed (mlqueue/proxies.py); from any other peer those headers are dropped. Addresses or CIDRs.
MLQ_TRUSTED_PROXIES = env_networks("MLQ_TRUSTED_PROXIES", "127.0.0.0/8,::1/128")

# --- Secret env (scheduling/secrets.py): comma-separated Fernet keys; the first encrypts, all
# decrypt, so a new key goes first and the old one stays until no job needs it. Unset: a key
# derived from SECRET_KEY, for the demo (`check --deploy` warns: mlqueue.W001).
MLQ_SECRET_ENV_KEYS = env_list("MLQ_SECRET_ENV_KEYS", "")

# --- Notifications (notifications/, docs/notifications.md). Webhooks go only to hosts matching
# MLQ_WEBHOOK_ALLOWED_HOSTS ("*" any, "*.example.com", a host written out; unset: none), and
# never to a loopback, link-local, private or otherwise non-public address unless it lies in
# MLQ_WEBHOOK_ALLOWED_NETWORKS. A failed delivery is tried again after BASE, 2 x BASE, ...
# (at most MAX) seconds, MAX_ATTEMPTS times in all; Celery beat sweeps for due ones every SWEEP_S.
MLQ_WEBHOOK_ALLOWED_HOSTS = env_list("MLQ_WEBHOOK_ALLOWED_HOSTS", "")
MLQ_WEBHOOK_ALLOWED_NETWORKS = env_networks("MLQ_WEBHOOK_ALLOWED_NETWORKS", "")
MLQ_WEBHOOK_TIMEOUT_S = env_seconds("MLQ_WEBHOOK_TIMEOUT_S", 5.0)
MLQ_NOTIFY_MAX_ATTEMPTS = env_positive("MLQ_NOTIFY_MAX_ATTEMPTS", 8)
MLQ_NOTIFY_RETRY_BASE_S = env_seconds("MLQ_NOTIFY_RETRY_BASE_S", 30.0)
MLQ_NOTIFY_RETRY_MAX_S = env_seconds("MLQ_NOTIFY_RETRY_MAX_S", 3600.0)
MLQ_NOTIFY_SWEEP_S = env_seconds("MLQ_NOTIFY_SWEEP_S", 15.0)
# Where people reach the web UI: the job page's link in a notification.
MLQ_BASE_URL = os.environ.get("MLQ_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
# Mail goes through Django's backend: SMTP at EMAIL_HOST:EMAIL_PORT, or the console in DEBUG.
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "mlqueue@localhost")


def env_int_list(name: str, default: str) -> tuple[int, ...]:
    items = env_list(name, default)
    bad = [item for item in items if not item.isdigit()]
    if bad:
        raise ImproperlyConfigured(f"{name}: {', '.join(map(repr, bad))} not a whole number (a list like '79,74')")
    return tuple(sorted({int(item) for item in items}))


# Node health (docs/node-health.md). XIDs that cordon the whole node (the GPU fell off the bus,
# NVLink, GSP or the micro-controller failed: the machine needs a person), and XIDs that take
# only their GPU out of placement (uncorrectable memory errors, row remapping).
MLQ_HEALTH_CORDON_XIDS = env_int_list("MLQ_HEALTH_CORDON_XIDS", "61,62,74,79,119,120")
MLQ_HEALTH_EXCLUDE_XIDS = env_int_list("MLQ_HEALTH_EXCLUDE_XIDS", "48,63,64,92,94,95")
# This many tasks failing for infrastructure on one node within the window cordon it (0: never).
MLQ_HEALTH_INFRA_FAILURES = env_int("MLQ_HEALTH_INFRA_FAILURES", 3)
MLQ_HEALTH_INFRA_WINDOW_S = env_seconds("MLQ_HEALTH_INFRA_WINDOW_S", 600.0)
# The latest sample per node lives in Redis this long after it was sent (a silent node's goes).
MLQ_HEALTH_SAMPLE_TTL_S = env_seconds("MLQ_HEALTH_SAMPLE_TTL_S", 600.0)
# A GPU this hot (Celsius) shows as a warning (no action: the GPU throttles itself).
MLQ_HEALTH_HOT_C = env_int("MLQ_HEALTH_HOT_C", 90)


# --- The web processes' cyclic garbage collector: its youngest generation is collected every this
# many net allocations instead of CPython's 700 (mlqueue/gc_tuning.py says why).
MLQ_GC_YOUNG_THRESHOLD = env_positive("MLQ_GC_YOUNG_THRESHOLD", 50_000)
