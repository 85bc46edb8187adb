"""The web UI in a real browser (headless Chromium) against the whole system: web, scheduler
and agents as real processes on the demo data. Each test also takes the screenshots the
README shows (see tests/e2e/browser.py)."""

import json
import sys

import pytest
from django.db import connections
from playwright.sync_api import expect, sync_playwright

from scheduling.models import Job, Node
from teams.models import ApiToken, Quota
from tests.e2e.browser import CHROMIUM, FLAGS, log_in, screenshot_dir
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.nodes import cordon

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster(tmp_path, demo):
    """The whole system, with agents for the demo fleet's nodes (virtual, fake GPUs)."""
    running = Cluster(tmp_path).start(agents=[])
    fleet = [
        {
            "name": n.name,
            "zone": n.zone,
            "rack": n.rack,
            "gpu_type": n.gpu_type,
            "gpu_count": n.gpu_count,
            "cpu_count": n.cpu_count,
            "memory_gb": n.memory_gb,
            "labels": n.labels,
        }
        for n in Node.objects.order_by("name")
    ]
    running.add_fleet(fleet)
    wait_for(lambda: Node.objects.filter(state="READY").count() == len(fleet), timeout=30, what="the fleet READY")
    yield running
    running.stop()


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # plain synchronous code between its calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()
        # Inside Playwright's context Django keeps a database connection of its own: close it
        # here, or it outlives the test and the test database cannot be dropped.
        connections.close_all()


def page_for(browser, cluster, username: str):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    log_in(page, cluster.url, username)
    return page


def api_token(username: str) -> str:
    from django.contrib.auth import get_user_model

    return ApiToken.issue(user=get_user_model().objects.get(username=username))[1]


def test_a_member_submits_from_the_form_and_watches_it_start_without_reloading(cluster, browser, tmp_path):
    shots = screenshot_dir(tmp_path)
    queue = page_for(browser, cluster, "alice")
    queue.goto(f"{cluster.url}/queue/")
    expect(queue.locator("#live-status")).to_have_text("live")

    form = queue.context.new_page()
    form.goto(f"{cluster.url}/jobs/new/")
    form.fill("input[name=name]", "browser-test")
    form.fill("textarea[name=command]", f"{sys.executable}\n-c\nimport time; print('hello from rank 0'); time.sleep(4)")
    form.fill("input[name='resources.gpu_count']", "8")
    form.select_option("select[name='resources.gpu_type']", "H100")
    form.screenshot(path=str(shots / "submit.png"), full_page=True)
    form.click("button[name=action][value=submit]")
    form.wait_for_url(f"{cluster.url}/jobs/*/")
    job_id = int(form.url.rstrip("/").rsplit("/", 1)[1])

    row = queue.locator(f"#job-{job_id}")
    expect(row).to_be_visible(timeout=10_000)  # pushed over the WebSocket: the page never reloaded
    expect(row.locator(".job-state")).to_have_text("RUNNING", timeout=15_000)
    queue.screenshot(path=str(shots / "queue.png"), full_page=True)
    assert queue.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_the_job_page_of_a_job_that_cannot_fit_explains_why(cluster, browser, tmp_path):
    import urllib.request

    body = {
        "team": "research-foundation-models",
        "name": "needs-a-whole-rack",
        "command": ["true"],
        "resources": {"gpu_count": 64, "gpu_type": "H100"},
        "topology_hint": "require_same_rack",
    }
    cordon(["z1-r1-h100-01", "z2-r1-h100-01"])
    request = urllib.request.Request(
        f"{cluster.url}/api/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_token('alice')}"},
    )
    job_id = json.loads(urllib.request.urlopen(request).read())["id"]
    wait_for(
        lambda: Job.objects.get(pk=job_id).pending_reason_code not in ("", "NOT_YET_SCHEDULED"),
        timeout=15,
        what="the scheduler's reason",
    )

    page = page_for(browser, cluster, "alice")
    page.goto(f"{cluster.url}/jobs/{job_id}/")
    why = page.locator("#why-pending")
    expect(why).to_contain_text("Why is this job pending?")
    expect(why).to_contain_text(Job.objects.get(pk=job_id).pending_reason_code)
    expect(why).to_contain_text("needs 64 H100")
    expect(why.locator("#histogram")).to_contain_text("CORDONED")  # the pass's count, stored with the reason
    why.get_by_role("button", name="What would help?").click()  # computed only when asked
    expect(why.locator("#suggestions")).to_contain_text("fits now with 56 H100 (7 tasks)")
    # A push re-renders the panel: what was asked for stays (hx-preserve) until the page is left.
    page.evaluate("document.getElementById('fit-count').dataset.stale = 'yes'")
    page.evaluate("htmx.trigger('#job-panel', 'refresh')")  # what a WebSocket push does
    page.wait_for_function("!document.getElementById('fit-count').dataset.stale")  # the new panel is in
    expect(page.locator("#why-pending #suggestions")).to_contain_text("fits now with 56 H100 (7 tasks)")
    page.screenshot(path=str(shots_of(tmp_path) / "job.png"), full_page=True)


