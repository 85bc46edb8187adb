"""The web tier through a Postgres or a Redis outage.

Postgres down: every request that needs it (the API, the pages, the heartbeat lane and its DRF
view) answers 503 with Retry-After and a clear message, never a 500, whether the error comes
from a view or from a middleware, with DEBUG on or off; other errors keep their 500. Postgres
is made unreachable for real: the connection's port becomes one where nothing listens.

Redis down or not answering: the cache falls back to this process's memory, so submits work
and the submit and login limits still hold; a Celery publish gives up within seconds; the
channel layer's commands time out quickly, yet a quiet live view keeps listening."""

import asyncio
import json
import logging
import socket
import threading
import time
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import OperationalError, connection
from django.http import HttpResponse
from django.test import Client
from django.urls import path
from psycopg_pool import ConnectionPool, PoolTimeout

from agents.services import do_register_node
from mlqueue import middleware
from mlqueue.asgi import application
from mlqueue.cache import FallbackRedisCache
from mlqueue.celery import app as celery_app
from mlqueue.channel_layer import SOCKET_TIMEOUT_S
from mlqueue.middleware import DATABASE_UNAVAILABLE, RETRY_AFTER_S, OutageLog, is_database_unavailable
from scheduling.models import Job
from scheduling.tasks import enforce_grace_deadline
from scheduling.web.throttles import SUBMIT_RATE_EXCEEDED
from tests.conftest import make_spec
from tests.e2e.processes import wait_for
from tests.e2e.proxy import Proxy

pytestmark = pytest.mark.django_db(transaction=True)
UNAVAILABLE = DATABASE_UNAVAILABLE.format(seconds=RETRY_AFTER_S)
INVENTORY = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 8, "memory_gb": 16}


