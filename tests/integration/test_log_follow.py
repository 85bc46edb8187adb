"""`GET /api/v1/jobs/{id}/logs?follow=1` through the ASGI application (as daphne serves it):
server-sent events with the lines there, the lines written after, and an `end` when the attempt
is over; the same 404 and 400 as the plain endpoint."""

import asyncio
import json

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from mlqueue.asgi import application
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Task, TaskLog
from scheduling.states import TaskState
from scheduling.web import logstream
from teams.models import ApiToken
from tests.conftest import make_spec
from tests.integration.test_agent_api import agent, agent_settings, beat  # noqa: F401 (a fixture)
from tests.nodes import cordon

pytestmark = pytest.mark.django_db(transaction=True)  # the stream reads in its own thread


@pytest.fixture(autouse=True)
def fast_follow(settings):
    settings.MLQ_LOG_FOLLOW_POLL_S = 0.05
    settings.MLQ_LOG_FOLLOW_HEARTBEAT_S = 0.2
    settings.MLQ_LOG_FOLLOW_MAX_S = 10


def bearer(username: str) -> dict:
    _, raw = ApiToken.issue(user=get_user_model().objects.get(username=username))
    return {"Authorization": f"Bearer {raw}", "Accept": "text/event-stream"}


def running_job(api) -> int:
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    Task.objects.filter(job_id=job_id, rank=0).update(state=TaskState.RUNNING, attempt=1)
    return job_id


def write(job_id: int, offset: int, text: str, attempt: int = 1) -> None:
    TaskLog.objects.create(job_id=job_id, rank=0, attempt=attempt, stream="stdout", offset=offset, text=text)


def events(body: str) -> list[tuple[str | None, str, dict | None]]:
    """(id, event, data) of each event; comments as ("", ":", None)."""
    found = []
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
        if block.startswith(":"):
            found.append(("", ":", None))
        elif "event" in fields:
            found.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    return found


def get(path: str, headers: dict, during=None) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            request = asyncio.ensure_future(client.get(path, headers=headers))
            if during is not None:
                await during()
            return await request

    return async_to_sync(go)()


def test_follow_sends_the_lines_there_then_new_ones_then_the_end(api):
    job_id = running_job(api)
    write(job_id, 0, "epoch 1\n")

    async def later():
        await asyncio.sleep(0.4)
        await sync_to_async(write)(job_id, 8, "epoch 2\n")
        await asyncio.sleep(0.4)
        await sync_to_async(Task.objects.filter(job_id=job_id).update)(state=TaskState.SUCCEEDED)

    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", bearer("alice"), later)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    sent = [item for item in events(response.text) if item[1] != ":"]
    assert sent == [
        ("8", "log", {"attempt": 1, "offset": 0, "next_offset": 8, "text": "epoch 1\n"}),
        ("16", "log", {"attempt": 1, "offset": 8, "next_offset": 16, "text": "epoch 2\n"}),
        ("16", "end", {"next_offset": 16, "attempt": 1, "state": "SUCCEEDED"}),
    ]
    assert ("", ":", None) in events(response.text)  # the keep-alive while it was quiet


def test_a_follow_closes_once_its_token_is_revoked(api, settings):
    """It read on for the rest of its hour (QA: 58 lines after the token's revocation): the
    stream asks again every MLQ_WS_RECHECK_S, as the live views' sockets do."""
    settings.MLQ_WS_RECHECK_S = 0.1
    job_id = running_job(api)
    write(job_id, 0, "epoch 1\n")
    headers = bearer("alice")
    token = ApiToken.objects.latest("id")

    async def later():
        await asyncio.sleep(0.4)
        await sync_to_async(ApiToken.objects.filter(pk=token.pk).update)(revoked_at=timezone.now())
        await asyncio.sleep(0.4)
        await sync_to_async(write)(job_id, 8, "epoch 2\n")  # after the close: never sent

    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", headers, later)
    sent = [(name, data) for _, name, data in events(response.text) if name != ":"]
    assert sent[0] == ("log", {"attempt": 1, "offset": 0, "next_offset": 8, "text": "epoch 1\n"})
    assert sent[1:] == [("closed", {"reason": logstream.ACCESS_ENDED})]


