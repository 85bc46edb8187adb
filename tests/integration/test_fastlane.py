"""The lean ASGI lane serves heartbeats exactly as the DRF view does, errors included."""

import json

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import cache

from agents.services import do_register_node
from mlqueue.asgi import application
from mlqueue.fastlane import DISALLOWED_HOST
from mlqueue.middleware import CONTROL_CHARACTER
from mlqueue.parsers import JSON_TOO_DEEP, LONE_SURROGATE, NUL_IN_TEXT

INVENTORY = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 8, "memory_gb": 16}


def call(
    path: str,
    body: bytes,
    authorization: str = "",
    method: str = "POST",
    *,
    host: str = "localhost",
    headers: tuple = (),
    scheme: str = "http",
    query: bytes = b"",
) -> tuple[int, dict, dict]:
    sent = []
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "scheme": scheme,
        "query_string": query,
        "headers": [(b"authorization", authorization.encode()), (b"host", host.encode()), *headers],
    }

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    async_to_sync(application)(scope, receive, send)
    headers = dict(sent[0]["headers"])
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(body) if body else {}, headers


@pytest.mark.django_db(transaction=True)
def test_the_lane_answers_heartbeats_and_refuses_bad_ones():
    cache.clear()
    _, token = do_register_node(name="n1", inventory=INVENTORY)
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": []}', f"Bearer {token}")
    assert status == 200 and body["assignments"] == [] and body["lease_s"] > 0

    status, body, headers = call("/api/v1/agents/n1/heartbeat", b"{}", "Bearer wrong")
    assert (status, body["detail"], headers[b"www-authenticate"]) == (
        401,
        "invalid node token: register again.",
        b"Bearer",
    )
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b"{not json", f"Bearer {token}")
    assert status == 400 and body["detail"].startswith("body: malformed JSON")
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": [{"job_id": "x"}]}', f"Bearer {token}")
    assert status == 400 and "tasks.0.job_id" in body["fields"]
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b"x" * 300_000, f"Bearer {token}")
    assert status == 413


@pytest.fixture
def node_token(transactional_db):
    cache.clear()
    return do_register_node(name="n1", inventory=INVENTORY)[1]


def test_the_lane_refuses_a_host_django_would_refuse(node_token, settings):
    settings.ALLOWED_HOSTS = ["mlqueue.example.com"]
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": []}', f"Bearer {node_token}", host="evil.test")
    assert (status, body["detail"]) == (400, "host: " + DISALLOWED_HOST.format(host="evil.test"))
    status, _, _ = call(
        "/api/v1/agents/n1/heartbeat", b'{"tasks": []}', f"Bearer {node_token}", host="mlqueue.example.com:8443"
    )
    assert status == 200


def test_the_lane_redirects_plain_http_when_django_would(node_token, settings):
    settings.SECURE_SSL_REDIRECT = True
    status, body, headers = call("/api/v1/agents/n1/heartbeat", b"{}", f"Bearer {node_token}", query=b"a=1")
    assert (status, body, headers[b"location"]) == (301, {}, b"https://localhost/api/v1/agents/n1/heartbeat?a=1")
    behind_tls_proxy = ((b"x-forwarded-proto", b"https"),)
    status, _, _ = call("/api/v1/agents/n1/heartbeat", b"{}", f"Bearer {node_token}", headers=behind_tls_proxy)
    assert status == 200
    status, _, _ = call("/api/v1/agents/n1/heartbeat", b"{}", f"Bearer {node_token}", scheme="https")
    assert status == 200
    spoofed = ((b"x-forwarded-proto", b"http, https"),)
    status, _, _ = call("/api/v1/agents/n1/heartbeat", b"{}", f"Bearer {node_token}", headers=spoofed)
    assert status == 301


def test_the_lane_refuses_hostile_bodies_and_paths(node_token):
    deep = b'{"tasks": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    status, body, _ = call("/api/v1/agents/n1/heartbeat", deep, f"Bearer {node_token}")
    assert (status, body["detail"]) == (400, f"body: {JSON_TOO_DEEP}")
    nul = b'{"tasks": [{"job_id": 1, "rank": 0, "attempt": 1, "state": "exited", "signal": "\\u0000"}]}'
    status, body, _ = call("/api/v1/agents/n1/heartbeat", nul, f"Bearer {node_token}")
    assert (status, body["fields"]) == (400, {"tasks.0.signal": [NUL_IN_TEXT]})
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": "\\ud800"}', f"Bearer {node_token}")
    assert (status, body["fields"]) == (400, {"tasks": [LONE_SURROGATE.format(code="U+D800")]})
    status, body, _ = call("/api/v1/agents/n\x00/heartbeat", b"{}", f"Bearer {node_token}")
    assert (status, body["detail"]) == (400, "path: " + CONTROL_CHARACTER.format(code="U+0000"))
