"""Third QA walkthrough, what only a browser shows (headless Chromium against the live test
server, no cluster): the nodes console's refresh leaves a maintenance window being typed alone,
a refusal keeps it; the job log box follows its newest line unless the reader scrolled up and
starts a cut tail on a whole line; at 800 px the Tasks table stays in its card, the page does
not scroll sideways and the top bar wraps without overlapping; the tokens page reads in the
viewer's zone; the queue's time column counts on. The server half: tests/integration/test_ui_fixes_qa3.py."""

import pytest
from playwright.sync_api import expect

from scheduling.models import Job, SchedulerLease, TaskLog
from scheduling.states import TaskState
from teams.models import ApiToken
from tests.conftest import make_spec
from tests.e2e.browser import log_in
from tests.e2e.test_browser import browser  # noqa: F401 (fixture)
from tests.nodes import heartbeat

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A stand-in for the log's event stream: the test sends its events (window.sources[0].emit).
FAKE_EVENT_SOURCE = """
window.sources = [];
window.EventSource = function (url) {
  this.url = url; this.listeners = {}; this.readyState = 1; window.sources.push(this);
};
window.EventSource.CLOSED = 2;
window.EventSource.prototype.addEventListener = function (name, fn) {
  (this.listeners[name] = this.listeners[name] || []).push(fn);
};
window.EventSource.prototype.close = function () { this.readyState = 2; };
window.EventSource.prototype.emit = function (name, data) {
  (this.listeners[name] || []).forEach(function (fn) { fn({data: JSON.stringify(data)}); });
};
"""
AT_END = "(pre) => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 2"


def page_as(browser, live_server, username: str, width: int = 1280, **options):  # noqa: F811
    page = browser.new_context(viewport={"width": width, "height": 900}, **options).new_page()
    log_in(page, live_server.url, username)
    return page


def test_the_console_keeps_a_window_being_typed_through_refreshes_and_a_refusal(live_server, demo, browser):  # noqa: F811
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    page = page_as(browser, live_server, "ops")
    page.goto(f"{live_server.url}/nodes/")
    heatmap = "mlqueue.inUse(document.getElementById('heatmap'))"
    assert page.evaluate(heatmap) is False  # an untouched form: the refresh runs
    refreshes = []
    page.on("request", lambda request: "part=heatmap" in request.url and refreshes.append(request.url))
    page.fill("#bulk-bar input[name=starts_at]", "2026-12-02T02:00")
    page.fill("#bulk-bar input[name=hours]", "4")
    page.locator("h1").click()  # nothing focused: only the values hold the refresh
    assert page.evaluate(heatmap) is True
    page.wait_for_timeout(6_000)  # past a refresh's 5 s
    assert refreshes == []
    assert page.input_value("#bulk-bar input[name=starts_at]") == "2026-12-02T02:00"
    page.fill("#bulk-bar input[name=reason]", "PDU swap")
    page.click("#bulk-bar button[value=maintenance]")  # nothing ticked: refused
    expect(page.locator("#action-error")).to_contain_text("nodes: select the racks or nodes")
    assert page.input_value("#bulk-bar input[name=starts_at]") == "2026-12-02T02:00"
    assert page.input_value("#bulk-bar input[name=hours]") == "4"
    assert page.input_value("#bulk-bar input[name=reason]") == "PDU swap"


def test_the_log_box_follows_its_newest_line_unless_the_reader_scrolled_up(live_server, api, browser):  # noqa: F811
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(state=TaskState.RUNNING)
    lines = "".join(f"step {n} loss {1 / (n + 1):.6f}\n" for n in range(600))  # about 13,000 chars
    TaskLog.objects.create(job_id=job_id, rank=0, attempt=1, stream="stdout", offset=0, text=lines)
    page = page_as(browser, live_server, "alice")
    page.add_init_script(FAKE_EVENT_SOURCE)
    page.goto(f"{live_server.url}/jobs/{job_id}/")
    pre = page.locator("#log pre")
    expect(pre).to_contain_text("step 599 ")
    page.wait_for_function("window.sources.length === 1")
    assert pre.evaluate(AT_END)  # opened on the newest line
    expect(page.locator("#log [data-log-cut]")).to_be_hidden()
    page.evaluate("window.sources[0].emit('log', {text: 'step 600 new\\n'})")
    assert pre.evaluate(AT_END) and pre.evaluate("(pre) => pre.textContent.endsWith('step 600 new\\n')")
    pre.evaluate("(pre) => { pre.scrollTop = 100; }")  # the reader scrolls up: left where they are
    page.evaluate("window.sources[0].emit('log', {text: 'step 601 new\\n'})")
    assert pre.evaluate("(pre) => pre.scrollTop") == 100
    page.evaluate("window.sources[0].emit('log', {text: 'pad '.repeat(2000) + '\\n'})")  # past 20,000 chars
    text = pre.evaluate("(pre) => pre.textContent")
    assert len(text) <= 20_000 and text.startswith("step ") and text.endswith("pad \n")
    expect(page.locator("#log [data-log-cut]")).to_be_visible()


@pytest.mark.parametrize("width", [800, 1280])
def test_the_tasks_table_stays_in_its_card_and_the_top_bar_wraps(live_server, api, browser, width):  # noqa: F811
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    page = page_as(browser, live_server, "alice", width=width)
    page.goto(f"{live_server.url}/jobs/{job_id}/")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    tasks = page.locator(".table-scroll", has=page.locator("th", has_text="Checkpoint")).bounding_box()
    card = page.locator(".panel", has=page.locator("h2", has_text="Tasks")).bounding_box()
    assert tasks["x"] + tasks["width"] <= card["x"] + card["width"]
    overlaps = page.evaluate(
        """() => {
        const nav = document.querySelector("nav.top").getBoundingClientRect();
        const boxes = [...document.querySelectorAll("nav.top > *:not(.spacer)")].map((e) => e.getBoundingClientRect());
        const out = boxes.filter((b) =>
          b.left < nav.left || b.right > nav.right || b.top < nav.top || b.bottom > nav.bottom);
        const pairs = boxes.flatMap((a, i) => boxes.slice(i + 1).filter((b) =>
          a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1));
        return out.length + pairs.length;
    }"""
    )
    assert overlaps == 0


def test_token_times_read_in_the_viewers_zone(live_server, demo, browser):  # noqa: F811
    from django.contrib.auth import get_user_model

    ApiToken.issue(user=get_user_model().objects.get(username="alice"), name="laptop")
    page = page_as(browser, live_server, "alice", timezone_id="Asia/Tokyo")
    page.goto(f"{live_server.url}/account/tokens/")
    created = page.locator("#tokens tbody tr td:nth-child(3) time")
    expect(created).to_contain_text("GMT+9")
    assert "UTC" in created.get_attribute("title")


def test_the_queues_time_column_counts_on_between_live_refreshes(live_server, api, browser):  # noqa: F811
    """QA: "running 11s" stayed 11s until a job's change pushed a refresh. The browser counts on
    from the seconds the server rendered (not from its own clock, which need not agree)."""
    from datetime import timedelta

    from django.utils import timezone

    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(state=TaskState.RUNNING, started_at=timezone.now() - timedelta(seconds=10))
    page = page_as(browser, live_server, "alice")
    page.goto(f"{live_server.url}/queue/")
    clock = page.locator(f"#job-{job_id} span.clock")
    first = int(clock.inner_text().removeprefix("running ").removesuffix("s"))
    assert 10 <= first <= 20
    page.wait_for_timeout(3_500)
    later = int(clock.inner_text().removeprefix("running ").removesuffix("s"))
    assert later >= first + 3