def test_a_sessions_follow_reads_on_while_logged_in_and_closes_at_the_logout(api, settings):
    """The page's EventSource sends the session cookie: the re-check keeps a live session's
    stream open, and closes it once that session has logged out."""
    settings.MLQ_WS_RECHECK_S = 0.1
    job_id = running_job(api)
    browser = Client()
    assert browser.login(username="alice", password="demo")
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}", "Accept": "text/event-stream"}

    async def later():
        await asyncio.sleep(0.4)  # re-checked a few times by now, still alice's session
        await sync_to_async(write)(job_id, 0, "epoch 1\n")
        await asyncio.sleep(0.4)
        await sync_to_async(browser.logout)()

    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", cookie, later)
    sent = [(name, data) for _, name, data in events(response.text) if name != ":"]
    assert sent == [
        ("log", {"attempt": 1, "offset": 0, "next_offset": 8, "text": "epoch 1\n"}),
        ("closed", {"reason": logstream.ACCESS_ENDED}),
    ]


def test_follow_resumes_from_the_offset_or_last_event_id_and_ends_on_a_new_attempt(api):
    job_id = running_job(api)
    write(job_id, 0, "one\n")
    write(job_id, 4, "two\n")
    Task.objects.filter(job_id=job_id).update(state=TaskState.RUNNING, attempt=2)
    by_offset = get(f"/api/v1/jobs/{job_id}/logs?follow=1&attempt=1&offset=4", bearer("alice"))
    by_id = get(  # an EventSource reconnecting sends the URL it opened, and the last id it had
        f"/api/v1/jobs/{job_id}/logs?follow=true&attempt=1&offset=0", {**bearer("alice"), "Last-Event-ID": "4"}
    )
    for response in (by_offset, by_id):
        assert events(response.text) == [
            ("8", "log", {"attempt": 1, "offset": 4, "next_offset": 8, "text": "two\n"}),
            # attempt 2's state is not attempt 1's: nothing says how 1 ended, only what replaced it
            ("8", "end", {"next_offset": 8, "attempt": 1, "state": None, "superseded_by": 2}),
        ]


def test_follow_ends_when_the_job_is_cancelled_before_it_started(api):
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    api("alice").post(f"/api/v1/jobs/{job_id}/cancel", {}, format="json")
    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", bearer("alice"))
    assert [name for _, name, _ in events(response.text)] == ["end"]


def test_follow_is_404_for_another_teams_job_and_400_naming_a_bad_parameter(api):
    job_id = running_job(api)
    assert get(f"/api/v1/jobs/{job_id}/logs?follow=1", bearer("bob")).status_code == 404
    assert get(f"/api/v1/jobs/{job_id}/logs?follow=1", {"Accept": "text/event-stream"}).status_code in (401, 403)
    for query, field in (("follow=maybe", "follow"), ("follow=1&offset=-1", "offset"), ("follow=1&rank=x", "rank")):
        response = get(f"/api/v1/jobs/{job_id}/logs?{query}", bearer("alice"))
        assert response.status_code == 400, query
        assert field in response.json()["fields"], query
    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", {**bearer("alice"), "Last-Event-ID": "x"})
    assert response.status_code == 400 and list(response.json()["fields"]) == ["Last-Event-ID"]


@pytest.mark.parametrize("follow", ["", "&follow=1"])
def test_a_rank_or_attempt_the_job_never_had_is_a_400_not_an_empty_log(api, follow):
    job_id = running_job(api)  # 8 ranks; rank 0 on its first attempt
    for query, field, message in (
        ("rank=8", "rank", f"job {job_id} has ranks 0-7."),
        ("rank=99", "rank", f"job {job_id} has ranks 0-7."),
        ("rank=0&attempt=2", "attempt", f"rank 0 of job {job_id} has made 1 attempt(s)."),
    ):
        response = get(f"/api/v1/jobs/{job_id}/logs?{query}{follow}", bearer("alice"))
        assert response.status_code == 400, query
        assert response.json()["fields"][field] == [message], query
    if not follow:  # a stream of a running job would run to its bound
        assert get(f"/api/v1/jobs/{job_id}/logs?rank=7&attempt=1", bearer("alice")).status_code == 200


