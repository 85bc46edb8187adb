"""Third QA walkthrough of the browser UI, what the server renders: the nodes console keeps what
was typed after a refusal and pauses its refresh by the whole form, the job log's tail starts on
a whole line and says when earlier lines are cut, wide tables scroll in their card, a refused
report range keeps its dates, the job page's and submit page's inputs have labels, and every
time on the tokens, notifications and node pages is marked for the browser to show in the
viewer's zone (static/js/mlqueue.js). The browser half: tests/e2e/test_browser_ui_qa3.py."""

import re

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from notifications.models import Delivery
from scheduling import lifecycle
from scheduling.leader.worker import run_pass
from scheduling.models import Job, SchedulerLease, Task, TaskLog
from scheduling.states import TaskState
from scheduling.stopping import do_request_stop
from scheduling.web.pages import LOG_TAIL_CHARS, log_tail
from teams.models import ApiToken
from tests.conftest import make_spec
from tests.nodes import heartbeat

HTMX = {"HTTP_HX_REQUEST": "true"}
H100 = "z1-r1-h100-01"
CSS = (settings.BASE_DIR / "static" / "css" / "mlqueue.css").read_text()
JS = (settings.BASE_DIR / "static" / "js" / "mlqueue.js").read_text()


def client_of(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


@pytest.fixture
def ready(demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()


def submit(api, **overrides) -> int:
    return api("alice").post("/api/v1/jobs", make_spec(**overrides), format="json").json()["id"]


def tag(html: str, pattern: str) -> str:
    found = re.search(pattern, html)
    assert found, pattern
    return found[0]


# --- 1 and 2: the nodes console --------------------------------------------------------------


def test_the_heatmap_refresh_pauses_while_any_input_of_the_form_is_in_use(ready):
    """The refresh checked only the reason and the ticks: a window's start and hours typed were
    wiped within 5 s. mlqueue.inUse looks at every input of the form."""
    html = client_of("ops").get("/nodes/?part=heatmap", **HTMX).content.decode()
    assert 'hx-trigger="every 5s [!mlqueue.inUse(this)]"' in html
    assert "window.mlqueue.inUse = function (root)" in JS


WINDOW = {"action": "maintenance", "reason": "swap the PDU", "starts_at": "2026-12-02T02:00", "hours": "four"}


@pytest.mark.parametrize(("headers", "status"), [(HTMX, 200), ({}, 400)])
def test_a_refused_window_keeps_every_value_and_tick(ready, headers, status):
    body = {**WINDOW, "racks": ["z1-r1"], "nodes": ["z2-r2-a100-01"]}
    response = client_of("ops").post("/nodes/", body, **headers)
    html = response.content.decode()
    assert response.status_code == status
    assert 'id="action-error" role="alert">hours: a number of hours, e.g. 4.</span>' in html
    assert 'value="swap the PDU">' in tag(html, r'<input class="reason" name="reason"[^>]*>')
    assert 'value="2026-12-02T02:00">' in tag(html, r'<input type="datetime-local" name="starts_at"[^>]*>')
    assert 'value="four">' in tag(html, r'<input type="number" name="hours"[^>]*>')
    assert tag(html, r'<input [^>]*name="racks" value="z1-r1"[^>]*>').endswith(" checked>")
    assert tag(html, r'<input [^>]*name="nodes" value="z2-r2-a100-01"[^>]*>').endswith(" checked>")
    assert len(re.findall(r'class="pick"[^>]* checked>', html)) == 2  # nothing else ticked


def test_a_refused_bulk_action_keeps_the_ticks_and_a_done_one_clears_them(ready):
    ops = client_of("ops")
    refused = ops.post("/nodes/", {"action": "drain", "reason": " ", "nodes": [H100]}, **HTMX).content.decode()
    assert 'id="action-error" role="alert">reason: ' in refused
    assert tag(refused, rf'<input [^>]*name="nodes" value="{H100}"[^>]*>').endswith(" checked>")
    done = ops.post("/nodes/", {"action": "cordon", "reason": "firmware", "nodes": [H100]}, **HTMX).content.decode()
    assert 'id="notice"' in done and " checked>" not in done
    assert 'value="">' in tag(done, r'<input class="reason" name="reason"[^>]*>')


# --- 3: the job log's tail -------------------------------------------------------------------


def test_a_cut_tail_starts_on_a_whole_line():
    lines = [f"line {n:05d} " + "x" * 40 for n in range(1000)]
    text = "\n".join(lines) + "\n"
    tail, cut = log_tail(text)
    assert cut and len(tail) <= LOG_TAIL_CHARS and text.endswith(tail)
    assert tail.startswith("line ") and text[len(text) - len(tail) - 1] == "\n"
    assert log_tail("short\n") == ("short\n", False)
    exact = "a" * 9 + "\n" + "b" * (LOG_TAIL_CHARS - 1) + "\n"  # the cut falls on a line's start
    assert log_tail(exact) == ("b" * (LOG_TAIL_CHARS - 1) + "\n", True)
    one_line = "z" * (LOG_TAIL_CHARS + 10)  # no line starts in the tail: it is cut as it is
    assert log_tail(one_line) == ("z" * LOG_TAIL_CHARS, True)


def test_the_log_box_says_earlier_lines_are_not_shown(api):
    job_id = submit(api)
    Job.objects.filter(pk=job_id).update(state=TaskState.RUNNING)
    text = "".join(f"step {n} loss {n / 7:.4f}\n" for n in range(2000))
    TaskLog.objects.create(job_id=job_id, rank=0, attempt=1, stream="stdout", offset=0, text=text)
    html = client_of("alice").get(f"/jobs/{job_id}/log/?rank=0").content.decode()
    shown = re.search(r"<pre>(.*)</pre>", html, re.S)[1]
    assert shown.startswith("step ") and text.endswith(shown)
    assert '<p class="small muted" data-log-cut>Earlier lines are not shown' in html
    assert f"mlq logs {job_id} --rank 0" in html
    TaskLog.objects.filter(job_id=job_id).update(text="just one line\n")
    short = client_of("alice").get(f"/jobs/{job_id}/log/?rank=0").content.decode()
    assert "data-log-cut hidden>" in short  # there for the browser to show once it cuts the followed log


# --- 4 and 6: wide tables, the top bar ----------------------------------------------------------


def test_wide_tables_scroll_inside_their_card(api, ready):
    job_id = submit(api)
    alice = client_of("alice")
    pages = {
        f"/jobs/{job_id}/": "<th>Rank</th><th>State</th><th>Node</th>",
        "/queue/": "<th>#</th><th>Job</th>",
        "/schedules/": 'id="schedules"',
        "/teams/": 'id="quotas"',
    }
    for path, table in pages.items():
        html = alice.get(path).content.decode()
        opening = html[: html.index(table)]
        assert opening[opening.rindex("<table") - len('<div class="table-scroll">') :].startswith(
            '<div class="table-scroll"><table'
        ), path
    assert ".table-scroll { overflow-x: auto;" in CSS


def test_the_top_bar_wraps_on_a_narrow_window():
    bar = re.search(r"nav\.top \{[^}]*\}", CSS)[0]
    assert "flex-wrap: wrap" in bar and "min-height: 48px" in bar and " height: 48px" not in bar


# --- 5: the reports' range ---------------------------------------------------------------------


def test_a_refused_range_keeps_the_dates_typed(logged_in):
    response = logged_in("ops").get("/reports/?from=2026-04-10&to=2026-04-01")
    html = response.content.decode()
    assert response.status_code == 400 and 'id="report-errors"' in html and "to: must not be before from." in html
    assert '<input type="date" name="from" value="2026-04-10">' in html
    assert '<input type="date" name="to" value="2026-04-01">' in html


# --- 7: labels ----------------------------------------------------------------------------------


def test_the_job_pages_reason_inputs_and_the_yaml_box_have_labels(api, ready):
    def labels(job_id: int, *names: str) -> None:
        html = client_of("alice").get(f"/jobs/{job_id}/").content.decode()
        for name in names:
            assert f'aria-label="why {name} job {job_id} (optional)"' in tag(
                html, rf'<input [^>]*id="{name}-reason"[^>]*>'
            )

    labels(submit(api, resources={"gpu_count": 64}), "cancel", "hold")  # waits: it can be held
    running = submit(api, client_job_id="runs", resources={"gpu_count": 8})
    run_pass(epoch=1)
    Job.objects.filter(pk=running).update(state=TaskState.RUNNING)
    Task.objects.filter(job_id=running).update(state=TaskState.RUNNING)
    labels(running, "cancel", "requeue")
    submit_page = client_of("alice").get("/jobs/new/").content.decode()
    assert '<label for="spec-yaml">YAML</label>' in submit_page and 'id="spec-yaml"' in submit_page


def test_the_notifications_page_says_early_stopped_in_words(demo):
    html = client_of("alice").get("/account/notifications/").content.decode()
    assert 'value="early_stopped" > early stopped</label>' in html and "earlystopped" not in html


# --- 8: times in the viewer's zone ----------------------------------------------------------------

CLOCK = re.compile(r"\d{1,2}:\d{2}")


def bare_times(html: str) -> list[str]:
    """Clock times left outside <time data-local> (which the browser rewrites in the viewer's
    zone, labelled), in the page's text."""
    html = re.sub(r"<time [^>]*data-local[^>]*>.*?</time>", "", html, flags=re.S)
    html = re.sub(r"<(script|style|pre)\b.*?</\1>", "", html, flags=re.S)
    return CLOCK.findall(re.sub(r"<[^>]+>", " ", html))


def test_tokens_and_deliveries_show_times_for_the_browser_to_localize(api, clock):
    alice = get_user_model().objects.get(username="alice")
    ApiToken.issue(user=alice, name="laptop")
    job_id = submit(api)
    Delivery.objects.create(
        user=alice, job_ref=job_id, event="early_stopped", channel="webhook", target="https://example.com/h", payload={}
    )
    for path in ("/account/tokens/", "/account/notifications/"):
        html = client_of("alice").get(path).content.decode()
        assert '<time datetime="2026-04-20T09:00:00+00:00" data-local' in html, path
        assert bare_times(html) == [], path


def test_the_node_pages_and_the_consoles_times_are_for_the_browser_to_localize(api, ready, clock):
    job_id = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=1)
    task = Task.objects.get(job_id=job_id)
    Task.objects.filter(pk=task.pk).update(state=TaskState.RUNNING, started_at=Job.objects.get(pk=job_id).submitted_at)
    ops = client_of("ops")
    ops.post("/nodes/", {"node": task.node.name, "action": "cordon", "reason": "firmware"})
    node = ops.get(f"/nodes/{task.node.name}/").content.decode()
    for table in ("tasks", "history"):
        rows = node.split(f'id="{table}"')[1].split("</table>")[0]
        assert '<time datetime="2026-04-20T09:00:00+00:00" data-local="seconds">' in rows, table
    for term in ("Since", "First heartbeat"):
        assert f"<dt>{term}</dt><dd><time datetime=" in node, term
    assert bare_times(node) == []
    do_request_stop(job_id=job_id, reason="PREEMPTED", grace_s=5, message="preempted for job 99")
    assert lifecycle.transition_task(
        Task.objects.get(pk=task.pk), to_state="FAILED", reason="EXIT_NONZERO", message="x"
    )
    console = ops.get("/nodes/").content.decode()
    for table in ("preemptions", "failures"):
        rows = console.split(f'id="{table}"')[1].split("</table>")[0]
        assert '<time datetime="2026-04-20T09:00:00+00:00" data-local="seconds">04-20 09:00:00 UTC</time>' in rows
    assert bare_times(console) == []


def test_the_console_says_why_a_bulk_action_left_nodes_as_they_were(ready):
    """(A review of stop 47: a cordon again of a cordoned node said "Already in service".)"""
    ops = client_of("ops")
    ops.post("/nodes/", {"action": "cordon", "reason": "firmware", "nodes": [H100]}, **HTMX)
    again = ops.post("/nodes/", {"action": "cordon", "reason": "firmware", "nodes": [H100]}, **HTMX).content.decode()
    assert f"0 nodes cordoned. Already cordoned for that reason, left as they were: {H100}." in again
    back = ops.post("/nodes/", {"action": "uncordon", "reason": "done", "nodes": [H100]}, **HTMX).content.decode()
    assert f"1 node uncordoned: {H100}." in back
    idle = ops.post("/nodes/", {"action": "uncordon", "reason": "done", "nodes": [H100]}, **HTMX).content.decode()
    assert f"Already in service, left as they were: {H100}." in idle
