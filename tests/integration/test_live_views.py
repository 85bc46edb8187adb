"""The queue and job pages, and the WebSocket that keeps them live: authenticated, origin-checked,
and telling each user only about jobs of teams they may see."""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mlqueue.asgi import application
from scheduling import notify
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.web.explanations import HIGHER_LIMIT, QUOTA_WAIT, WOULD_START
from teams.models import Quota
from tests.conftest import make_spec
from tests.nodes import cordon, heartbeat

# A quota wait of a job that fits the free room, its figures not in its reason.
ROOM_FOR_A_HIGHER_LIMIT = QUOTA_WAIT.format(quota="its team's quota") + WOULD_START.format(
    help=HIGHER_LIMIT.format(lead="from a lead of its team")
)

EPOCH = 7


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


def pass_as_leader() -> None:
    """One scheduler pass, run as the leader of EPOCH (see tests/integration/test_scheduler_pass.py)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=EPOCH, holder="test:1", renewed_at=timezone.now())
    run_pass(epoch=EPOCH)


def an_h100_job_with_no_h100_ready(api) -> int:
    heartbeat()
    cordon(Node.objects.filter(gpu_type="H100"))
    return api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]


def test_job_page_explains_a_job_that_cannot_fit_now(api, demo):
    job_id = an_h100_job_with_no_h100_ready(api)
    pass_as_leader()
    html = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    assert "Why is this job pending?" in html
    assert "<b>0/36</b> nodes have room for one of its tasks" in html
    assert "<td>16</td><td>CORDONED</td>" in html
    assert "What would help?" in html and "fits now on A100" not in html  # only when asked
    help_html = logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode()
    assert "fits now on A100" in help_html
    assert logged_in("bob").get(f"/jobs/{job_id}/").status_code == 404


def test_another_gpu_type_is_suggested_only_where_the_teams_quota_lets_the_job_start(api, demo):
    """QA: "fits now on A100" for a team whose A100 limit (4) is below the job's 8 GPUs."""
    job_id = an_h100_job_with_no_h100_ready(api)
    quota = Quota.objects.filter(team__name="research-foundation-models", resource_class="gpu:A100")
    quota.update(guaranteed=0, borrowing_limit=4)
    said = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    assert "fits now on A100" not in said
    quota.update(borrowing_limit=8)
    assert "fits now on A100" in api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    dry = api("alice").post("/api/v1/jobs/dry-run", make_spec(resources={"gpu_count": 8}), format="json").json()
    assert "fits now on A100" in dry["suggestions"]
    quota.update(borrowing_limit=4)
    dry = api("alice").post("/api/v1/jobs/dry-run", make_spec(resources={"gpu_count": 8}), format="json").json()
    assert "fits now on A100" not in dry["suggestions"]


