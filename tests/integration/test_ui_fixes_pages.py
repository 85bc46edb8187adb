"""QA walkthrough fixes on the queue and job pages: the live refresh and the pager keep the page
shown, an earlier attempt's log can be read, the job's actions follow its state, and every time
shown says its zone (UTC, or the viewer's own once the browser has rewritten it)."""

import html as html_lib
import re

import pytest
from django.test import Client

from scheduling.models import Job, Task, TaskLog
from scheduling.states import TaskState
from tests.conftest import make_spec

HTMX = {"HTTP_HX_REQUEST": "true"}


def submit(api, username: str = "alice", **overrides) -> int:
    return api(username).post("/api/v1/jobs", make_spec(**overrides), format="json").json()["id"]


def client_of(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


# --- 1: the queue's page ---------------------------------------------------------------------


def test_the_live_refresh_and_the_pager_keep_the_page(api, monkeypatch):
    monkeypatch.setattr("scheduling.web.queue.PAGE_SIZE", 2)
    for number in range(5):
        submit(api, client_job_id=f"paged-{number}")
    fragment = client_of("alice").get("/queue/?sort=priority&page=2", **HTMX).content.decode()
    refresh = re.search(r'<div id="queue-table" hx-get="([^"]+)" hx-trigger="refresh"', fragment)
    assert html_lib.unescape(refresh[1]) == "/queue/?sort=priority&page=2"
    pager = re.findall(r'<a hx-get="[^"]+"[^>]*>', fragment)
    assert len(pager) == 2 and all('hx-push-url="true"' in link for link in pager)  # previous and next
    last = client_of("alice").get("/queue/?page=99", **HTMX).content.decode()  # past the end: the last one
    assert 'hx-get="/queue/?page=3" hx-trigger="refresh"' in last


# --- 6: earlier attempts' logs -----------------------------------------------------------------


@pytest.fixture
def retried(api) -> int:
    """A job whose rank 0 is on its second attempt; each attempt printed a line."""
    job_id = submit(api)
    Task.objects.filter(job_id=job_id, rank=0).update(state=TaskState.RUNNING, attempt=2)
    Job.objects.filter(pk=job_id).update(state=TaskState.RUNNING)
    for attempt in (1, 2):
        TaskLog.objects.create(
            job_id=job_id, rank=0, attempt=attempt, stream="stdout", offset=0, text=f"attempt {attempt} here\n"
        )
    return job_id


def test_the_log_box_lists_the_attempts_and_shows_an_earlier_one(retried):
    client = client_of("alice")
    latest = client.get(f"/jobs/{retried}/log/?rank=0").content.decode()
    assert "attempt 2 here" in latest and "data-log-follow" in latest
    assert f'hx-get="/jobs/{retried}/log/?rank=0&stream=stdout&attempt=1"' in latest
    assert '<b aria-current="true">2</b>' in latest
    earlier = client.get(f"/jobs/{retried}/log/?rank=0&attempt=1")
    text = earlier.content.decode()
    assert earlier.status_code == 200 and "attempt 1 here" in text and "attempt 2 here" not in text
    assert "data-log-follow" not in text  # over: nothing to follow, and no jump back to the latest
    assert '<b aria-current="true">1</b>' in text and "stderr&attempt=1" in text  # the stdout/stderr switch keeps it


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("3", "attempt: rank 0 of job {job} has made 2 attempt(s)."),
        ("0", "attempt: a whole number from 1, not '0'."),
        ("x", "attempt: a whole number from 1, not 'x'."),
        ("-1", "attempt: a whole number from 1, not '-1'."),
        ("9" * 30, f"attempt: a whole number from 1, not '{'9' * 20}'."),
    ],
)
def test_an_attempt_the_rank_never_made_is_a_400_naming_it(retried, value, message):
    response = client_of("alice").get(f"/jobs/{retried}/log/?rank=0&attempt={value}")
    assert (response.status_code, response.content.decode()) == (400, message.format(job=retried))
    assert response["Content-Type"] == "text/plain; charset=utf-8"


# --- 7: the job's actions follow its state -----------------------------------------------------


