"""/metrics is not public: a bearer token equal to MLQ_METRICS_TOKEN, or a client address in
MLQ_METRICS_ALLOWED_NETWORKS (default loopback only); others get 403, a wrong token 401."""

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from mlqueue.settings import env_networks
from scheduling import metrics
from scheduling.metrics import METRICS_BAD_TOKEN, METRICS_FORBIDDEN

TOKEN = "scrape-7d1f0c9e4b2a8f6d3e5c1a9b7f2d4e6c"


def scrape(address: str = "127.0.0.1", token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
    return Client(REMOTE_ADDR=address).get("/metrics", **headers)


@pytest.fixture
def token(settings):
    settings.MLQ_METRICS_TOKEN = TOKEN


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1"])
def test_loopback_may_scrape_by_default(db, address):
    response = scrape(address)
    assert response.status_code == 200 and b"mlqueue_scheduler_pass_seconds" in response.content


@pytest.mark.parametrize("address", ["203.0.113.5", "10.0.0.1", "::ffff:203.0.113.5", "2001:db8::1", ""])
def test_anyone_else_is_refused(db, address):
    response = scrape(address)
    assert response.status_code == 403
    assert response.content.decode() == METRICS_FORBIDDEN
    assert b"mlqueue_" not in response.content


def test_the_token_opens_it_from_anywhere(db, token):
    assert scrape("203.0.113.5", TOKEN).status_code == 200


@pytest.mark.parametrize(
    "header", [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}", f"Token {TOKEN}"]
)
def test_a_wrong_token_is_401_even_from_an_allowed_network(db, token, header):
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="mlqueue-metrics", error="invalid_token"'
    assert response.content.decode() == METRICS_BAD_TOKEN


def test_without_a_configured_token_no_token_is_accepted(db, settings):
    settings.MLQ_METRICS_TOKEN = ""
    assert scrape("203.0.113.5", "").status_code == 401
    assert scrape("203.0.113.5", "anything").status_code == 401


def test_the_token_is_compared_in_constant_time(db, token, monkeypatch):
    calls = []
    real = metrics.hmac.compare_digest
    monkeypatch.setattr(metrics.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    assert scrape("203.0.113.5", TOKEN).status_code == 200
    assert calls == [(TOKEN.encode(), TOKEN.encode())]


def test_allowed_networks_replace_loopback(db, settings):
    settings.MLQ_METRICS_ALLOWED_NETWORKS = (ipaddress.ip_network("10.20.0.0/16"), ipaddress.ip_network("fd00::/8"))
    assert scrape("10.20.3.4").status_code == 200
    assert scrape("::ffff:10.20.3.4").status_code == 200  # a dual-stack socket's IPv4 client
    assert scrape("fd00::7").status_code == 200
    assert scrape("10.21.0.1").status_code == 403
    assert scrape("127.0.0.1").status_code == 403


@pytest.mark.parametrize(
    "raw, networks",
    [
        (None, ("127.0.0.0/8", "::1/128")),  # unset: loopback
        ("10.0.0.0/8, 192.168.1.0/24", ("10.0.0.0/8", "192.168.1.0/24")),
        ("10.1.2.3", ("10.1.2.3/32",)),
        ("", ()),  # set but empty: token only
    ],
)
def test_the_networks_setting(monkeypatch, raw, networks):
    if raw is None:
        monkeypatch.delenv("MLQ_METRICS_ALLOWED_NETWORKS", raising=False)
    else:
        monkeypatch.setenv("MLQ_METRICS_ALLOWED_NETWORKS", raw)
    parsed = env_networks("MLQ_METRICS_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    assert tuple(str(n) for n in parsed) == networks


@pytest.mark.parametrize(
    "raw, message",
    [
        ("10.0.0.1/8", "MLQ_METRICS_ALLOWED_NETWORKS: 10.0.0.1/8 has host bits set"),
        ("everyone", "MLQ_METRICS_ALLOWED_NETWORKS: 'everyone' does not appear to be an IPv4 or IPv6 network"),
        ("10.0.0.0/33", "MLQ_METRICS_ALLOWED_NETWORKS: '10.0.0.0/33' does not appear to be an IPv4 or IPv6 network"),
    ],
)
def test_a_bad_network_stops_the_server(monkeypatch, raw, message):
    monkeypatch.setenv("MLQ_METRICS_ALLOWED_NETWORKS", raw)
    with pytest.raises(ImproperlyConfigured) as error:
        env_networks("MLQ_METRICS_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    assert str(error.value) == message + " (use CIDRs such as 10.0.0.0/8, comma-separated)"
