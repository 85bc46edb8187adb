"""A real web process (daphne, with its connection pool) whose Postgres goes away and comes back,
through a proxy the test cuts: a restart costs no request (the pool checks a connection before
lending it); while Postgres is gone the API and the heartbeat lane answer 503 with Retry-After,
never a 500; once it is back they answer again within seconds, with no restart of the web."""

import json
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from agents.services import do_register_node
from mlqueue.middleware import DATABASE_UNAVAILABLE, RETRY_AFTER_S
from teams.models import ApiToken
from tests.e2e.cluster import FAST, free_port
from tests.e2e.processes import Process, wait_for
from tests.e2e.proxy import Proxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
INVENTORY = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 8, "memory_gb": 16}
POOL_WAIT_S = 2  # settings: DATABASES OPTIONS pool timeout, what a request waits while Postgres is gone


@pytest.fixture
def web(tmp_path, demo):
    db = settings.DATABASES["default"]
    postgres = Proxy(int(db["PORT"]))
    port = free_port()
    process = Process(
        ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mlqueue.asgi:application"],
        tmp_path / "web.log",
        **FAST,
        DATABASE_URL=f"postgres://{db['USER']}@127.0.0.1:{postgres.port}/{db['NAME']}",
    )
    url = f"http://127.0.0.1:{port}/api/v1/"
    _, api_token = ApiToken.issue(user=get_user_model().objects.get(username="alice"))
    _, node_token = do_register_node(name="n1", inventory=INVENTORY)
    yield SimpleNamespace(
        postgres=postgres,
        process=process,
        jobs=lambda: call(url + "jobs", api_token),
        heartbeat=lambda: call(url + "agents/n1/heartbeat", node_token, body={"tasks": []}),
    )
    process.stop()
    postgres.cut()


def call(url: str, token: str, *, body: dict | None = None) -> tuple[int, dict, str | None]:
    """(status, JSON body, Retry-After) of one request; a refused connection is status 0."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), error.headers.get("Retry-After")
    except (ConnectionError, urllib.error.URLError):
        return 0, {}, None


def answered(request, status: int) -> float:
    """Seconds until `request` answers `status` (it is asked again and again)."""
    started = time.monotonic()
    wait_for(lambda: request()[0] == status, timeout=20, interval=0.2, what=f"HTTP {status}")
    return time.monotonic() - started


def test_the_api_answers_503_while_postgres_is_down_and_recovers_without_a_restart(web):
    try:
        answered(web.jobs, 200)
        assert web.heartbeat()[0] == 200

        web.postgres.cut()  # a restart: every pooled connection broken, Postgres back at once
        web.postgres.restore()
        assert [web.jobs()[0] for _ in range(5)] + [web.heartbeat()[0]] == [200] * 6

        web.postgres.cut()  # an outage
        for request in (web.jobs, web.heartbeat, web.jobs):
            started = time.monotonic()
            status, body, retry_after = request()
            assert (status, body, retry_after) == (
                503,
                {"detail": DATABASE_UNAVAILABLE.format(seconds=RETRY_AFTER_S)},
                str(RETRY_AFTER_S),
            )
            assert time.monotonic() - started < POOL_WAIT_S + 2

        web.postgres.restore()  # back on the same address; daphne is not restarted
        assert answered(web.jobs, 200) < 10
        assert web.heartbeat()[0] == 200
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- web.log\n{web.process.output()[-4000:]}") from None
    output = web.process.output()
    assert "Internal Server Error" not in output and "Traceback" not in output, output[-4000:]
