"""The Origin check for browser WebSockets (cross-site WebSocket hijacking).

A browser sends its session cookie with a WebSocket to any site and applies no CORS to it, so
any page the victim visits could open one with their login; the Origin header, which a page
cannot set, is the defence. Channels' AllowedHostsOriginValidator compares only the origin's
host name, so a page from another port of the same host (another service, a notebook server)
passes it. Here the whole origin (scheme, host, port) must be the one the request was sent to
(its Host header; ws -> http, wss -> https, or https when SECURE_PROXY_SSL_HEADER says a TLS
proxy was in front), or be listed in CSRF_TRUSTED_ORIGINS; and the Host must be in
ALLOWED_HOSTS, as Django requires of every HTTP request. No Origin, no socket: only browsers
use these sockets (agents have their own route, authenticated by token)."""

import logging
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain

from mlqueue.middleware import host_is_allowed

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": 80, "https": 443}
REFUSED_LOG = "refused a WebSocket to %s from origin %r (host %r): not this site's origin nor a trusted one"


def parse_origin(value: str) -> tuple[str, str, int] | None:
    """ "https://Example.com" -> ("https", "example.com", 443); None for anything that is not
    a bare http(s) origin (as "null", a path or a user name would be)."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    if parts.path or parts.query or parts.fragment:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def request_origin(scope: dict, headers: dict[str, str]) -> tuple[str, str, int] | None:
    """The origin the client addressed: the Host header, with the socket's scheme."""
    scheme = "https" if scope.get("scheme") == "wss" or _behind_tls_proxy(headers) else "http"
    return parse_origin(f"{scheme}://{headers.get('host', '')}")


def _behind_tls_proxy(headers: dict[str, str]) -> bool:
    if not settings.SECURE_PROXY_SSL_HEADER:
        return False
    meta_name, secure_value = settings.SECURE_PROXY_SSL_HEADER
    value = headers.get(meta_name.removeprefix("HTTP_").lower().replace("_", "-"), "")
    return value.split(",", 1)[0].strip() == secure_value


def is_trusted(origin: tuple[str, str, int]) -> bool:
    """Listed in CSRF_TRUSTED_ORIGINS, whose "https://*.example.com" means any subdomain."""
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        wildcard = "://*." in entry
        trusted = parse_origin(entry.replace("://*.", "://", 1))
        if trusted is None or trusted[0] != scheme or trusted[2] != port:
            continue
        if host == trusted[1] or wildcard and is_same_domain(host, "." + trusted[1]):
            return True
    return False


def origin_allowed(scope: dict) -> bool:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        key = name.decode("latin1").lower()
        if key in headers and key in ("origin", "host"):
            return False  # two of them: which one would the browser have meant?
        headers[key] = value.decode("latin1")
    origin = parse_origin(headers.get("origin", ""))
    if origin is None or not host_is_allowed(headers.get("host", "")):
        return False
    return origin == request_origin(scope, headers) or is_trusted(origin)


class SameOriginValidator:
    """ASGI middleware for the browser sockets: refuses (403 at the handshake) a WebSocket
    whose Origin is not this site's; see the module docstring."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            headers = dict(scope.get("headers", []))
            logger.warning(
                REFUSED_LOG,
                scope.get("path"),
                headers.get(b"origin", b"").decode("latin1"),
                headers.get(b"host", b"").decode("latin1"),
            )
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