def shots_of(tmp_path):
    return screenshot_dir(tmp_path)


def test_a_lead_edits_a_quota_and_a_member_cannot(cluster, browser, tmp_path):
    import urllib.error
    import urllib.request

    lead = page_for(browser, cluster, "rita")
    lead.goto(f"{cluster.url}/teams/")
    row = lead.locator("#quota-research-foundation-models-gpu-H100")
    row.locator(".edit-quota").click()
    row.locator("input[name=guaranteed]").fill("30")
    row.locator("input[name=reason]").fill("make room for vision")
    row.locator(".save-quota").click()
    expect(lead.locator("#quota-research-foundation-models-gpu-H100")).to_contain_text("30")
    assert Quota.objects.get(team__name="research-foundation-models", resource_class="gpu:H100").guaranteed == 30
    lead.screenshot(path=str(screenshot_dir(tmp_path) / "teams.png"), full_page=True)

    member = page_for(browser, cluster, "alice")
    member.goto(f"{cluster.url}/teams/")
    expect(member.locator("#quota-research-foundation-models-gpu-H100")).to_be_visible()
    assert member.locator(".edit-quota").count() == 0
    request = urllib.request.Request(
        f"{cluster.url}/api/v1/teams/research-foundation-models/quotas",
        method="PATCH",
        data=json.dumps({"reason": "more", "quotas": {"gpu:H100": {"guaranteed": 31}}}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_token('alice')}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 403


def test_an_admin_drains_a_rack_and_sees_it_on_the_heatmap(cluster, browser, tmp_path):
    admin = page_for(browser, cluster, "ops")
    admin.goto(f"{cluster.url}/nodes/")
    rack = [f"z1-r2-a100-0{i}" for i in range(1, 5)]
    for name in rack:
        expect(admin.locator(f"#node-{name}")).to_have_attribute("data-state", "READY")
    admin.locator("#rack-z1-r2 input[name=racks]").check()
    admin.locator("#bulk-bar input.reason").fill("replace a fan")
    admin.locator("#bulk-bar button[name=action][value=drain]").click()
    for name in rack:
        expect(admin.locator(f"#node-{name}")).to_have_attribute("data-state", "DRAINING", timeout=10_000)
    expect(admin.locator("#node-z1-r1-h100-01")).to_have_attribute("data-state", "READY")
    admin.screenshot(path=str(screenshot_dir(tmp_path) / "nodes.png"), full_page=True)


def test_a_websocket_from_a_foreign_origin_is_refused(cluster):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{cluster.port}/ws/jobs/", origin="https://evil.example.com", open_timeout=5)
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as anonymous:  # the right origin, but no logged-in session
        connect(f"ws://127.0.0.1:{cluster.port}/ws/jobs/", origin=cluster.url, open_timeout=5)
    assert anonymous.value.response.status_code == 403


def test_the_login_page(cluster, browser, tmp_path):
    context = browser.new_context(viewport={"width": 1000, "height": 600})
    page = context.new_page()
    page.goto(f"{cluster.url}/queue/")
    expect(page.locator("h1")).to_have_text("Log in to mlqueue")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "login.png"))


def submit_as(cluster, username: str, body: dict) -> int:
    import urllib.request

    request = urllib.request.Request(
        f"{cluster.url}/api/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_token(username)}"},
    )
    return json.loads(urllib.request.urlopen(request).read())["id"]


