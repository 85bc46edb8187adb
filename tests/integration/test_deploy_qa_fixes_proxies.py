"""X-Forwarded-For and X-Forwarded-Proto only from trusted proxies (mlqueue/proxies.py).

The web role ran daphne with --proxy-headers, which believes anyone's X-Forwarded-For: a client
reaching the web port directly opened /metrics with `X-Forwarded-For: 127.0.0.1` and escaped the
per-address login lockout by changing the header. Now the application takes the client's
address from the header only when the direct peer is in MLQ_TRUSTED_PROXIES, reading it from the
right; a direct client's X-Forwarded-* headers are dropped before Django or the heartbeat lane
sees them. The first test runs the real web role; the others call the ASGI application."""

import asyncio
import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import cache

from mlqueue.asgi import application
from mlqueue.proxies import forwarded_client, parse_address, resolve
from tests.e2e.cluster import free_port
from tests.e2e.processes import ROOT, process_env

ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
LOOPBACK = tuple(ipaddress.ip_network(net) for net in ("127.0.0.0/8", "::1/128"))
PROXIES = (ipaddress.ip_network("10.0.0.0/24"),)
CLIENT = "203.0.113.7"


def call(path: str, *, peer: str, headers: tuple = (), method: str = "GET", body: bytes = b"") -> tuple[int, dict]:
    """One request to the ASGI application from `peer`, as daphne without --proxy-headers gives it."""
    sent = []
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "scheme": "http",
        "query_string": b"",
        "client": (peer, 40000),
        "headers": [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    }

    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays until the response (Django listens meanwhile)

    async def send(message):
        sent.append(message)

    async_to_sync(application)(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


def forwarded(value: str) -> tuple:
    return ((b"x-forwarded-for", value.encode()),)


@pytest.mark.parametrize(
    "peer, header, client",
    [
        ("198.51.100.1", "127.0.0.1", "198.51.100.1"),  # a direct client: its header is ignored
        ("10.0.0.2", CLIENT, CLIENT),  # one trusted proxy
        ("10.0.0.2", f"127.0.0.1, {CLIENT}", CLIENT),  # what the client wrote itself is left of its address
        ("10.0.0.2", f"127.0.0.1, {CLIENT}, 10.0.0.9", CLIENT),  # two trusted proxies
        ("10.0.0.2", "10.0.0.7, 10.0.0.9", "10.0.0.7"),  # every hop trusted: the leftmost
        ("10.0.0.2", f"{CLIENT}, unknown", "10.0.0.2"),  # an unreadable hop: nothing left of it counts
        ("10.0.0.2", f"{CLIENT}:5555", CLIENT),  # a port on the hop
        ("10.0.0.2", "[2001:db8::7]:443", "2001:db8::7"),
        ("::ffff:10.0.0.2", CLIENT, CLIENT),  # a dual-stack socket's IPv4 peer
        ("10.0.0.2", "", "10.0.0.2"),
    ],
)
def test_the_client_is_the_first_untrusted_hop_from_the_right(peer, header, client):
    assert forwarded_client(peer, header, PROXIES) == client


def test_a_unix_socket_peer_counts_as_loopback():
    assert forwarded_client("", CLIENT, LOOPBACK) == CLIENT
    scope = {"type": "http", "client": None, "headers": [(b"x-forwarded-for", CLIENT.encode())]}
    assert resolve(scope, LOOPBACK)["client"] == (CLIENT, 0)
    assert resolve(scope, PROXIES)["headers"] == [] and resolve(scope, PROXIES)["client"] is None


def test_a_direct_clients_forwarded_headers_are_dropped_and_a_proxys_kept():
    headers = [(b"host", b"x"), (b"x-forwarded-for", b"127.0.0.1"), (b"x-forwarded-proto", b"https")]
    scope = {"type": "http", "scheme": "http", "client": ("198.51.100.1", 1), "headers": headers}
    direct = resolve(scope, PROXIES)
    assert direct["headers"] == [(b"host", b"x")] and direct["client"] == ("198.51.100.1", 1)
    proxied = resolve({**scope, "client": ("10.0.0.2", 1)}, PROXIES)
    assert proxied["headers"] == headers and proxied["client"] == ("127.0.0.1", 0) and proxied["scheme"] == "https"
    socket = resolve({**scope, "type": "websocket", "scheme": "ws", "client": ("10.0.0.2", 1)}, PROXIES)
    assert socket["scheme"] == "wss"
    assert parse_address("::ffff:10.0.0.2") == ipaddress.ip_address("10.0.0.2")


def test_the_web_role_gives_daphne_no_proxy_headers(tmp_path):
    """Run the role with a `python` that only prints its arguments."""
    (tmp_path / "python").write_text('#!/bin/sh\necho "$@"\n')
    (tmp_path / "python").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "DATABASE_URL": "x", "REDIS_URL": "x", "SECRET_KEY": "x"}
    result = subprocess.run([str(ENTRYPOINT), "web"], env=env, capture_output=True, text=True, timeout=10)
    assert result.returncode == 0 and result.stdout.startswith("-m mlqueue.webserver"), result
    assert "--proxy" not in result.stdout  # daphne would believe anyone's X-Forwarded-For