def test_the_job_page_follows_the_stream_from_where_its_tail_ends_and_polls_as_the_fallback(api):
    job_id = running_job(api)
    write(job_id, 0, "epoch 1\n")
    browser = Client()
    assert browser.login(username="alice", password="demo")
    html = browser.get(f"/jobs/{job_id}/log/?rank=0").content.decode()
    follow_url = f"/api/v1/jobs/{job_id}/logs?follow=1&amp;rank=0&amp;stream=stdout&amp;offset=8&amp;attempt=1"
    assert f'data-log-follow="{follow_url}"' in html and "every 3s" not in html and "epoch 1" in html
    polled = browser.get(f"/jobs/{job_id}/log/?rank=0&poll=1").content.decode()
    assert 'hx-trigger="every 3s"' in polled and "poll=1" in polled and "data-log-follow" not in polled

    # the page's EventSource sends the session cookie, as the browser would
    Task.objects.filter(job_id=job_id).update(state=TaskState.SUCCEEDED)
    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid'].value}", "Accept": "text/event-stream"}
    streamed = get(follow_url.replace("&amp;", "&"), cookie)
    assert [name for _, name, _ in events(streamed.text)] == ["end"]

    Job.objects.filter(pk=job_id).update(state=TaskState.SUCCEEDED)
    finished = browser.get(f"/jobs/{job_id}/log/?rank=0").content.decode()
    assert "data-log-follow" not in finished and "every 3s" not in finished and "epoch 1" in finished


def test_the_stream_stops_when_the_client_goes(api):
    job_id = running_job(api)
    write(job_id, 0, "epoch 1\n")
    headers = [(name.lower().encode(), value.encode()) for name, value in bearer("alice").items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/api/v1/jobs/{job_id}/logs",
        "raw_path": f"/api/v1/jobs/{job_id}/logs".encode(),
        "query_string": b"follow=1",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }

    async def go():
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=5)
        assert start["type"] == "http.response.start" and start["status"] == 200
        received = b""
        while b"epoch 1" not in received:
            received += (await communicator.receive_output(timeout=5))["body"]
        await communicator.send_input({"type": "http.disconnect"})
        await communicator.wait(timeout=3)  # the application returned: the stream was stopped, not left polling

    async_to_sync(go)()


def test_the_stream_closes_at_its_bound_without_an_end(api, settings):
    settings.MLQ_LOG_FOLLOW_MAX_S = 0.3
    job_id = running_job(api)
    write(job_id, 0, "epoch 1\n")
    response = get(f"/api/v1/jobs/{job_id}/logs?follow=1", bearer("alice"))
    assert [name for _, name, _ in events(response.text) if name != ":"] == ["log"]  # the client resumes from 8


def test_the_plain_log_defaults_to_the_current_attempt_as_follow_does(api):
    job_id = running_job(api)
    write(job_id, 0, "first attempt\n")
    Task.objects.filter(job_id=job_id).update(state=TaskState.RUNNING, attempt=2)  # printed nothing yet
    TaskLog.objects.create(job_id=job_id, rank=0, attempt=1, stream="stderr", offset=0, text="warn\n")
    for stream in ("stdout", "stderr"):
        body = api("alice").get(f"/api/v1/jobs/{job_id}/logs?stream={stream}").json()
        assert (body["attempt"], body["text"]) == (2, ""), stream  # it was attempt 1's, stdout and stderr alike
    assert api("alice").get(f"/api/v1/jobs/{job_id}/logs?attempt=1").json()["text"] == "first attempt\n"


