"""A lean ASGI lane for the hottest request, the agent heartbeat (2,500 nodes every 5 s).

Django's async handler runs each synchronous middleware hook in its own thread hop; for a
heartbeat that overhead was several times the work. This lane answers heartbeats with one hop
into the same code the DRF view uses (`agents.heartbeats.handle`), the same JSON and the same
error shape; every other request goes to Django unchanged."""
import json
import logging
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from rest_framework import exceptions

from agents.heartbeats import handle
from mlqueue.api_errors import flatten_errors

log = logging.getLogger(__name__)
HEARTBEAT = re.compile(r"^/api/v1/agents/(?P<name>[^/]+)/heartbeat/?$")


def _answer(name: str, authorization: str, body: bytes) -> tuple[int, dict]:
    close_old_connections()
    try:
        return 200, handle(name, authorization, json.loads(body or b"{}"))
    except ValueError as exc:
        return 400, {"detail": f"body: malformed JSON ({exc})"}
    except exceptions.ValidationError as exc:
        fields = flatten_errors(exc.detail)
        first, messages = next(iter(fields.items()))
        return 400, {"detail": f"{first}: {messages[0]}", "fields": fields}
    except exceptions.APIException as exc:
        return exc.status_code, {"detail": str(exc.detail)}
    except Exception:
        log.exception("heartbeat from %s failed", name)
        return 500, {"detail": "internal error"}
    finally:
        close_old_connections()  # hands the connection back to the pool


class HeartbeatLane:
    def __init__(self, django_app):
        self.django_app = django_app

    async def __call__(self, scope, receive, send):
        match = HEARTBEAT.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            return await self.django_app(scope, receive, send)
        body = await self._body(receive)
        if body is None:
            return await self._send(send, 413, {"detail": "request body too large"})
        headers = dict(scope.get("headers", []))
        authorization = headers.get(b"authorization", b"").decode("latin1")
        status, payload = await sync_to_async(_answer, thread_sensitive=True)(match["name"], authorization, body)
        await self._send(send, status, payload)

    @staticmethod
    async def _body(receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
                return None
            if not message.get("more_body"):
                return b"".join(chunks)

    @staticmethod
    async def _send(send, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
