"""`GET /healthz`: the web process's liveness and readiness probe (deploy/k8s, deploy/compose.yaml).

Answered at the ASGI layer, before Django: a probe comes over plain HTTP with the pod's address
as its Host header, which ALLOWED_HOSTS and the HTTPS redirect would refuse, and it must stay
cheap at one request per pod every few seconds. It says only that this process's event loop
serves requests. It deliberately does not query Postgres or Redis: during a store outage the web
tier answers 503 with Retry-After (mlqueue/middleware.py) and agents keep their tasks; a probe
that failed then would take every web pod out of the Service at once and restart them all, which
helps nothing. The scheduler's own liveness is a file its loop touches (run_scheduler
--health-file)."""

import ipaddress
import json

HEALTH_PATHS = frozenset({"/healthz", "/healthz/"})
# A Prometheus inside the cluster scrapes each web pod by its address, over plain HTTP, as it
# probes it: the Host is the pod's address and there is no TLS. /metrics guards itself (a bearer
# token or MLQ_METRICS_ALLOWED_NETWORKS, scheduling/metrics.py) and makes no URL from the Host,
# so such a scrape goes to Django as if for the site's own name over HTTPS rather than be refused
# by ALLOWED_HOSTS or redirected. Only for a Host that is an IP address: a name not allowed stays
# refused, or a page on a name re-pointed at 127.0.0.1 (DNS rebinding) could read /metrics from
# an address its network check lets in.
METRICS_PATHS = frozenset({"/metrics", "/metrics/"})
BODY = json.dumps({"status": "ok"}).encode()
HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]


def site_host(allowed_hosts: list[str]) -> bytes | None:
    """The first name ALLOWED_HOSTS names outright (not "*", not a ".domain" pattern)."""
    named = [host for host in allowed_hosts if host != "*" and not host.startswith(".")]
    return named[0].encode() if named else None


def ip_host(scope: dict) -> bool:
    """Whether the request's Host is an IP address (with or without a port), not a name."""
    host = next((value for name, value in scope.get("headers", []) if name == b"host"), b"").decode("latin-1")
    if host.startswith("["):  # [v6]:port
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def as_scrape(scope: dict, host: bytes | None) -> dict:
    if host is None or not ip_host(scope):
        return scope
    headers = [(name, value) for name, value in scope.get("headers", []) if name != b"host"]
    return {**scope, "headers": [*headers, (b"host", host)], "scheme": "https"}


class HealthLane:
    def __init__(self, app, allowed_hosts: list[str] | None = None):
        self.app = app
        self.scrape_host = site_host(allowed_hosts or [])

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("path") in METRICS_PATHS:
            return await self.app(as_scrape(scope, self.scrape_host), receive, send)
        if scope["type"] != "http" or scope.get("path") not in HEALTH_PATHS:
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD"):
            return await self._send(send, 405, b"", [(b"allow", b"GET, HEAD")])
        await self._send(send, 200, b"" if scope["method"] == "HEAD" else BODY, HEADERS)

    @staticmethod
    async def _send(send, status: int, body: bytes, headers: list) -> None:
        length = str(len(BODY) if status == 200 else len(body)).encode()
        await send(
            {"type": "http.response.start", "status": status, "headers": [*headers, (b"content-length", length)]}
        )
        await send({"type": "http.response.body", "body": body})
