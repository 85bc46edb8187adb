"""`/healthz` (mlqueue/health.py) is answered before Django for GET and HEAD, refuses other
methods, and passes every other request on untouched."""

import asyncio
import json

import pytest

from mlqueue.health import HealthLane


def call(path: str, method: str = "GET", scope_type: str = "http") -> tuple[list[dict], list[str]]:
    sent, passed = [], []

    async def app(scope, receive, send):
        passed.append(scope["path"])

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": scope_type, "path": path, "method": method, "headers": [(b"host", b"10.0.0.7:8000")]}
    asyncio.run(HealthLane(app)(scope, receive, send))
    return sent, passed


@pytest.mark.parametrize("path", ["/healthz", "/healthz/"])
def test_get_answers_ok_whatever_the_host(path):
    (start, body), passed = call(path)
    assert passed == []
    assert start["status"] == 200
    assert json.loads(body["body"]) == {"status": "ok"}
    headers = dict(start["headers"])
    assert headers[b"content-length"] == str(len(body["body"])).encode()
    assert headers[b"cache-control"] == b"no-store"


def test_head_answers_without_a_body():
    (start, body), _ = call("/healthz", "HEAD")
    assert start["status"] == 200 and body["body"] == b""


def test_other_methods_are_refused():
    (start, body), passed = call("/healthz", "POST")
    assert start["status"] == 405 and dict(start["headers"])[b"allow"] == b"GET, HEAD"
    assert dict(start["headers"])[b"content-length"] == b"0" and passed == []


@pytest.mark.parametrize("path", ["/", "/healthzz", "/api/v1/healthz", "/metrics"])
def test_other_paths_go_to_the_application(path):
    sent, passed = call(path)
    assert sent == [] and passed == [path]


def scrape(path: str, allowed_hosts: list[str], host: bytes = b"10.1.2.3:8000") -> dict:
    seen = []

    async def app(scope, receive, send):
        seen.append(scope)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "path": path, "method": "GET", "scheme": "http", "headers": [(b"host", host)]}
    asyncio.run(HealthLane(app, allowed_hosts=allowed_hosts)(scope, receive, None))
    return seen[0]


@pytest.mark.parametrize("path", ["/metrics", "/metrics/"])
def test_a_scrape_by_the_pod_address_over_http_reaches_django_as_for_the_site(path):
    """An in-cluster Prometheus scrapes a pod by its address over plain HTTP; /metrics checks the
    token or network itself, so ALLOWED_HOSTS and the HTTPS redirect must not refuse it first."""
    scope = scrape(path, [".internal", "*", "mlqueue.example.com", "web-1"])
    assert dict(scope["headers"])[b"host"] == b"mlqueue.example.com"
    assert [name for name, _ in scope["headers"]].count(b"host") == 1
    assert scope["scheme"] == "https"


def test_other_paths_keep_their_host_and_scheme():
    scope = scrape("/api/v1/scheduler", ["mlqueue.example.com"])
    assert dict(scope["headers"])[b"host"] == b"10.1.2.3:8000" and scope["scheme"] == "http"


def test_with_no_named_host_a_scrape_is_left_as_it_came():
    scope = scrape("/metrics", ["*"])
    assert dict(scope["headers"])[b"host"] == b"10.1.2.3:8000" and scope["scheme"] == "http"


@pytest.mark.parametrize("host", [b"[fd00::7]:8000", b"10.1.2.3"])
def test_a_scrape_by_any_ip_form_is_taken(host):
    assert dict(scrape("/metrics", ["mlqueue.example.com"], host)["headers"])[b"host"] == b"mlqueue.example.com"


@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:8000", b"localhost:8000"])
def test_a_scrape_by_a_name_keeps_its_host_so_allowed_hosts_still_refuses_it(host):
    """DNS rebinding: a page on evil.example, re-pointed at 127.0.0.1, must not pass as the site."""
    scope = scrape("/metrics", ["mlqueue.example.com"], host)
    assert dict(scope["headers"])[b"host"] == host and scope["scheme"] == "http"
