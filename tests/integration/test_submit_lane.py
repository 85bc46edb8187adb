"""The submit lane (mlqueue/submit_lane.py) answers POST /api/v1/jobs as Django does: each case
is sent through the whole ASGI application twice, the lane on and off (MLQ_SUBMIT_LANE), and the
two answers compared, status, headers and body; submits that arrive together are written as one
group, each still answered as alone."""

import asyncio
import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.cache import cache
from prometheus_client import REGISTRY

from mlqueue import submit_lane
from mlqueue.asgi import application
from scheduling.models import Job, Task
from teams.models import AuditEvent
from teams.services import do_create_token

TEAM = "research-foundation-models"
SPEC = {"name": "lane", "team": TEAM, "command": ["true"], "resources": {"gpu_count": 1, "gpu_type": "H100"}}
VOLATILE = {"id", "submitted_at", "updated_at"}  # a new job's own


@pytest.fixture
def tokens(transactional_db, demo, settings):
    cache.clear()
    settings.MLQ_SUBMIT_RATE = "1000/minute"
    users = get_user_model().objects.in_bulk(["alice", "rita", "bob", "victor"], field_name="username")
    return {name: do_create_token(user=user, name="lane")[1] for name, user in users.items()}


@pytest.fixture
def groups(monkeypatch):
    """The groups the lane wrote: each a list of (submit, answered by the lane)."""
    seen = []
    answer = submit_lane.answer_submits

    def recorded(submits):
        answer(submits)
        seen.append([(submit, submit.answer is not None) for submit in submits])

    monkeypatch.setattr(submit_lane, "answer_submits", recorded)
    return seen


