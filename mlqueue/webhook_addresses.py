"""Where a webhook may go: no SSRF.

A webhook URL is checked twice: at submit (its form and its host, no DNS: a name that does not
resolve yet is no reason to refuse a job) and at send time, where the host is resolved and
every address it resolves to is checked. The request then goes to the checked address itself
(with the host name in the Host header and the TLS SNI), so a second lookup that answers
otherwise (DNS rebinding) is never made.

An address is refused when it is not globally routable (loopback, link-local, private, shared,
reserved, unspecified) or multicast, unless it lies in a network an admin allows
(MLQ_WEBHOOK_ALLOWED_NETWORKS). IPv6 forms that embed an IPv4 address (mapped, 6to4, Teredo,
NAT64) are checked by that address too. Host names must match MLQ_WEBHOOK_ALLOWED_HOSTS, and
IP literals must be written the usual way: "2130706433", "0x7f.1" or "0177.0.0.1" (forms
that resolvers read as 127.0.0.1) are refused, not interpreted."""

import ipaddress
import socket
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

NOT_HTTP = "must be an http:// or https:// URL"
NO_HOST = "has no host"
HAS_CREDENTIALS = "must not carry a user name or password (the body is signed instead)"
BAD_PORT = "has a port that is not a number from 1 to 65535"
NOT_CANONICAL = "{host!r} is an IP address written in an unusual form; write it as {canonical}"
HOST_NOT_ALLOWED = "{host} is not a host webhooks may go to (an admin allows hosts with MLQ_WEBHOOK_ALLOWED_HOSTS)"
ADDRESS_REFUSED = "{host} is {address}, a {kind} address, where webhooks may not go"
UNRESOLVED = "{host} does not resolve ({error})"
BAD_CHARACTER = (
    "contains {char} ({code}), a control character or white space: percent-encode it (a space is %20) or remove it"
)
NOT_ASCII_HOST = "{host!r} is not an ASCII host name: write it in its punycode form ({punycode})"
MAX_URL_LENGTH = 2000


class WebhookRefused(ValueError):
    """The URL may not be called; the message says why. `final`: asking again will not help
    (a host or address refused), as opposed to a name that did not resolve this time."""

    def __init__(self, message: str, *, final: bool = True):
        super().__init__(message)
        self.final = final


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str  # lower case, no trailing dot; an IPv6 literal without its brackets
    port: int
    target: str  # path and query, at least "/"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def url_for(self, address: Address) -> str:
        """This endpoint's URL with the host replaced by the checked address."""
        host = f"[{address}]" if address.version == 6 else str(address)
        return f"{self.scheme}://{host}:{self.port}{self.target}"


def parse_endpoint(url: str) -> Endpoint:
    """The URL's parts, or WebhookRefused for what is not a plain http(s) URL."""
    url = url.strip()
    _check_characters(url)
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open ("http://[")
        raise WebhookRefused(NOT_HTTP) from None
    if parts.scheme not in ("http", "https") or len(url) > MAX_URL_LENGTH:
        raise WebhookRefused(NOT_HTTP)
    if parts.username is not None or parts.password is not None:
        raise WebhookRefused(HAS_CREDENTIALS)
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise WebhookRefused(NO_HOST)
    if not host.isascii():
        raise WebhookRefused(NOT_ASCII_HOST.format(host=host, punycode=_punycode(host)))
    try:
        port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookRefused(BAD_PORT) from None
    if not 1 <= port <= 65535:
        raise WebhookRefused(BAD_PORT)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(parts.scheme, host, port, target)


def _check_characters(url: str) -> None:
    """No control character, white space or invisible format character: urlsplit keeps some of
    them (a tab in the port, a newline in the path) and the HTTP client then fails on every try."""
    for char in url:
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise WebhookRefused(BAD_CHARACTER.format(char=repr(char), code=f"U+{ord(char):04X}"))


