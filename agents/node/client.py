"""The agent's side of the agent API: JSON over HTTP(S) with a bearer token, stdlib only.

TLS is the standard library's default: the server's certificate is checked against the
system's CA certificates, or against the bundle SSL_CERT_FILE names (a private CA;
docs/agents.md). A redirect is never followed: urllib would send the bearer token again to
wherever it points, and a plain-HTTP --server answered with a redirect to https has already
sent its token in clear text; the agent says which URL to give instead."""

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request

REDIRECTED = "the server redirects to {location}: use {server} as --server"
REDIRECTED_ELSEWHERE = "the server redirects {url} to {location}: give --server the URL the agent API is served at"
CLEARTEXT = (
    "--server {server} is plain HTTP to another machine: the join token and the node token cross the "
    "network in clear text; use the server's https:// URL"
)


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx reaches the caller as an HTTPError instead of being followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class AgentClient:
    def __init__(self, server: str, *, timeout: float = 10.0):
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.token = ""
        self.opener = urllib.request.build_opener(NoRedirects)

    def post(self, path: str, body: dict, *, token: str | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.server}/api/v1/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token or self.token}"},
        )
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise ApiError(exc.code, self.redirect_detail(path, exc.headers.get("Location") or "")) from None
            detail = exc.read().decode(errors="replace")[:500]
            raise ApiError(exc.code, detail) from None

    def redirect_detail(self, path: str, location: str) -> str:
        """Where a redirect points, and the --server to give: the same API on another base URL
        (http -> https, another host name) says that base."""
        url = f"{self.server}/api/v1/{path}"
        target = urllib.parse.urljoin(url, location)
        suffix, parts = f"/api/v1/{path}", urllib.parse.urlsplit(target)
        if location and parts.path.endswith(suffix) and not parts.query and not parts.fragment:
            return REDIRECTED.format(location=target, server=target.removesuffix(suffix))
        return REDIRECTED_ELSEWHERE.format(url=url, location=target or "nowhere")

    def websocket_url(self, node: str) -> str:
        base = self.server.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return f"{base}/ws/agents/{node}/"


def in_clear_text(server: str) -> bool:
    """Plain HTTP to another machine: what the agent sends (tokens) can be read on the way.
    Loopback (localhost, 127.0.0.0/8, ::1) is this machine: nothing crosses a network."""
    parts = urllib.parse.urlsplit(server)
    if parts.scheme != "http":
        return False
    host = parts.hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return True
