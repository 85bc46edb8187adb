"""Where webhooks may go (mlqueue/webhook_addresses.py): no database, no network (the resolver is
passed in). Every refusal is asserted by its exact message."""

import ipaddress

import pytest

from mlqueue.webhook_addresses import (
    ADDRESS_REFUSED,
    BAD_PORT,
    HAS_CREDENTIALS,
    HOST_NOT_ALLOWED,
    NO_HOST,
    NOT_CANONICAL,
    NOT_HTTP,
    UNRESOLVED,
    WebhookRefused,
    check_destination,
    check_endpoint,
    host_allowed,
    parse_endpoint,
    refusal,
)

ip = ipaddress.ip_address
ANY_HOST = ["*"]


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "not globally routable"),  # carrier-grade NAT
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        # IPv6 forms that carry an IPv4 address are judged by it
        ("::ffff:127.0.0.1", "loopback (as 127.0.0.1)"),
        ("::ffff:169.254.169.254", "link-local (as 169.254.169.254)"),
        ("::ffff:10.0.0.1", "private (as 10.0.0.1)"),
        ("2002:7f00:1::", "loopback (as 127.0.0.1)"),  # 6to4
        ("2002:a9fe:a9fe::1", "link-local (as 169.254.169.254)"),
        ("64:ff9b::7f00:1", "loopback (as 127.0.0.1)"),  # NAT64
        ("64:ff9b::a00:1", "private (as 10.0.0.1)"),
        # public unicast
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:93.184.216.34", "reserved"),  # mapped public: the v6 form itself is not routable
        # QA: what Python's is_global lets through, and a NAT64 translation of a public address
        ("fec0::1", "not globally routable"),  # IPv6 site-local
        ("192.0.0.8", "not globally routable"),  # IETF protocol assignments
        ("192.0.0.9", None),  # ... but for the two anycast services IANA marks global
        ("64:ff9b::808:808", None),  # 8.8.8.8 through a DNS64/NAT64 gateway
        ("2001::a9fe:a9fe", "private"),  # Teredo: not "unspecified (as 0.0.0.0)" for its server
    ],
)
def test_refusal_by_kind_of_address(address, kind):
    assert refusal(ip(address), []) == kind


@pytest.mark.parametrize(
    ("address", "networks", "kind"),
    [
        ("127.0.0.1", ["127.0.0.1/32"], None),
        ("127.0.0.2", ["127.0.0.1/32"], "loopback"),
        ("10.20.3.4", ["10.20.0.0/16"], None),
        ("10.21.3.4", ["10.20.0.0/16"], "private"),
        # a mapped address of an allowed network: the IPv4 passes, the v6 form does not
        ("::ffff:10.20.3.4", ["10.20.0.0/16"], "reserved"),
        ("::ffff:10.20.3.4", ["10.20.0.0/16", "::ffff:0:0/96"], None),
        ("::1", ["127.0.0.0/8"], "loopback"),  # an IPv4 network never allows an IPv6 address
    ],
)
def test_networks_an_admin_allows(address, networks, kind):
    assert refusal(ip(address), [ipaddress.ip_network(net) for net in networks]) == kind


@pytest.mark.parametrize(
    ("host", "canonical"),
    [
        ("2130706433", "127.0.0.1"),  # decimal
        ("0x7f000001", "127.0.0.1"),  # hex
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("127.1", "127.0.0.1"),  # shortened
        ("017700000001", "127.0.0.1"),
        ("3232235777", "192.168.1.1"),
        ("2852039166", "169.254.169.254"),
    ],
)
def test_ip_addresses_written_unusually_are_refused_not_read(host, canonical):
    with pytest.raises(WebhookRefused) as refused:
        check_endpoint(f"http://{host}/hook", allowed_hosts=ANY_HOST, allowed_networks=[])
    assert str(refused.value) == NOT_CANONICAL.format(host=host, canonical=canonical)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://hooks.example.com/x", NOT_HTTP),
        ("http://[", NOT_HTTP),  # a bracket left open: urlsplit's ValueError was a 500
        ("https://[bad", NOT_HTTP),
        ("http://]/", NOT_HTTP),
        ("file:///etc/passwd", NOT_HTTP),
        ("gopher://127.0.0.1:6379/_FLUSHALL", NOT_HTTP),
        ("hooks.example.com/x", NOT_HTTP),
        ("https://", NO_HOST),
        ("https://user:pw@hooks.example.com/x", HAS_CREDENTIALS),
        ("https://hooks.example.com@127.0.0.1/x", HAS_CREDENTIALS),
        ("https://hooks.example.com:99999/x", BAD_PORT),
        ("https://hooks.example.com:0/x", BAD_PORT),
        ("https://hooks.example.com:http/x", BAD_PORT),
        ("https://" + "a" * 2000 + ".com/", NOT_HTTP),
    ],
)
def test_urls_that_are_not_plain_http(url, message):
    with pytest.raises(WebhookRefused) as refused:
        parse_endpoint(url)
    assert str(refused.value) == message


