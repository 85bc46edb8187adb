"""Job groups in a real browser (issue 16), on the whole system with the demo fleet: the queue's
group row expands to its children and stays open across a live refresh; a sweep's page ranks
its trials and draws their curves on one chart. Screenshots: queue-group.png, sweep-page.png
(docs/screenshots/ with MLQ_SCREENSHOTS=1)."""

import sys
import urllib.request

import pytest
from playwright.sync_api import expect

from scheduling.models import Job, JobMetric
from tests.e2e.browser import screenshot_dir
from tests.e2e.processes import wait_for
from tests.e2e.test_browser import api_token, browser, cluster, page_for, submit_as  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
ONE_GPU = {"gpu_count": 1, "gpu_type": "H100"}
TEAM = "research-foundation-models"


def running_children(parent_id: int) -> int:
    return Job.objects.filter(parent_id=parent_id, state="RUNNING").count()


def test_the_queue_s_group_row_expands_to_its_children(cluster, browser, tmp_path):  # noqa: F811
    body = {"team": TEAM, "name": "shard-inference", "command": SLEEP, "resources": ONE_GPU, "topology_hint": "none"}
    parent_id = submit_as(cluster, "alice", {**body, "array": {"count": 8, "parallelism": 3}})
    wait_for(lambda: running_children(parent_id) == 3, timeout=30, what="3 elements running")
    submit_as(cluster, "alice", {**body, "name": "a-plain-job"})

    page = page_for(browser, cluster, "alice")
    page.goto(f"{cluster.url}/queue/")
    expect(page.locator("#live-status")).to_have_text("live")
    row = page.locator(f"#job-{parent_id}")
    expect(row.locator(".pending-range")).to_have_text(f"{parent_id}_[3-7]")
    expect(row.locator(".group-counts")).to_contain_text("5 pending · 3 running · 0 done · 0 failed")
    expect(page.locator("tr.group-child")).to_have_count(0)

    row.locator("[data-group-toggle]").click()
    children = page.locator(f"#group-{parent_id}-children tr.group-child")
    expect(children).to_have_count(8)
    expect(children.locator(".job-state", has_text="RUNNING")).to_have_count(3)
    page.screenshot(path=str(screenshot_dir(tmp_path) / "queue-group.png"), full_page=True)

    # A live refresh re-renders the table: the group stays open.
    page.evaluate("htmx.trigger('#queue-table', 'refresh')")
    page.wait_for_timeout(1000)
    expect(children).to_have_count(8)
    row.locator("[data-group-toggle]").click()
    expect(children).to_have_count(0)


def test_a_sweep_s_page_ranks_its_trials_and_charts_them(cluster, browser, tmp_path):  # noqa: F811
    sweep = {
        "method": "grid",
        "parameters": {"lr": [0.0003, 0.001, 0.003], "batch_size": [32, 64]},
        "parallelism": 2,
        "metric": {"name": "val_loss", "goal": "minimize"},
    }
    body = {
        "team": TEAM,
        "name": "lr-sweep",
        "command": [*SLEEP, "--lr", "{lr}"],
        "resources": ONE_GPU,
        "topology_hint": "none",
        "sweep": sweep,
    }
    parent_id = submit_as(cluster, "alice", body)
    trials = list(Job.objects.filter(parent_id=parent_id).order_by("group_index"))
    # What the agents' ingest stores from each trial's mlqueue.report(): a decaying loss, each
    # trial to its own floor; trial 3 is the best, trial 5 reports nothing yet.
    floors = {0: 0.62, 1: 0.48, 2: 0.55, 3: 0.31, 4: 0.70}
    JobMetric.objects.bulk_create(
        JobMetric(job=trials[n], rank=0, attempt=1, seq=step, step=step * 100, name="val_loss", value=value)
        for n, floor in floors.items()
        for step in range(1, 41)
        for value in [round(floor + (2.3 - floor) * 0.9**step, 4)]
    )

    page = page_for(browser, cluster, "alice")
    page.goto(f"{cluster.url}/jobs/{parent_id}/")
    ranked = page.locator("#group-children tbody tr")
    expect(ranked).to_have_count(6)
    order = [3, 1, 2, 0, 4, 5]
    for place, trial in enumerate(order):
        expect(ranked.nth(place).locator("td").nth(1)).to_have_text(str(trial))
    best = trials[3].params
    best_value = round(0.31 + (2.3 - 0.31) * 0.9**40, 4)  # its last report, step 4000
    expect(page.locator("#best-trial")).to_contain_text(
        f"trial 3 (job {trials[3].pk}), val_loss {best_value:g} at step 4000"
    )
    expect(page.locator("#best-trial")).to_contain_text(f"lr={best['lr']}, batch_size={best['batch_size']}")
    expect(page.locator("#sweep-chart")).to_be_visible()
    datasets = page.evaluate("Chart.getChart(document.getElementById('sweep-chart')).data.datasets.length")
    assert datasets == 5  # the trials that reported
    page.screenshot(path=str(screenshot_dir(tmp_path) / "sweep-page.png"), full_page=True)

    # A trial that changes is re-read live: the section hears its children's changes.
    cancel = urllib.request.Request(
        f"{cluster.url}/api/v1/jobs/{trials[5].pk}/cancel",
        data=b"{}",
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_token('alice')}"},
    )
    assert urllib.request.urlopen(cancel).status == 200
    expect(page.locator(f"#child-{trials[5].pk} .badge")).to_have_text("CANCELLED", timeout=10_000)
    expect(page.locator("#group-counts")).to_contain_text("1 cancelled")
    # The swapped-in section draws its chart after the swap: wait for it (it was read before).
    page.wait_for_function("Chart.getChart(document.getElementById('sweep-chart')) !== undefined")
    assert page.evaluate("Chart.getChart(document.getElementById('sweep-chart')).data.datasets.length") == 5
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