def test_the_log_fragment_refuses_a_rank_or_stream_the_job_does_not_have(api):
    job_id = running_job(api)  # the seed spec: 8 ranks
    browser = Client()
    assert browser.login(username="alice", password="demo")
    for query, message in (
        ("rank=abc", f"rank: job {job_id} has ranks 0 to 7, not 'abc'."),
        ("rank=-1", f"rank: job {job_id} has ranks 0 to 7, not '-1'."),
        ("rank=8", f"rank: job {job_id} has ranks 0 to 7, not '8'."),
        ("stream=both", "stream: stdout or stderr, not 'both'."),
    ):
        response = browser.get(f"/jobs/{job_id}/log/?{query}")
        assert (response.status_code, response.content.decode()) == (400, message), query
        assert response["Content-Type"] == "text/plain; charset=utf-8"  # it echoes the query: never HTML
    xss = browser.get(f"/jobs/{job_id}/log/?rank=<svg onload=alert()>")
    assert xss.status_code == 400 and xss["Content-Type"].startswith("text/plain")
    assert browser.get(f"/jobs/{job_id}/log/?rank=7").status_code == 200


NODE = "z1-r1-h100-01"


def report(client, job_id: int, attempt: int, *items) -> None:
    response = client.post(
        f"/api/v1/agents/{NODE}/events",
        {"events": [{"job_id": job_id, "rank": 0, "attempt": attempt, **item} for item in items]},
        format="json",
    )
    assert response.status_code == 200 and not response.json()["refused"], response.json()


def run_attempt(client, job_id: int, attempt: int, *, exit_code: int, epoch: int) -> None:
    """The leader places `attempt`, and the agent runs it: a line, then its exit."""
    for _ in range(3):  # the settle's requeue, then the placement
        if Task.objects.filter(job_id=job_id, attempt=attempt, state=TaskState.ASSIGNED).exists():
            break
        run_pass(epoch=epoch)
    beat(client, NODE, [{"job_id": job_id, "rank": 0, "attempt": attempt, "state": "running"}])
    line = {"type": "log", "stream": "stdout", "offset": 0, "data": f"try {attempt}\n"}
    report(client, job_id, attempt, line, {"type": "exited", "exit_code": exit_code})


def test_the_end_of_an_attempt_is_how_that_attempt_ended_not_how_the_job_did(api, settings):
    """Attempt 1 exits 4, the retry succeeds: following attempt 1 afterwards ended SUCCEEDED
    (the task's state now, attempt 2's); it is FAILED, and names the attempt that replaced it."""
    settings.MLQ_RETRY_BACKOFF_BASE_S = 0
    leader = 2
    SchedulerLease.objects.update_or_create(pk=1, defaults={"epoch": leader, "renewed_at": timezone.now()})
    client = agent(NODE)
    beat(client, NODE)
    cordon(Node.objects.exclude(name=NODE))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_attempt(client, job_id, 1, exit_code=4, epoch=leader)
    run_attempt(client, job_id, 2, exit_code=0, epoch=leader)
    assert Job.objects.get(pk=job_id).state == TaskState.SUCCEEDED

    first = get(f"/api/v1/jobs/{job_id}/logs?follow=1&attempt=1", bearer("alice"))
    assert [item for item in events(first.text) if item[1] != ":"] == [
        ("6", "log", {"attempt": 1, "offset": 0, "next_offset": 6, "text": "try 1\n"}),
        ("6", "end", {"next_offset": 6, "attempt": 1, "state": "FAILED", "superseded_by": 2}),
    ]
    latest = get(f"/api/v1/jobs/{job_id}/logs?follow=1", bearer("alice"))
    assert events(latest.text)[-1] == ("6", "end", {"next_offset": 6, "attempt": 2, "state": "SUCCEEDED"})


def test_an_offset_past_the_end_answers_the_end_not_the_offset_asked(api):
    job_id = running_job(api)
    write(job_id, 0, "one\n")
    write(job_id, 4, "two\n")
    far = 10**23
    body = api("alice").get(f"/api/v1/jobs/{job_id}/logs?offset={far}").json()
    assert (body["offset"], body["next_offset"], body["text"]) == (far, 8, "")
    gap = api("alice").get(f"/api/v1/jobs/{job_id}/logs?offset=6").json()  # inside a chunk: its rest
    assert (gap["next_offset"], gap["text"]) == (8, "o\n")
    Task.objects.filter(job_id=job_id).update(state=TaskState.SUCCEEDED)
    followed = get(f"/api/v1/jobs/{job_id}/logs?follow=1&offset={far}", bearer("alice"))
    assert events(followed.text) == [("8", "end", {"next_offset": 8, "attempt": 1, "state": "SUCCEEDED"})]