def test_what_would_help_is_asked_for_and_follows_the_job_page_s_visibility(api, demo):
    job_id = an_h100_job_with_no_h100_ready(api)
    response = logged_in("alice").get(f"/jobs/{job_id}/help/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert '<ul class="small" id="suggestions">' in response.content.decode()
    assert "<li>fits now on A100</li>" in response.content.decode()
    assert logged_in("bob").get(f"/jobs/{job_id}/help/").status_code == 404
    assert logged_in("alice").get("/jobs/999999/help/").status_code == 404
    anonymous = Client().get(f"/jobs/{job_id}/help/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    Job.objects.filter(pk=job_id).update(state="CANCELLED")
    assert "is no longer pending" in logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode()


def test_a_job_whose_reason_is_not_about_room_gets_a_sentence_not_a_count(api, demo):
    job_id = an_h100_job_with_no_h100_ready(api)
    client = logged_in("alice")
    assert "The scheduler has not looked at it yet." in client.get(f"/jobs/{job_id}/panel/").content.decode()
    Job.objects.filter(pk=job_id).update(held=True)
    pass_as_leader()
    html = client.get(f"/jobs/{job_id}/panel/").content.decode()
    assert "<code>HELD</code>" in html and "nodes have room" not in html
    assert "No node count for this reason" in html


def add_nodes_and_running_tasks(api, count: int) -> None:
    """`count` more READY CPU nodes, each running one task of a job of bob's."""
    nodes = Node.objects.bulk_create(
        Node(name=f"extra-{i:03d}", zone="z1", rack="z1-r9", cpu_count=64, memory_gb=256) for i in range(count)
    )
    heartbeat(nodes)
    spec = make_spec(
        team="production-ranking",
        client_job_id="extra",
        resources={"gpu_count": 0, "gpu_type": None, "tasks": count, "cpu_per_rank": 1, "memory_per_rank_gb": 1},
    )
    response = api("bob").post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    for task, node in zip(job.tasks.order_by("rank"), nodes, strict=True):
        Task.objects.filter(pk=task.pk).update(state="RUNNING", node=node, epoch=EPOCH, started_at=timezone.now())
    Job.objects.filter(pk=job.pk).update(state="RUNNING")
    assert Task.objects.filter(state="RUNNING").count() == count


def rendered(client: Client, path: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200
    return response.content.decode(), [q["sql"] for q in queries.captured_queries]


def test_the_job_page_reads_the_pass_s_count_in_queries_that_do_not_grow_with_the_cluster(api, demo):
    job_id = an_h100_job_with_no_h100_ready(api)
    pass_as_leader()
    client = logged_in("alice")
    page, page_queries = rendered(client, f"/jobs/{job_id}/")
    panel, panel_queries = rendered(client, f"/jobs/{job_id}/panel/")
    assert "<b>0/36</b> nodes have room" in page and "<b>0/36</b> nodes have room" in panel

    add_nodes_and_running_tasks(api, 50)
    page, more_page_queries = rendered(client, f"/jobs/{job_id}/")
    panel, more_panel_queries = rendered(client, f"/jobs/{job_id}/panel/")
    assert (len(more_page_queries), len(more_panel_queries)) == (len(page_queries), len(panel_queries))
    assert len(more_page_queries) <= 12
    # Nothing loads the fleet: the only node rows read are those of the job's own tasks (a join).
    assert not any('FROM "agents_node"' in sql for sql in more_page_queries + more_panel_queries)
    assert "<b>0/36</b> nodes have room" in page  # the last pass's count, until the next pass
    pass_as_leader()
    assert "<b>0/86</b> nodes have room" in client.get(f"/jobs/{job_id}/panel/").content.decode()


def test_cancel_from_the_job_page(api, demo):
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    response = logged_in("alice").post(f"/jobs/{job_id}/cancel/", {"reason": "typo"})
    assert response.status_code == 302
    assert Job.objects.get(pk=job_id).state == "CANCELLED"


def socket(client: Client, path: str, origin: bytes = b"http://127.0.0.1") -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(
        application, path, headers=[(b"origin", origin), (b"cookie", cookie), (b"host", b"127.0.0.1")]
    )


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
        anonymous = WebsocketCommunicator(
            application, "/ws/jobs/", headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
        )
        connected, code = await anonymous.connect()
        assert (connected, code) == (False, 4001)  # past the origin check, refused for want of a login
        # Let both consumers end inside the scenario: left running, they were cancelled as the
        # event loop closed, which could hang the test forever (seen once under load).
        await foreign.disconnect()
        await anonymous.disconnect()

    async_to_sync(scenario)()


def test_a_job_that_fits_as_it_is_is_offered_no_reshape(api, demo):
    """Just submitted on an idle cluster (waiting for the next pass): "why" offered "fits now
    with 4 GPUs per task (16 tasks)" for a 64-GPU job that started unchanged a pass later."""
    heartbeat()
    body = make_spec(resources={"gpu_count": 64, "gpu_type": "H100"})
    job_id = api("alice").post("/api/v1/jobs", body, format="json").json()["id"]
    why = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()
    assert (why["reason"]["code"], why["suggestions"]) == ("NOT_YET_SCHEDULED", [])
    html = logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode()
    assert "It fits the free room as it is" in html and "What would let it start sooner" not in html


@pytest.mark.parametrize("held", [False, True])
def test_what_would_help_a_job_that_does_not_wait_for_room_says_what_it_waits_for(api, demo, held):
    """A job its quota refused was told "It fits the free room as it is: it starts when its
    turn comes", and offered reshapes of the same GPUs."""
    heartbeat()
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    if held:
        Job.objects.filter(pk=job_id).update(held=True, held_by_name="alice", held_reason="not yet")
    else:
        Job.objects.filter(pk=job_id).update(
            pending_reason_code="QUOTA", pending_reason_message="team research-foundation-models uses 96 H100"
        )
    html = logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode()
    assert ("It does not wait for room on the nodes but for this:" if held else "It waits for this:") in html
    assert "fits the free room" not in html and 'id="suggestions"' not in html
    assert ("a higher borrowing limit" in html) is not held
    said = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    assert said == ([] if held else [ROOM_FOR_A_HIGHER_LIMIT])  # mlq why says what would help a quota wait too
