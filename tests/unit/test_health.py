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
