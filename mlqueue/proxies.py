"""The client's address and scheme behind a reverse proxy, taken only from proxies this site trusts.

daphne's `--proxy-headers` believes X-Forwarded-For from whoever reaches the web port, so a
client that connects directly could name any address: pass the /metrics network check
(scheduling/metrics.py) or buy a fresh allowance of the per-address login lockout
(teams/login_limits.py) with every request. The web role therefore runs daphne without it, and
this wrapper, around the whole application (mlqueue/asgi.py), does what uvicorn's
`--forwarded-allow-ips` does, for HTTP and WebSockets alike:

1. The direct peer (scope["client"]; none, a UNIX socket, counts as loopback) is not in
   MLQ_TRUSTED_PROXIES (default: loopback only): the X-Forwarded-* headers are dropped, so
   neither Django (SECURE_PROXY_SSL_HEADER) nor mlqueue/fastlane.py and
   mlqueue/websocket_origin.py read them. The client is the peer.
2. It is: X-Forwarded-For is read from the right, since each proxy appends the address it was
   reached from and only the part a trusted proxy wrote can be believed; trusted hops are
   skipped and the first address that is not trusted is the client. Every hop trusted: the
   leftmost. A hop that is not an IP address ends the walk at the last trusted one: nothing
   to its left can be believed.
3. X-Forwarded-Proto from a trusted peer also sets the scope's scheme (its first value, as
   Django reads it); Django reads the header itself too.
"""

import ipaddress

from django.conf import settings

FORWARDED_HEADERS = frozenset({b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-forwarded-port"})
SCHEMES = {
    "http": {"http": "http", "https": "https"},
    "websocket": {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"},
}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOPBACK = ipaddress.ip_address("127.0.0.1")


def parse_address(text: str) -> Address | None:
    """An X-Forwarded-For hop or a peer as an address: "203.0.113.5", "203.0.113.5:4711",
    "[2001:db8::1]:443" or "::ffff:203.0.113.5" (a dual-stack socket's IPv4 client, as IPv4);
    None for anything else ("unknown", an obfuscated name)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def is_trusted(address: Address | None, trusted) -> bool:
    return address is not None and any(address in network for network in trusted)


def peer_is_trusted(peer: str, trusted) -> bool:
    """No peer address ("") is a UNIX socket, which only this machine reaches: as loopback."""
    return is_trusted(parse_address(peer) if peer else LOOPBACK, trusted)


def forwarded_client(peer: str, forwarded_for: str, trusted) -> str:
    """The client's address for a request from `peer` carrying `forwarded_for` (rules 1 and 2
    of the module docstring)."""
    if not forwarded_for or not peer_is_trusted(peer, trusted):
        return peer
    client = peer
    for hop in reversed([hop.strip() for hop in forwarded_for.split(",") if hop.strip()]):
        address = parse_address(hop)
        if address is None:
            return client
        client = str(address)
        if not is_trusted(address, trusted):
            return client
    return client


def _joined(headers: list, name: bytes) -> str:
    """A header's values, several lines of it joined as one comma-separated list."""
    return ",".join(value.decode("latin-1") for key, value in headers if key == name)


def resolve(scope: dict, trusted) -> dict:
    """The scope as the application should see it (the module docstring's rules)."""
    headers = list(scope.get("headers") or [])
    peer = scope.get("client")
    peer_host = str(peer[0]) if peer else ""
    if not peer_is_trusted(peer_host, trusted):
        return {**scope, "headers": [(key, value) for key, value in headers if key not in FORWARDED_HEADERS]}
    resolved = dict(scope)
    forwarded_for = _joined(headers, b"x-forwarded-for")
    client = forwarded_client(peer_host, forwarded_for, trusted)
    if client != peer_host:
        resolved["client"] = (client, 0)
    proto = _joined(headers, b"x-forwarded-proto").split(",", 1)[0].strip().lower()
    scheme = SCHEMES.get(scope["type"], {}).get(proto)
    if scheme is not None:
        resolved["scheme"] = scheme
    return resolved


class TrustedProxyHeaders:
    """ASGI middleware: the rules of the module docstring, for HTTP and WebSocket scopes."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            scope = resolve(scope, settings.MLQ_TRUSTED_PROXIES)
        return await self.app(scope, receive, send)
