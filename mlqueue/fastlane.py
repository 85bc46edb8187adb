"""A lean ASGI lane for the hottest request, the agent heartbeat (2,500 nodes every 5 s).

Django's async handler runs each synchronous middleware hook in its own thread hop; for a
heartbeat that overhead was several times the work. This lane answers heartbeats with one hop
into the same code the DRF view uses (`agents.heartbeats.handle`), the same JSON and the same
error shape; every other request goes to Django unchanged.

Skipping the middleware stack must not skip its protections, so the lane applies, in Django's
order, the checks that would have refused the request there: the Host header against
ALLOWED_HOSTS (CommonMiddleware), the redirect of plain HTTP to HTTPS (SecurityMiddleware),
control characters in the path (mlqueue.middleware), and the body's size, depth and text
(mlqueue.parsers). While Postgres cannot be reached it answers 503 with Retry-After, as
mlqueue.middleware.DatabaseOutages does for Django's requests: the agent keeps its tasks."""

import json
import logging
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils.encoding import escape_uri_path

from agents.heartbeats import handle, refused
from mlqueue.middleware import (
    RETRY_AFTER_S,
    check_path_and_query,
    host_is_allowed,
)
from mlqueue.parsers import loads_body

host_log = logging.getLogger("django.security.DisallowedHost")
HEARTBEAT = re.compile(r"^/api/v1/agents/(?P<name>[^/]+)/heartbeat/?$")
DISALLOWED_HOST = "{host!r} is not an allowed host name for this server (ALLOWED_HOSTS)."


def _answer(name: str, authorization: str, body: bytes) -> tuple[int, dict]:
    try:
        close_old_connections()
        return 200, handle(name, authorization, loads_body(body or b"{}"))
    except Exception as exc:
        return refused(exc, name)
    finally:
        close_old_connections()  # hands the connection back to the pool


def _header(headers: dict, meta_name: str) -> str | None:
    """A header by its Django META name ("HTTP_X_FORWARDED_PROTO"), as Django would read it."""
    value = headers.get(meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode())
    return None if value is None else value.decode("latin1")


def raw_host(scope, headers: dict) -> str:
    if settings.USE_X_FORWARDED_HOST and b"x-forwarded-host" in headers:
        return _header(headers, "HTTP_X_FORWARDED_HOST")
    if b"host" in headers:
        return _header(headers, "HTTP_HOST")
    server = scope.get("server") or ("unknown", None)
    return str(server[0]) if server[1] in (None, 80, 443) else f"{server[0]}:{server[1]}"


def is_secure(scope, headers: dict) -> bool:
    """Django's request.is_secure(): the proxy's header when it is configured and present."""
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = _header(headers, meta_name)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "https"


def https_location(scope, host: str) -> str | None:
    """Where SecurityMiddleware would send this plain-HTTP request, or None to serve it."""
    path = scope["path"]
    if not settings.SECURE_SSL_REDIRECT:
        return None
    if any(re.search(pattern, path.lstrip("/")) for pattern in settings.SECURE_REDIRECT_EXEMPT):
        return None
    query = scope.get("query_string", b"").decode("latin1")
    return f"https://{settings.SECURE_SSL_HOST or host}{escape_uri_path(path)}{'?' + query if query else ''}"


def refusal(scope, headers: dict, *, quiet: bool = False) -> tuple | None:
    """(status, payload[, extra headers]) when Django's middleware would not have served this
    request; None to serve it. `quiet`: the caller hands such a request to Django, which logs it."""
    host = raw_host(scope, headers)
    if not host_is_allowed(host):
        if not quiet:
            host_log.warning("Invalid HTTP_HOST header: %r (heartbeat lane).", host)
        message = DISALLOWED_HOST.format(host=host)
        return 400, {"detail": f"host: {message}", "fields": {"host": [message]}}
    if not is_secure(scope, headers):
        location = https_location(scope, host)
        if location is not None:
            return 301, None, [(b"location", location.encode("latin1", "replace"))]
    problem = check_path_and_query(scope["path"], scope.get("query_string", b"").decode("latin1"))
    if problem is not None:
        return 400, {"detail": f"{problem[0]}: {problem[1]}", "fields": {problem[0]: [problem[1]]}}
    return None


class HeartbeatLane:
    def __init__(self, django_app):
        self.django_app = django_app

    async def __call__(self, scope, receive, send):
        match = HEARTBEAT.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            return await self.django_app(scope, receive, send)
        headers = dict(scope.get("headers", []))
        refused = refusal(scope, headers)
        if refused is not None:
            return await self._send(send, *refused)
        body = await self._body(receive)
        if body is None:
            return await self._send(send, 413, {"detail": "request body too large"})
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
    async def _send(send, status: int, payload: dict | None, extra: list | None = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        headers = [(b"content-length", str(len(body)).encode()), *(extra or [])]
        if payload is not None:
            headers.append((b"content-type", b"application/json"))
        if status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        if status == 503:
            headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