def _metrics_status(port: int, forwarded_for: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if forwarded_for:
        request.add_header("X-Forwarded-For", forwarded_for)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.e2e
def test_the_real_web_role_ignores_a_direct_clients_forged_address(transactional_db, tmp_path):
    """QA's reproduction: /metrics is 403 to a direct client, with or without a forged header.
    This machine's loopback stands for the outside: it is neither trusted nor allowed here."""
    port = free_port()
    env = process_env(
        PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        PORT=port,
        BIND_ADDRESS="127.0.0.1",
        MLQ_WEB_WORKERS=1,
        MLQ_TRUSTED_PROXIES="192.0.2.1/32",
        MLQ_METRICS_ALLOWED_NETWORKS="198.51.100.0/24",
        MLQ_VAR_DIR=tmp_path,
    )
    log = open(tmp_path / "web.log", "w")
    web = subprocess.Popen(
        [str(ENTRYPOINT), "web"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while _metrics_status(port, None) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _metrics_status(port, None) == 403, (tmp_path / "web.log").read_text()[-3000:]
        assert _metrics_status(port, "198.51.100.7") == 403
        assert _metrics_status(port, "10.0.0.1, 198.51.100.7") == 403
    finally:
        os.killpg(web.pid, 15)
        web.wait(timeout=40)
        log.close()


@pytest.mark.django_db(transaction=True)
def test_metrics_from_a_direct_client_go_by_its_own_address():
    assert call("/metrics", peer="198.51.100.1", headers=forwarded("127.0.0.1"))[0] == 403
    assert call("/metrics", peer="127.0.0.1")[0] == 200


@pytest.mark.django_db(transaction=True)
def test_metrics_behind_a_trusted_proxy_go_by_the_forwarded_client(settings):
    settings.MLQ_TRUSTED_PROXIES = PROXIES
    # The proxy itself (10.0.0.2) is not in the allowed networks (loopback); its client is.
    assert call("/metrics", peer="10.0.0.2", headers=forwarded("127.0.0.1"))[0] == 200
    # Loopback in front is the client's own writing: the proxy appended the real address.
    assert call("/metrics", peer="10.0.0.2", headers=forwarded(f"127.0.0.1, {CLIENT}, 10.0.0.9"))[0] == 403
    # By default only loopback is trusted: a pod's forwarded loopback is its own claim.
    settings.MLQ_TRUSTED_PROXIES = LOOPBACK
    assert call("/metrics", peer="127.0.0.1", headers=forwarded(CLIENT))[0] == 403


def guess(n: int, *, peer: str, forwarded_for: str) -> int:
    body = json.dumps({"username": f"nobody{n}", "password": "wrong", "name": "laptop"}).encode()
    return call("/api/v1/tokens", peer=peer, headers=forwarded(forwarded_for), method="POST", body=body)[0]


@pytest.fixture
def lockout(settings):
    settings.MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS, settings.MLQ_LOGIN_WINDOW_S = 3, 600
    cache.clear()
    yield
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_a_direct_client_cannot_escape_the_lockout_by_changing_the_header(lockout):
    assert [guess(n, peer=CLIENT, forwarded_for=f"10.1.0.{n}") for n in range(3)] == [401, 401, 401]
    assert guess(3, peer=CLIENT, forwarded_for="10.9.9.9") == 429


@pytest.mark.django_db(transaction=True)
def test_behind_a_trusted_proxy_the_lockout_counts_each_client(lockout, settings):
    settings.MLQ_TRUSTED_PROXIES = PROXIES
    assert [guess(n, peer="10.0.0.2", forwarded_for=CLIENT) for n in range(3)] == [401, 401, 401]
    assert guess(3, peer="10.0.0.2", forwarded_for=f"198.51.100.1, {CLIENT}") == 429  # forged hop ignored
    assert guess(4, peer="10.0.0.2", forwarded_for="198.51.100.9") == 401  # another client, the proxy not locked


@pytest.mark.django_db(transaction=True)
def test_only_a_trusted_proxy_says_the_request_came_over_https(settings):
    """Django's request.is_secure() (SECURE_PROXY_SSL_HEADER) shows in HSTS, which it sends only
    over HTTPS; the heartbeat lane reads the header itself, for its HTTPS redirect."""
    https = ((b"x-forwarded-proto", b"https"),)
    assert b"strict-transport-security" not in lower(call("/accounts/login/", peer=CLIENT, headers=https)[1])
    settings.SECURE_SSL_REDIRECT = True  # read per request by the lane
    assert call("/api/v1/agents/n1/heartbeat", peer=CLIENT, headers=https, method="POST", body=b"{}")[0] == 301
    settings.MLQ_TRUSTED_PROXIES = PROXIES
    assert b"strict-transport-security" in lower(call("/accounts/login/", peer="10.0.0.2", headers=https)[1])
    assert call("/api/v1/agents/n1/heartbeat", peer="10.0.0.2", headers=https, method="POST", body=b"{}")[0] == 401


def lower(headers: dict) -> set:
    return {name.lower() for name in headers}