def closed_port() -> int:
    """A port where nothing listens, as a crashed server's."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def postgres_unreachable():
    """Connecting to Postgres is refused meanwhile (the test's data is in before)."""
    saved = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = closed_port()
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = saved


@pytest.fixture
def outage_log(monkeypatch) -> OutageLog:
    """A fresh rate limit on the outage warning, as in a process that has seen no outage yet."""
    fresh = OutageLog()
    monkeypatch.setattr(middleware, "database_outages", fresh)
    return fresh


@pytest.fixture
def node_token(demo) -> str:
    return do_register_node(name="n1", inventory=INVENTORY)[1]


def assert_unavailable_json(response) -> None:
    assert (response.status_code, response["Retry-After"]) == (503, str(RETRY_AFTER_S))
    assert response.json() == {"detail": UNAVAILABLE}
    assert UNAVAILABLE == "the database is unavailable; retry in 5 s"


def test_the_outage_middleware_wraps_those_that_read_the_database(settings):
    """Installed, and outside the session and auth middleware, whose errors it must see."""
    order = settings.MIDDLEWARE
    assert order.index("mlqueue.middleware.DatabaseOutages") < order.index(
        "django.contrib.sessions.middleware.SessionMiddleware"
    )


@pytest.mark.parametrize("debug", [False, True])
def test_the_api_answers_503_with_retry_after_while_postgres_is_down(
    api, node_token, settings, debug, caplog, outage_log
):
    settings.DEBUG = debug
    alice, agent = api("alice"), Client(HTTP_AUTHORIZATION=f"Bearer {node_token}")
    with caplog.at_level(logging.WARNING, logger="mlqueue.middleware"), postgres_unreachable():
        assert_unavailable_json(alice.get("/api/v1/jobs"))
        assert_unavailable_json(alice.post("/api/v1/jobs", make_spec(), format="json"))
        assert_unavailable_json(
            agent.post("/api/v1/agents/n1/heartbeat", {"tasks": []}, content_type="application/json")
        )
    warnings = [r.getMessage() for r in caplog.records if r.name == "mlqueue.middleware"]
    assert len(warnings) == 1 and warnings[0].startswith("the database is unavailable (connection failed: ")
    assert warnings[0].endswith("answering 503, Retry-After 5 s")


@pytest.mark.parametrize("debug", [False, True])
def test_a_page_answers_a_503_page_while_postgres_is_down(demo, settings, debug):
    settings.DEBUG = debug
    browser = Client()
    browser.force_login(get_user_model().objects.get(username="alice"))
    with postgres_unreachable():
        response = browser.get("/queue/")
    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert response["Content-Type"].startswith("text/html")
    assert "The database is unavailable; retry in 5 s." in response.content.decode()


class ReadsTheUser:
    """A middleware that reads the database before any view: the session and the user."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.user.is_authenticated  # noqa: B018 (loads the session, then the user)
        return self.get_response(request)


@pytest.mark.parametrize("debug", [False, True])
def test_an_error_in_a_middleware_answers_503_too(demo, settings, debug):
    settings.DEBUG = debug
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.ReadsTheUser"]
    browser = Client(raise_request_exception=False)
    browser.force_login(get_user_model().objects.get(username="alice"))
    with postgres_unreachable():
        page, api = browser.get("/teams/"), browser.get("/api/v1/teams")
    assert (page.status_code, page["Retry-After"]) == (503, "5")
    assert "The database is unavailable; retry in 5 s." in page.content.decode()
    assert_unavailable_json(api)


def run_a_cancelled_query() -> None:
    """A statement Postgres cancels (statement_timeout): an OperationalError, and no outage."""
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 1")
        try:
            cursor.execute("SELECT pg_sleep(1)")
        finally:
            cursor.execute("RESET statement_timeout")


def cancelled_query(request):
    run_a_cancelled_query()
    return HttpResponse("not reached")


urlpatterns = [path("api/slow", cancelled_query)]


def test_other_database_errors_stay_500(demo, settings):
    settings.ROOT_URLCONF = __name__
    response = Client(raise_request_exception=False).get("/api/slow")
    assert response.status_code == 500 and "Retry-After" not in response


def test_what_counts_as_the_database_being_unavailable(demo):
    with pytest.raises(OperationalError) as refused, postgres_unreachable():
        connection.ensure_connection()
    with pytest.raises(psycopg.OperationalError) as refused_raw:
        psycopg.connect(host="127.0.0.1", port=closed_port(), user="postgres", connect_timeout=2)
    with (
        ConnectionPool(
            f"host=127.0.0.1 port={closed_port()} user=postgres", min_size=0, max_size=1, timeout=0.2, open=True
        ) as pool,
        pytest.raises(PoolTimeout) as pool_timeout,
    ):
        pool.getconn()
    with pytest.raises(OperationalError) as cancelled:
        run_a_cancelled_query()
    assert is_database_unavailable(refused.value) and is_database_unavailable(refused_raw.value)
    assert is_database_unavailable(pool_timeout.value)
    assert not is_database_unavailable(cancelled.value) and cancelled.value.__cause__.sqlstate == "57014"
    assert not is_database_unavailable(ValueError("not the database"))


def heartbeat_via_the_lane(token: str) -> tuple[int, dict, dict]:
    sent = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/agents/n1/heartbeat",
        "scheme": "http",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode()), (b"host", b"localhost")],
    }

    async def receive():
        return {"type": "http.request", "body": b'{"tasks": []}', "more_body": False}

    async def send(message):
        sent.append(message)

    async_to_sync(application)(scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"]), dict(sent[0]["headers"])


def test_the_heartbeat_lane_answers_503_while_postgres_is_down(node_token):
    with postgres_unreachable():
        status, body, headers = heartbeat_via_the_lane(node_token)
    assert (status, body, headers[b"retry-after"]) == (503, {"detail": UNAVAILABLE}, b"5")


# --- Redis down: the cache.


@pytest.fixture
def cache_down(settings):
    """The Django cache's Redis refuses connections (nothing listens at its port)."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": f"redis://127.0.0.1:{closed_port()}/0"}}


def submit(client, name: str):
    return client.post("/api/v1/jobs", make_spec(client_job_id=name, resources={"gpu_count": 8}), format="json")


def test_submits_work_and_are_still_limited_while_redis_is_down(api, cache_down, settings, caplog):
    settings.MLQ_SUBMIT_RATE = "2/minute"
    alice = api("alice")
    with caplog.at_level(logging.WARNING, logger="mlqueue.breaker"):
        assert [submit(alice, f"j{i}").status_code for i in range(2)] == [201, 201]
        refused = submit(alice, "j2")
    assert refused.status_code == 429
    assert refused.json()["detail"] == SUBMIT_RATE_EXCEEDED.format(count=2, period="minute", wait=60)
    assert Job.objects.filter(client_job_id__in=["j0", "j1"]).count() == 2
    fallbacks = [r.getMessage() for r in caplog.records if "Redis unavailable for the cache" in r.getMessage()]
    assert len(fallbacks) == 1, fallbacks  # once, not per request: the breaker holds Redis off


def test_login_limits_still_lock_while_redis_is_down(demo, cache_down, settings):
    settings.MLQ_LOGIN_MAX_FAILURES = 2
    login = Client(REMOTE_ADDR="203.0.113.7")
    statuses = [
        login.post("/accounts/login/", {"username": "alice", "password": "wrong"}).status_code for _ in range(3)
    ]
    assert statuses == [200, 200, 429]
    admin = Client(REMOTE_ADDR="203.0.113.8").post("/admin/login/", {"username": "bob", "password": "wrong"})
    assert admin.status_code == 200


def test_a_redis_that_does_not_answer_costs_half_a_second_once(settings):
    silent = socket.socket()  # accepts connections (the kernel does) and never answers, as a stopped Redis
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    cache = FallbackRedisCache(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", settings.CACHES["default"])
    try:
        started = time.monotonic()
        cache.set("k", 1)
        first = time.monotonic() - started
        started = time.monotonic()
        assert cache.get("k") == 1
        second = time.monotonic() - started
    finally:
        silent.close()
    assert first < 1.5 and second < 0.1


def test_the_cache_comes_back_to_redis_after_an_outage(settings, caplog):
    redis = urlsplit(settings.REDIS_URL)
    proxy = Proxy(redis.port)
    cache = FallbackRedisCache(
        f"redis://127.0.0.1:{proxy.port}{redis.path}",
        {**settings.CACHES["default"], "KEY_PREFIX": f"outage-{proxy.port}"},
    )
    with caplog.at_level(logging.WARNING, logger="mlqueue.breaker"):
        cache.set("before", "in redis", 60)
        proxy.cut()
        cache.set("during", "in memory", 60)
        assert (cache.get("before"), cache.get("during")) == (None, "in memory")
        proxy.restore()
        wait_for(cache.breaker.allowed, timeout=10, what="the breaker to try Redis again")
        assert (cache.get("before"), cache.get("during")) == ("in redis", None)
    cache.delete("before")
    messages = [r.getMessage().split(" (")[0] for r in caplog.records if "for the cache" in r.getMessage()]
    assert messages == ["Redis unavailable for the cache", "Redis is back for the cache"]


def test_the_cache_backends_of_a_process_share_their_redis_connections(settings):
    """Django builds a cache backend per thread, and per request under ASGI: they draw on one
    connection pool, so a request does not open (and close) a Redis connection of its own."""
    backends = [FallbackRedisCache(settings.REDIS_URL, settings.CACHES["default"]) for _ in range(2)]
    other_thread = threading.Thread(
        target=lambda: backends.append(FallbackRedisCache(settings.REDIS_URL, settings.CACHES["default"]))
    )
    other_thread.start()
    other_thread.join()
    backends[0].set("shared-pool", "seen", 5)
    assert [backend.get("shared-pool") for backend in backends] == ["seen"] * 3
    pools = {id(backend._cache._get_connection_pool(write=True)) for backend in backends}
    assert len(pools) == 1
    backends[0].delete("shared-pool")


# --- Redis down: Celery.


def test_a_publish_to_a_broker_that_does_not_answer_gives_up_within_seconds():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    outcome = {}

    def publish():
        started = time.monotonic()
        try:
            with celery_app.connection_for_write(f"redis://127.0.0.1:{silent.getsockname()[1]}/0") as broker:
                enforce_grace_deadline.apply_async(args=[1], countdown=30, connection=broker)
        except Exception as exc:  # what scheduling/stopping.py catches
            outcome["error"] = type(exc).__name__
        outcome["took"] = time.monotonic() - started

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    thread.join(10)
    silent.close()
    assert outcome.get("error") == "OperationalError" and outcome["took"] < 5, outcome


# --- Redis: the channel layer.


def test_a_quiet_channel_keeps_listening_past_the_socket_timeout():
    """The layer's BZPOPMIN must end before its socket times out: redis-py 8's default timeout
    (5 s) equals channels_redis's BZPOPMIN (5 s), and the receive loop of every live view quiet
    for 5 s died with a TimeoutError, so it heard no more changes."""

    async def quiet_then_told():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        listening = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(max(SOCKET_TIMEOUT_S, 5) + 1)
        await layer.send(channel, {"type": "jobs.changed", "jobs": [[1, 1]]})
        return await asyncio.wait_for(listening, timeout=3)

    assert async_to_sync(quiet_then_told)() == {"type": "jobs.changed", "jobs": [[1, 1]]}