def test_parts_of_an_endpoint():
    endpoint = parse_endpoint("https://Hooks.Example.com./a/b?x=1")
    assert (endpoint.scheme, endpoint.host, endpoint.port, endpoint.target) == (
        "https",
        "hooks.example.com",
        443,
        "/a/b?x=1",
    )
    assert endpoint.host_header == "hooks.example.com"
    assert endpoint.url_for(ip("93.184.216.34")) == "https://93.184.216.34:443/a/b?x=1"
    v6 = parse_endpoint("http://[2606:4700::1]:8080")
    assert (v6.host, v6.port, v6.target, v6.host_header) == ("2606:4700::1", 8080, "/", "[2606:4700::1]:8080")
    assert v6.url_for(ip("2606:4700::1")) == "http://[2606:4700::1]:8080/"


@pytest.mark.parametrize(
    ("host", "patterns", "allowed"),
    [
        ("hooks.example.com", ["hooks.example.com"], True),
        ("HOOKS.example.com", ["hooks.example.com."], True),
        ("a.hooks.example.com", ["hooks.example.com"], False),
        ("a.example.com", ["*.example.com"], True),
        ("a.b.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("evilexample.com", ["*.example.com"], False),
        ("example.com.evil.net", ["*.example.com"], False),
        ("anything.net", ["*"], True),
        ("anything.net", [], False),
        ("127.0.0.1", ["127.0.0.1"], True),
    ],
)
def test_host_patterns(host, patterns, allowed):
    assert host_allowed(host, patterns) is allowed


def test_a_host_not_allowed_is_refused_before_any_lookup():
    def resolve(host, port):
        raise AssertionError("no lookup for a host that is not allowed")

    with pytest.raises(WebhookRefused) as refused:
        check_destination(
            "https://evil.example.net/x", allowed_hosts=["hooks.example.com"], allowed_networks=[], resolve=resolve
        )
    assert str(refused.value) == HOST_NOT_ALLOWED.format(host="evil.example.net")
    assert refused.value.final


def test_an_ip_literal_is_checked_without_dns():
    with pytest.raises(WebhookRefused) as refused:
        check_endpoint("http://[::ffff:127.0.0.1]:8000/x", allowed_hosts=ANY_HOST, allowed_networks=[])
    assert str(refused.value) == ADDRESS_REFUSED.format(
        host="::ffff:127.0.0.1", address="::ffff:7f00:1", kind="loopback (as 127.0.0.1)"
    )


def test_every_address_a_name_resolves_to_is_checked():
    """A name with one public and one private address is refused: a resolver may hand out either
    (and a rebinding one hands out the public one first)."""

    def resolve(host, port):
        return [ip("93.184.216.34"), ip("10.0.0.7")]

    with pytest.raises(WebhookRefused) as refused:
        check_destination("https://hooks.example.com/x", allowed_hosts=ANY_HOST, allowed_networks=[], resolve=resolve)
    assert str(refused.value) == ADDRESS_REFUSED.format(host="hooks.example.com", address="10.0.0.7", kind="private")
    assert refused.value.final


def test_the_destination_is_the_checked_address():
    destination = check_destination(
        "https://hooks.example.com:8443/x",
        allowed_hosts=["*.example.com"],
        allowed_networks=[],
        resolve=lambda host, port: [ip("93.184.216.34"), ip("2606:2800:220:1::")],
    )
    assert destination.address == ip("93.184.216.34")
    assert destination.endpoint.url_for(destination.address) == "https://93.184.216.34:8443/x"
    assert destination.endpoint.host_header == "hooks.example.com:8443"


def test_a_name_that_does_not_resolve_is_worth_another_try():
    def resolve(host, port):
        raise OSError("Name or service not known")

    with pytest.raises(WebhookRefused) as refused:
        check_destination("https://hooks.example.com/x", allowed_hosts=ANY_HOST, allowed_networks=[], resolve=resolve)
    assert str(refused.value) == UNRESOLVED.format(host="hooks.example.com", error="Name or service not known")
    assert not refused.value.final
