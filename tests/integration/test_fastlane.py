"""The lean ASGI lane serves heartbeats exactly as the DRF view does, errors included."""
import json

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import cache

from agents.services import do_register_node
from mlqueue.asgi import application

INVENTORY = {"zone": "z1", "rack": "r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 8, "memory_gb": 16}


def call(path: str, body: bytes, authorization: str = "", method: str = "POST") -> tuple[int, dict, dict]:
    sent = []
    scope = {"type": "http", "method": method, "path": path, "headers": [(b"authorization", authorization.encode())]}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    async_to_sync(application)(scope, receive, send)
    headers = dict(sent[0]["headers"])
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:])), headers


@pytest.mark.django_db(transaction=True)
def test_the_lane_answers_heartbeats_and_refuses_bad_ones():
    cache.clear()
    _, token = do_register_node(name="n1", inventory=INVENTORY)
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": []}', f"Bearer {token}")
    assert status == 200 and body["assignments"] == [] and body["lease_s"] > 0

    status, body, headers = call("/api/v1/agents/n1/heartbeat", b"{}", "Bearer wrong")
    assert (status, body["detail"], headers[b"www-authenticate"]) == (401, "invalid node token: register again.",
                                                                        b"Bearer")
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b"{not json", f"Bearer {token}")
    assert status == 400 and body["detail"].startswith("body: malformed JSON")
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b'{"tasks": [{"job_id": "x"}]}', f"Bearer {token}")
    assert status == 400 and "tasks.0.job_id" in body["fields"]
    status, body, _ = call("/api/v1/agents/n1/heartbeat", b"x" * 300_000, f"Bearer {token}")
    assert status == 413
