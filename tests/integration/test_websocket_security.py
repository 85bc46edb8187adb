"""Browser WebSockets: only from this site's own origin (scheme, host and port), and a socket
that outlives its user's rights stops hearing about their old teams, or closes."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from mlqueue.asgi import application
from mlqueue.websocket_origin import origin_allowed
from scheduling import notify
from scheduling.web import consumers
from scheduling.web.consumers import LOGIN_ENDED
from teams.models import Membership
from tests.conftest import make_spec


def scope(origin: str | None, host: str | None, scheme: str = "ws", **extra: str) -> dict:
    headers = [
        (name.encode(), value.encode())
        for name, value in [("origin", origin), ("host", host), *extra.items()]
        if value is not None
    ]
    return {"type": "websocket", "scheme": scheme, "path": "/ws/jobs/", "headers": headers}


@pytest.mark.parametrize(
    "origin, host, scheme, extra, allowed",
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", "ws", {}, True),
        ("http://127.0.0.1:9999", "127.0.0.1:8000", "ws", {}, False),  # another service on the same host
        ("http://127.0.0.1", "127.0.0.1:80", "ws", {}, True),  # default ports
        ("http://127.0.0.1:8000", "127.0.0.1", "ws", {}, False),
        ("https://127.0.0.1:8000", "127.0.0.1:8000", "ws", {}, False),  # scheme differs
        ("https://localhost", "localhost", "wss", {}, True),
        ("http://localhost", "localhost", "wss", {}, False),
        ("https://localhost", "localhost", "ws", {"x-forwarded-proto": "https"}, True),  # TLS proxy in front
        ("http://LOCALHOST:8000", "localhost:8000", "ws", {}, True),
        ("http://[::1]:8000", "[::1]:8000", "ws", {}, True),
        ("https://evil.example.com", "127.0.0.1", "ws", {}, False),
        ("http://evil.example.com", "evil.example.com", "ws", {}, False),  # same origin, host not allowed (rebinding)
        ("null", "127.0.0.1", "ws", {}, False),
        (None, "127.0.0.1", "ws", {}, False),
        ("http://127.0.0.1", None, "ws", {}, False),
        ("http://127.0.0.1/path", "127.0.0.1", "ws", {}, False),
        ("http://user@127.0.0.1", "127.0.0.1", "ws", {}, False),
        ("http://127.0.0.1:99999", "127.0.0.1:99999", "ws", {}, False),
        ("ftp://127.0.0.1", "127.0.0.1", "ws", {}, False),
    ],
)
def test_the_origin_must_be_this_sites_own(origin, host, scheme, extra, allowed):
    assert origin_allowed(scope(origin, host, scheme, **extra)) is allowed


@pytest.mark.parametrize(
    "origin, allowed",
    [
        ("https://ui.example.com", True),
        ("https://ui.example.com:8443", False),
        ("http://ui.example.com", False),
        ("https://a.corp.example.net", True),
        ("https://corp.example.net.evil.com", False),
    ],
)
def test_csrf_trusted_origins_are_trusted(settings, origin, allowed):
    settings.CSRF_TRUSTED_ORIGINS = ["https://ui.example.com", "https://*.corp.example.net"]
    assert origin_allowed(scope(origin, "127.0.0.1:8000")) is allowed


def test_a_trusted_origin_still_needs_an_allowed_host(settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://ui.example.com"]
    assert origin_allowed(scope("https://ui.example.com", "attacker.example.org")) is False


def test_two_origin_headers_are_refused():
    twice = scope("http://127.0.0.1", "127.0.0.1")
    twice["headers"].append((b"origin", b"https://evil.example.com"))
    assert origin_allowed(twice) is False


def logged_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


def socket(client: Client, path: str, origin: bytes, host: bytes) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(application, path, headers=[(b"origin", origin), (b"cookie", cookie), (b"host", host)])


@pytest.mark.django_db(transaction=True)
def test_a_page_on_another_port_cannot_open_the_socket(demo):
    alice = logged_in("alice")

    async def scenario():
        foreign = socket(alice, "/ws/jobs/", b"http://127.0.0.1:9999", b"127.0.0.1:8000")
        assert (await foreign.connect())[0] is False
        own = socket(alice, "/ws/jobs/", b"http://127.0.0.1:8000", b"127.0.0.1:8000")
        assert (await own.connect())[0] is True
        await own.disconnect()
        await foreign.disconnect()  # ends inside the scenario, not cancelled as the loop closes

    async_to_sync(scenario)()


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(consumers, "clock", lambda: now[0])
    return now


def alices_socket(api):
    job = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    return job, socket(logged_in("alice"), "/ws/jobs/", b"http://127.0.0.1", b"127.0.0.1")


send_changed = sync_to_async(notify._send_changed)


@pytest.mark.django_db(transaction=True)
def test_a_member_removed_from_a_team_stops_hearing_about_it_within_the_recheck(api, demo, clock, settings):
    settings.MLQ_WS_RECHECK_S = 30
    job, alice = alices_socket(api)

    async def scenario():
        assert (await alice.connect())[0]
        await sync_to_async(Membership.objects.filter(user__username="alice").delete)()
        clock[0] += 29  # within the recheck interval the cached teams still apply (no query per event)
        await send_changed([job])
        assert await alice.receive_json_from(timeout=5) == {"changed": [job]}
        clock[0] += 1
        await send_changed([job])
        assert await alice.receive_nothing(timeout=0.5)
        await alice.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_new_membership_is_heard_after_the_recheck(api, demo, clock):
    job = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    victor = socket(logged_in("victor"), "/ws/jobs/", b"http://127.0.0.1", b"127.0.0.1")

    async def scenario():
        assert (await victor.connect())[0]
        await send_changed([job])
        assert await victor.receive_nothing(timeout=0.5)
        await sync_to_async(
            lambda: Membership.objects.create(
                user=get_user_model().objects.get(username="victor"),
                team_id=Membership.objects.filter(user__username="alice").values_list("team_id", flat=True).get(),
            )
        )()
        clock[0] += 30
        await send_changed([job])
        assert await victor.receive_json_from(timeout=5) == {"changed": [job]}
        await victor.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["deactivated", "logged out", "password changed"])
def test_a_socket_whose_login_ended_is_closed(api, demo, clock, how):
    job = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    client = logged_in("alice")
    alice = socket(client, "/ws/jobs/", b"http://127.0.0.1", b"127.0.0.1")

    def end_login():
        user = get_user_model().objects.get(username="alice")
        if how == "deactivated":
            user.is_active = False
            user.save()
        elif how == "logged out":
            client.logout()
        else:
            user.set_password("a-new-password-9")
            user.save()

    async def scenario():
        assert (await alice.connect())[0]
        await sync_to_async(end_login)()
        clock[0] += 30
        await send_changed([job])
        assert await alice.receive_output(timeout=5) == {"type": "websocket.close", "code": LOGIN_ENDED}
        await alice.disconnect()

    async_to_sync(scenario)()