def test_the_queue_of_a_busy_cluster_shows_why_each_job_waits(cluster, browser, tmp_path):
    """Several teams' work on the demo fleet: the page shows running jobs with their nodes and
    waiting ones with a reason each, in queue order."""
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    jobs = [
        (
            "bob",
            {
                "team": "production-ranking",
                "name": "ranking-refresh",
                "priority": "P1",
                "command": sleep,
                "resources": {"gpu_count": 64, "gpu_type": "H100"},
                "topology_hint": "require_same_rack",
            },
        ),
        (
            "alice",
            {
                "team": "research-foundation-models",
                "name": "llama-70b-pretrain",
                "command": sleep,
                "resources": {"gpu_count": 48, "gpu_type": "H100"},
                "topology_hint": "prefer_same_rack",
            },
        ),
        (
            "victor",
            {
                "team": "research-vision",
                "name": "vit-eval",
                "command": sleep,
                "resources": {"gpu_count": 16, "gpu_type": "L40S"},
            },
        ),
        (
            "alice",
            {
                "team": "research-foundation-models",
                "name": "llama-70b-sft",
                "command": sleep,
                "resources": {"gpu_count": 64, "gpu_type": "H100"},
                "topology_hint": "require_same_rack",
            },
        ),
        (
            "victor",
            {
                "team": "research-vision",
                "name": "detector-sweep",
                "command": sleep,
                "resources": {"gpu_count": 8, "gpu_type": "L40S"},
            },
        ),
        (
            "bob",
            {
                "team": "production-ranking",
                "name": "embeddings-backfill",
                "command": sleep,
                "resources": {"tasks": 6, "cpu_per_rank": 48, "memory_per_rank_gb": 128},
            },
        ),
    ]
    ids = [submit_as(cluster, user, body) for user, body in jobs]
    wait_for(
        lambda: (
            not Job.objects.filter(
                pk__in=ids, state="PENDING", pending_reason_code__in=("", "NOT_YET_SCHEDULED")
            ).exists()
        ),
        timeout=20,
        what="every job placed or explained",
    )
    wait_for(lambda: Job.objects.filter(pk__in=ids, state="RUNNING").count() >= 3, timeout=20, what="jobs running")

    page = page_for(browser, cluster, "ops")
    page.goto(f"{cluster.url}/queue/")
    for job in Job.objects.filter(pk__in=ids, state="PENDING"):
        # A job requeued since the wait has no stored code yet: it reads NOT_YET_SCHEDULED, as the page says.
        expect(page.locator(f"#job-{job.pk} .reason code")).to_have_text(job.reason_code)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "queue-busy.png"), full_page=True)
    waiting = Job.objects.get(pk=ids[3], state="PENDING")  # llama-70b-sft: over its team's borrowing limit
    # The leader's forecast (a child process of the real scheduler) gives it a start.
    wait_for(lambda: Job.objects.get(pk=waiting.pk).estimated_start is not None, timeout=30, what="a start forecast")
    page.goto(f"{cluster.url}/jobs/{waiting.pk}/")
    expect(page.locator("#why-pending")).to_contain_text(waiting.pending_reason_code)
    expect(page.locator("#forecast")).to_contain_text("at the latest")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "job-waiting.png"), full_page=True)
    page.goto(f"{cluster.url}/nodes/")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "nodes-busy.png"), full_page=True)


def test_the_job_pages_log_tail_streams_new_lines_without_polling(cluster, browser, tmp_path):
    import urllib.request

    # Lines 0-2 at once; line 3 only once the page has loaded (the test opens the gate), so it can
    # only come over the stream, however slow the machine is.
    gate = tmp_path / "gate"

    body = {
        "team": "research-foundation-models",
        "name": "counts-slowly",
        "command": [
            sys.executable,
            "-c",
            "import os, time\nfor i in range(3): print(f'line {i}', flush=True)\n"
            f"deadline = time.time() + 60\nwhile not os.path.exists({str(gate)!r}) and time.time() < deadline:\n"
            "    time.sleep(0.1)\nprint('line 3', flush=True)",
        ],
        "resources": {"gpu_count": 8, "gpu_type": "H100"},
    }
    request = urllib.request.Request(
        f"{cluster.url}/api/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_token('alice')}"},
    )
    job_id = json.loads(urllib.request.urlopen(request).read())["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).state == "RUNNING", timeout=20, what="the job RUNNING")

    page = page_for(browser, cluster, "alice")
    fetched = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(f"{cluster.url}/jobs/{job_id}/")
    log = page.locator("#log pre")
    expect(log).to_contain_text("line 2", timeout=15_000)
    assert "line 3" not in log.text_content()  # still running: what follows comes over the stream
    gate.touch()
    expect(log).to_contain_text("line 3", timeout=15_000)
    assert len([url for url in fetched if f"/jobs/{job_id}/log/" in url]) == 1  # the tail was not re-fetched
    streams = [url for url in fetched if "/logs?follow=1" in url]
    assert streams, fetched
    fragments = [url for url in fetched if f"/jobs/{job_id}/log/" in url]
    assert not [url for url in fragments if "poll=1" in url], fragments  # never fell back to polling
    assert "line 0\nline 1\nline 2\nline 3" in log.text_content()
