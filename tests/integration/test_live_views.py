"""The queue and job pages, and the WebSocket that keeps them live: authenticated, origin-checked,
and telling each user only about jobs of teams they may see."""
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from mlqueue.asgi import application
from scheduling import notify
from scheduling.models import Job
from tests.conftest import make_spec


def logged_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


def test_queue_page_lists_visible_jobs_with_reasons(api, demo):
    mine = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    other = api("bob").post("/api/v1/jobs", make_spec(team="production-ranking"), format="json").json()["id"]
    Job.objects.filter(pk=mine).update(pending_reason_code="QUOTA", pending_reason_message="team at 48/48")
    html = logged_in("alice").get("/queue/").content.decode()
    assert f'id="job-{mine}"' in html and f'id="job-{other}"' not in html
    assert "<code>QUOTA</code>" in html and "team at 48/48" in html
    assert "64 x H100" in html
    admin_html = logged_in("ops").get("/queue/?team=production-ranking").content.decode()
    assert f'id="job-{other}"' in admin_html and f'id="job-{mine}"' not in admin_html


def test_queue_page_fragment_for_htmx_and_filters(api, demo):
    first = api("alice").post("/api/v1/jobs", make_spec(client_job_id="a", priority="P1"), format="json").json()["id"]
    api("alice").post("/api/v1/jobs", make_spec(client_job_id="b", priority="P3"), format="json")
    fragment = logged_in("alice").get("/queue/?priority=P1", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.startswith('<div id="queue-table"') and f'id="job-{first}"' in fragment
    assert fragment.count('<tr id="job-') == 1


def test_queue_page_needs_a_login(demo):
    response = Client().get("/queue/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_job_page_explains_a_job_that_cannot_fit_now(api, demo):
    from agents.models import Node

    Node.objects.filter(gpu_type="H100").update(state="CORDONED")
    Node.objects.exclude(gpu_type="H100").update(state="READY")
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    html = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    assert "Why is this job pending?" in html
    assert "<b>0/36</b> nodes have room for one of its tasks" in html
    assert "<td>16</td><td>CORDONED</td>" in html
    assert "fits now on A100" in html
    assert logged_in("bob").get(f"/jobs/{job_id}/").status_code == 404


def test_cancel_from_the_job_page(api, demo):
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    response = logged_in("alice").post(f"/jobs/{job_id}/cancel/", {"reason": "typo"})
    assert response.status_code == 302
    assert Job.objects.get(pk=job_id).state == "CANCELLED"


def socket(client: Client, path: str, origin: bytes = b"http://127.0.0.1") -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(application, path, headers=[(b"origin", origin), (b"cookie", cookie),
                                                             (b"host", b"127.0.0.1")])


@pytest.mark.django_db(transaction=True)
def test_each_user_hears_only_about_jobs_they_may_see(api, demo):
    mine = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    other = api("bob").post("/api/v1/jobs", make_spec(team="production-ranking"), format="json").json()["id"]

    alice_client = logged_in("alice")
    send_changed = sync_to_async(notify._send_changed)

    async def scenario():
        alice = socket(alice_client, "/ws/jobs/")
        assert (await alice.connect())[0]
        await send_changed([mine, other])
        assert await alice.receive_json_from(timeout=5) == {"changed": [mine]}
        await send_changed([other])
        assert await alice.receive_nothing(timeout=0.5)
        await alice.disconnect()

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_websocket_from_a_foreign_origin_or_without_a_login_is_refused(demo):
    alice_client = logged_in("alice")

    async def scenario():
        foreign = socket(alice_client, "/ws/jobs/", origin=b"https://evil.example.com")
        assert (await foreign.connect())[0] is False
        anonymous = WebsocketCommunicator(application, "/ws/jobs/", headers=[(b"origin", b"http://127.0.0.1"),
                                                                             (b"host", b"127.0.0.1")])
        connected, code = await anonymous.connect()
        assert (connected, code) == (False, 4001)  # past the origin check, refused for want of a login
        # Let both consumers end inside the scenario: left running, they were cancelled as the
        # event loop closed, which could hang the test forever (seen once under load).
        await foreign.disconnect()
        await anonymous.disconnect()

    async_to_sync(scenario)()