def _punycode(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:  # a label the IDNA codec refuses (too long, empty)
        return "xn--..."


def literal_address(host: str) -> Address | None:
    """The IP address `host` is written as, or None for a name. Forms other than the usual
    dotted quad or IPv6 text (decimal, hex, octal, shortened) raise WebhookRefused."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        packed = socket.inet_aton(host)  # what C resolvers accept: "2130706433", "0x7f.1", "127.1"
    except (OSError, ValueError):
        return None
    raise WebhookRefused(NOT_CANONICAL.format(host=host, canonical=ipaddress.IPv4Address(packed)))


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` matches one of the admin's patterns: "*" (any host), "*.example.com"
    (its subdomains), or a host name or IP address written out."""
    host = host.lower()
    for pattern in patterns:
        pattern = pattern.strip().lower().rstrip(".")
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
            return True
    return False


def embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (mapped, 6to4, Teredo, NAT64): a packet to it
    may reach them."""
    if address.version == 4:
        return []
    found = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if address in NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    # A Teredo server of 0.0.0.0 is no destination (and would name the refusal "unspecified").
    return [ip for ip in found if ip is not None and not ip.is_unspecified]


NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Not globally routable, though this Python's is_global says so: IETF protocol assignments (less
# the two anycast services IANA marks global) and IPv6 site-local addresses (deprecated, still
# routed inside sites).
NOT_GLOBAL = (ipaddress.ip_network("192.0.0.0/24"), ipaddress.ip_network("fec0::/10"))
GLOBAL_ANYCAST = frozenset(map(ipaddress.ip_address, ("192.0.0.9", "192.0.0.10")))


def address_kind(address: Address) -> str | None:
    """Why webhooks may not go to this address ("loopback", "private", ...), or None when it is
    a public unicast address."""
    if address.version == 6 and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%")[0])
    for name in ("loopback", "link_local", "unspecified", "multicast", "reserved", "private"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if not address.is_global or (
        address not in GLOBAL_ANYCAST and any(address.version == net.version and address in net for net in NOT_GLOBAL)
    ):
        return "not globally routable"
    return None


def refusal(address: Address, allowed_networks: Iterable[Network]) -> str | None:
    """The kind of address that makes `address` refused (checking the IPv4 it embeds too), or
    None. An address in one of the admin's networks is allowed whatever its kind."""
    networks = list(allowed_networks)
    embedded = embedded_ipv4(address)
    for ip in (*embedded, address):  # the IPv4 first: it names the real destination
        if any(ip.version == net.version and ip in net for net in networks):
            continue
        if ip is address and address.version == 6 and address in NAT64 and embedded:
            continue  # a NAT64 address is its IPv4's translation, judged above (DNS64 clusters)
        kind = address_kind(ip)
        if kind is not None:
            return kind if ip is address else f"{kind} (as {ip})"
    return None


def check_endpoint(url: str, *, allowed_hosts: Iterable[str], allowed_networks: Iterable[Network]) -> Endpoint:
    """The checks that need no DNS: the URL's form, its host against the admin's patterns, and an
    IP literal's range. Used at submit; check_destination repeats them at send time."""
    endpoint = parse_endpoint(url)
    literal = literal_address(endpoint.host)
    if not host_allowed(endpoint.host, allowed_hosts):
        raise WebhookRefused(HOST_NOT_ALLOWED.format(host=endpoint.host))
    if literal is not None:
        kind = refusal(literal, allowed_networks)
        if kind is not None:
            raise WebhookRefused(ADDRESS_REFUSED.format(host=endpoint.host, address=literal, kind=kind))
    return endpoint


def system_resolve(host: str, port: int) -> list[Address]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]


@dataclass(frozen=True)
class Destination:
    endpoint: Endpoint
    address: Address  # where to connect: checked, with every other address the host resolved to


def check_destination(
    url: str,
    *,
    allowed_hosts: Iterable[str],
    allowed_networks: Iterable[Network],
    resolve: Callable[[str, int], list[Address]] = system_resolve,
) -> Destination:
    """Everything check_endpoint checks, then the host resolved and every address checked: one
    refused address refuses the host (a resolver may answer with any of them next time)."""
    networks = list(allowed_networks)
    endpoint = check_endpoint(url, allowed_hosts=allowed_hosts, allowed_networks=networks)
    try:
        addresses = resolve(endpoint.host, endpoint.port)
    except (OSError, UnicodeError) as exc:
        raise WebhookRefused(UNRESOLVED.format(host=endpoint.host, error=exc), final=False) from None
    if not addresses:
        raise WebhookRefused(UNRESOLVED.format(host=endpoint.host, error="no addresses"), final=False)
    for address in addresses:
        kind = refusal(address, networks)
        if kind is not None:
            raise WebhookRefused(ADDRESS_REFUSED.format(host=endpoint.host, address=address, kind=kind))
    return Destination(endpoint, addresses[0])