def test_the_cancel_button_is_in_the_live_panel_and_goes_when_the_job_ends(api):
    job_id = submit(api)
    panel = client_of("alice").get(f"/jobs/{job_id}/panel/", **HTMX).content.decode()
    assert 'id="job-cancel"' in panel and f'href="/jobs/{job_id}/clone/"' in panel
    page = client_of("alice").get(f"/jobs/{job_id}/").content.decode()
    assert page.count('id="job-cancel"') == 1  # only the panel's
    Job.objects.filter(pk=job_id).update(state=TaskState.SUCCEEDED)
    ended = client_of("alice").get(f"/jobs/{job_id}/panel/", **HTMX).content.decode()
    assert 'id="job-cancel"' not in ended and f'href="/jobs/{job_id}/clone/"' in ended


def test_the_cancel_button_keeps_the_permission_rules(api):
    """Offered to the job's owner, its team's lead and site admins; not to a teammate who only sees it."""
    bobs = submit(api, "bob", team="production-ranking", client_job_id="bobs")
    pauls = submit(api, "paul", team="production-ranking", client_job_id="pauls")
    offered = {}
    for username, job_id in (("bob", bobs), ("paul", bobs), ("ops", bobs), ("bob", pauls)):
        panel = client_of(username).get(f"/jobs/{job_id}/panel/", **HTMX)
        assert panel.status_code == 200
        offered[username, job_id] = 'id="job-cancel"' in panel.content.decode()
    assert offered == {("bob", bobs): True, ("paul", bobs): True, ("ops", bobs): True, ("bob", pauls): False}


# --- 8: every time says its zone -----------------------------------------------------------------

CLOCK = re.compile(r"\d{2}:\d{2}(?::\d{2})?(?: on \w{3} \d{1,2})?")


def unlabelled_times(html: str) -> list[str]:
    """Clock times in the page's text (tags dropped) not followed by "UTC"."""
    text = re.sub(r"<[^>]+>", "", html)
    return [m[0] for m in CLOCK.finditer(text) if not text[m.end() :].startswith(" UTC")]


def test_queue_and_job_times_are_labelled_and_marked_for_the_browser(api, clock):
    job_id = submit(api)
    Job.objects.filter(pk=job_id).update(started_at=Job.objects.get(pk=job_id).submitted_at)
    queue = client_of("alice").get("/queue/", **HTMX).content.decode()
    row = re.search(rf'<tr id="job-{job_id}".*?</tr>', queue, re.S)[0]
    assert re.search(r'<time datetime="2026-04-20T09:00:00\+00:00" data-local="short">Apr 20 09:00 UTC</time>', row)
    assert unlabelled_times(row) == []
    panel = client_of("alice").get(f"/jobs/{job_id}/panel/", **HTMX).content.decode()
    assert '<time datetime="2026-04-20T09:00:00+00:00" data-local="seconds">2026-04-20 09:00:00 UTC</time>' in panel
    assert "first started <time" in panel
    assert unlabelled_times(panel) == []


def test_the_queue_searches_by_id_name_or_owner(api):
    """The queue had no search: finding one job among hundreds meant paging (found by QA)."""
    bert = submit(api, name="bert-pretrain", client_job_id="bert")
    resnet = submit(api, name="resnet-eval", client_job_id="resnet")
    array = submit(api, name="shards", client_job_id="shards", array={"count": 3}, resources={"gpu_count": 1})
    child = Job.objects.filter(parent_id=array).order_by("group_index").last().pk
    bobs = submit(api, "bob", team="production-ranking", client_job_id="bobs")

    def found(username: str, text: str) -> set[int]:
        page = client_of(username).get("/queue/", {"q": text, "state": "all"}, **HTMX).content.decode()
        return {int(n) for n in re.findall(r'<tr id="job-(\d+)"', page)}

    assert found("alice", "BERT") == {bert}
    assert found("alice", str(resnet)) == {resnet} and found("alice", f"#{resnet}") == {resnet}
    assert found("alice", str(child)) == {array}  # a child's id finds its group's row
    assert found("alice", str(bobs)) == set()  # another team's job stays out of sight
    assert found("ops", "bob") == {bobs}
    assert found("alice", "no-such-job") == set()


def test_a_search_of_digits_that_are_no_ascii_number_is_a_name(api):
    submit(api, name="squared", client_job_id="squared")
    page = client_of("alice").get("/queue/", {"q": "²"}, **HTMX)
    assert page.status_code == 200  # int("²") raised: a 500 (found in review)