def request(body, token: str | None = None, *, headers: tuple = (), query: bytes = b"", path: str = "/api/v1/jobs"):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = [(b"host", b"localhost"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
    if token is not None:
        sent.append((b"authorization", f"Bearer {token}".encode()))
    names = {name for name, _ in headers}
    sent = [(name, value) for name, value in sent if name not in names] + [h for h in headers if h[1] is not None]
    scope = {"type": "http", "method": "POST", "path": path, "scheme": "http", "query_string": query, "headers": sent}
    return scope, raw


async def _call(scope, raw):
    messages, sent = [{"type": "http.request", "body": raw, "more_body": False}], []

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client stays until its answer (Django listens for it leaving)

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    headers = {name.decode().lower(): value.decode() for name, value in sent[0]["headers"]}
    return sent[0]["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


def call(scope, raw):
    return async_to_sync(_call)(scope, raw)


def call_together(*requests):
    async def together():
        return await asyncio.gather(*(_call(scope, raw) for scope, raw in requests))

    return async_to_sync(together)()


def normalized(answer):
    status, headers, body = answer
    data = json.loads(body) if headers.get("content-type") == "application/json" else body.decode()
    headers = {**headers, "content-length": "*"}  # the ids' digits
    return status, headers, _without_volatile(data)


def _without_volatile(data):
    if isinstance(data, dict):
        return {key: "*" if key in VOLATILE else _without_volatile(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_without_volatile(value) for value in data]
    return data


def both_ways(settings, scope_raw):
    """The answer with the lane on, and with it off."""
    settings.MLQ_SUBMIT_LANE = True
    on = call(*scope_raw)
    settings.MLQ_SUBMIT_LANE = False
    off = call(*scope_raw)
    settings.MLQ_SUBMIT_LANE = True
    return on, off


def test_a_new_job_is_answered_as_django_answers_it(tokens, settings, groups):
    on, off = both_ways(settings, request(SPEC, tokens["alice"]))
    assert on[0] == 201 and normalized(on) == normalized(off)
    assert [[answered for _, answered in group] for group in groups] == [[True]]  # the lane's, not Django's
    job = Job.objects.get(pk=json.loads(on[2])["id"])
    assert job.owner.username == "alice" and job.tasks.count() == 1
    assert AuditEvent.objects.filter(job_id=job.pk, kind="SUBMITTED").count() == 1


def test_a_resubmit_and_a_conflict_are_answered_as_django_answers_them(tokens, settings):
    first = call(*request({**SPEC, "client_job_id": "same"}, tokens["alice"]))
    assert first[0] == 201
    again = both_ways(settings, request({**SPEC, "client_job_id": "same"}, tokens["alice"]))
    assert again[0][0] == 200 and again[0] == again[1]
    assert json.loads(again[0][2])["id"] == json.loads(first[2])["id"]
    other = both_ways(settings, request({**SPEC, "client_job_id": "same", "name": "other"}, tokens["alice"]))
    assert other[0][0] == 409 and other[0] == other[1]
    assert Job.objects.filter(client_job_id="same").count() == 1


BAD = {
    "a missing team": {k: v for k, v in SPEC.items() if k != "team"},
    "an unknown field": {**SPEC, "gpus": 1},
    "a team the caller is not in": {**SPEC, "team": "production-ranking"},
    "P0 from a member": {**SPEC, "priority": "P0"},
    "an unknown dependency": {**SPEC, "depends_on": [999999]},
    "more GPUs than any node": {**SPEC, "resources": {"gpu_count": 64, "gpu_type": "H100", "tasks": 1}},
    "a list": [SPEC],
    "a string": "x",
}


@pytest.mark.parametrize("case", BAD)
def test_a_refused_spec_is_refused_in_djangos_words(tokens, settings, case):
    on, off = both_ways(settings, request(BAD[case], tokens["alice"]))
    assert on[0] in (400, 403) and on == off
    assert not Job.objects.exists()


RAW = {
    "malformed JSON": b"{not json",
    "a key twice": b'{"name": "a", "name": "b"}',
    "NUL in a string": b'{"name": "a\\u0000"}',
    "an empty body": b"",
}


@pytest.mark.parametrize("case", RAW)
def test_a_body_django_refuses_is_refused_in_its_words(tokens, settings, case):
    on, off = both_ways(settings, request(RAW[case], tokens["alice"]))
    assert on[0] == 400 and on == off


REQUESTS = {
    "a token unknown": dict(token="not-a-token"),
    "no token": dict(token=None),
    "another scheme": dict(headers=((b"authorization", b"Token abc"),)),
    "a bearer without a token": dict(headers=((b"authorization", b"Bearer"),)),
    "a query parameter": dict(query=b"dry_run=1"),
    "a host not allowed": dict(headers=((b"host", b"evil.example"),)),
    "a body sent chunked": dict(headers=((b"transfer-encoding", b"chunked"), (b"content-length", None))),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_a_request_django_refuses_is_refused_in_its_words(tokens, settings, case):
    options = dict(REQUESTS[case])
    token = options.pop("token", tokens["alice"])
    on, off = both_ways(settings, request(SPEC, token, **options))
    assert 400 <= on[0] < 500 and on == off
    assert not Job.objects.exists()


def test_a_body_over_the_limit_is_djangos_413(tokens, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    big = {**SPEC, "env": {"X": "y" * 2000}}
    on, off = both_ways(settings, request(big, tokens["alice"]))
    assert on[0] == 413 and on == off


HANDED_TO_DJANGO = {
    "a schedule": ({**SPEC, "schedule": {"cron": "0 3 * * *"}}, ()),
    "an array": ({**SPEC, "array": {"count": 3}}, ()),
    "YAML": (None, ((b"content-type", b"application/yaml"),)),
    "HTML wanted": (SPEC, ((b"accept", b"text/html"),)),
    "JSON wanted indented": (SPEC, ((b"accept", b"application/json; indent=2"),)),
}


@pytest.mark.parametrize("case", HANDED_TO_DJANGO)
def test_what_the_lane_does_not_answer_django_does(tokens, groups, case):
    body, headers = HANDED_TO_DJANGO[case]
    raw = b"name: lane\nteam: " + TEAM.encode() + b'\ncommand: ["true"]\nresources: {gpu_count: 1, gpu_type: H100}\n'
    status, answer_headers, _ = call(*request(raw if body is None else body, tokens["alice"], headers=headers))
    assert status == 201
    assert all(not answered for group in groups for _, answered in group)
    if case == "HTML wanted":
        assert answer_headers["content-type"].startswith("text/html")


def lane_counts() -> tuple[float, float]:
    sample = REGISTRY.get_sample_value
    return tuple(sample("mlqueue_submit_lane_total", {"answered": who}) or 0.0 for who in ("lane", "django"))


def test_submits_that_arrive_together_are_one_group_each_answered_as_alone(tokens, groups):
    counted = lane_counts()
    answers = call_together(
        request({**SPEC, "client_job_id": "g"}, tokens["alice"]),
        request({**SPEC, "client_job_id": "g"}, tokens["alice"]),  # the same spec again: the same job
        request({**SPEC, "client_job_id": "g", "name": "other"}, tokens["alice"]),  # another spec: 409
        request({**SPEC, "name": "ritas"}, tokens["rita"]),
        request({**SPEC, "team": "production-ranking", "name": "bobs"}, tokens["bob"]),
        request({**SPEC, "team": "production-ranking"}, tokens["alice"]),  # not her team: 403 by Django
        request(SPEC, "not-a-token"),  # 401 by Django
    )
    assert [status for status, _, _ in answers] == [201, 200, 409, 201, 201, 403, 401]
    assert [len(group) for group in groups] == [7]
    assert [answered for _, answered in groups[0]] == [True] * 5 + [False] * 2
    first, again = (json.loads(body) for _, _, body in answers[:2])
    assert first["id"] == again["id"] and first["tasks"] == again["tasks"]
    assert "already has job" in json.loads(answers[2][2])["detail"]
    owners = dict(Job.objects.values_list("name", "owner__username"))
    assert owners == {"lane": "alice", "ritas": "rita", "bobs": "bob"}
    assert Task.objects.count() == 3
    actors = dict(AuditEvent.objects.filter(kind="SUBMITTED").values_list("job__name", "actor__username"))
    assert actors == owners
    assert [after - before for before, after in zip(counted, lane_counts(), strict=True)] == [5, 2]


def test_the_submit_rate_counts_each_submit_once_as_django_does(tokens, settings):
    settings.MLQ_SUBMIT_RATE = "3/minute"
    sequence = [SPEC, BAD["a missing team"], SPEC, SPEC]
    seen = {}
    for lane in (True, False):
        cache.clear()
        settings.MLQ_SUBMIT_LANE = lane
        seen[lane] = [call(*request(spec, tokens["alice"]))[0] for spec in sequence]
    assert seen[True] == seen[False] == [201, 400, 201, 429]


def test_a_revoked_token_is_refused_at_once(tokens):
    from teams.models import ApiToken
    from teams.services import do_revoke_token

    assert call(*request(SPEC, tokens["victor"]))[0] == 403  # not his team, but he is known
    token = ApiToken.objects.get(user__username="alice")
    assert call(*request(SPEC, tokens["alice"]))[0] == 201
    do_revoke_token(token=token, actor=token.user)
    status, headers, body = call(*request(SPEC, tokens["alice"]))
    assert status == 401 and headers["www-authenticate"] == "Bearer"


def test_https_headers_are_djangos_too(tokens, settings):
    # Django's handler keeps the settings its middleware read at start: these are read per request.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = ((b"x-forwarded-proto", b"https"),)
    on, off = both_ways(settings, request(SPEC, tokens["alice"], headers=forwarded))
    assert on[0] == 201 and normalized(on) == normalized(off)
    assert on[1]["strict-transport-security"].startswith("max-age=")
    assert re.fullmatch(r"\d+", on[1]["content-length"])


def test_a_group_over_the_submit_rate_lets_through_what_the_rate_allows(tokens, settings, groups):
    settings.MLQ_SUBMIT_RATE = "3/minute"
    answers = call_together(*(request({**SPEC, "name": f"n{n}"}, tokens["alice"]) for n in range(5)))
    assert [status for status, _, _ in answers] == [201, 201, 201, 429, 429]
    assert all(int(headers["retry-after"]) > 0 for _, headers, _ in answers[3:])
    assert [answered for _, answered in groups[0]] == [True] * 3 + [False] * 2
    assert Job.objects.count() == 3


def test_a_group_is_written_with_one_insert_per_table(tokens):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        answers = call_together(*(request({**SPEC, "name": f"n{n}"}, tokens["alice"]) for n in range(6)))
    assert [status for status, _, _ in answers] == [201] * 6
    inserts = [query["sql"].split('"')[1] for query in captured if query["sql"].startswith("INSERT")]
    assert sorted(inserts) == ["scheduling_job", "scheduling_jobevent", "scheduling_task"]


@pytest.mark.parametrize("lane", [True, False])
def test_a_failing_after_commit_hook_neither_fails_nor_repeats_the_submit(tokens, settings, monkeypatch, lane):
    from scheduling import notify

    def broken(*args, **kwargs):
        raise RuntimeError("the live views' send failed")

    monkeypatch.setattr(notify, "_send_changed", broken)
    settings.MLQ_SUBMIT_LANE = lane
    assert call(*request(SPEC, tokens["alice"]))[0] == 201
    assert Job.objects.count() == 1 and AuditEvent.objects.filter(kind="SUBMITTED").count() == 1


@pytest.fixture
def first_write_fails(monkeypatch) -> list:
    """The first group's write raises (a statement failed, rolled back); the list notes it."""
    from scheduling import submit_batch

    write, failures = submit_batch.do_submit_jobs, []

    def fails_once(checked):
        if not failures:
            failures.append(1)
            raise RuntimeError("a statement failed")
        return write(checked)

    monkeypatch.setattr(submit_batch, "do_submit_jobs", fails_once)
    return failures


def test_a_group_that_wrote_nothing_is_submitted_by_django_counted_once(tokens, settings, first_write_fails, groups):
    settings.MLQ_SUBMIT_RATE = "1/minute"
    assert call(*request(SPEC, tokens["alice"]))[0] == 201
    assert first_write_fails == [1] and [[answered for _, answered in group] for group in groups] == [[False]]
    assert Job.objects.count() == 1
    assert call(*request(SPEC, tokens["alice"]))[0] == 429  # the one submit counted, once


def test_a_group_that_wrote_nothing_with_no_submit_rate_warns_of_nothing_else(
    tokens, settings, first_write_fails, caplog
):
    settings.MLQ_SUBMIT_RATE = None
    assert call(*request(SPEC, tokens["alice"]))[0] == 201
    assert first_write_fails == [1] and "could not give back" not in caplog.text and Job.objects.count() == 1


def test_the_lanes_refusals_are_logged_as_djangos(tokens, settings, caplog):
    assert call(*request({**SPEC, "client_job_id": "same"}, tokens["alice"]))[0] == 201
    seen = {}
    for lane in (True, False):
        settings.MLQ_SUBMIT_LANE = lane
        caplog.clear()
        status = call(*request({**SPEC, "client_job_id": "same", "name": "other"}, tokens["alice"]))[0]
        seen[lane] = (status, [r.getMessage() for r in caplog.records if r.name == "django.request"])
    assert seen[True] == seen[False] == (409, ["Conflict: /api/v1/jobs"])


def test_a_bearer_token_with_a_stale_session_cookie_is_answered_as_django_answers_it(tokens, settings, groups):
    cookie = ((b"cookie", b"sessionid=stale"),)
    on, off = both_ways(settings, request(SPEC, tokens["alice"], headers=cookie))
    assert on[0] == 201 and normalized(on) == normalized(off)
    assert "sessionid=" in on[1]["set-cookie"]
