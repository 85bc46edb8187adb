"""Metrics on a real agent: a job calls `mlqueue.report` (the copy the agent puts on its
PYTHONPATH, with `-S` so no other mlqueue can be found), the agent tails the file it named in
MLQ_METRICS_FILE and ships the reports, and the API returns the job's series; in a browser, the
job page draws them with Chart.js and redraws when the job's panel refreshes live."""

import sys

import pytest

from scheduling.models import Job, JobMetric, Node
from tests.e2e.browser import screenshot_dir
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
TRAINER = (
    "import os, mlqueue\n"
    "for step in (1, 2, 3):\n"
    "    mlqueue.report(step=step, val_loss=1.0 / step)\n"
    "mlqueue.report({'eval/acc': 0.75}, step=3)\n"
    "with open(os.environ['MLQ_METRICS_FILE'], 'a') as f:\n"
    "    f.write('not a report\\n')\n"
    '    f.write(\'{"step": 4, "metrics": {"val_loss": 0.2}}\\n\')  # by hand, without time\n'
    "print('reported to', os.path.basename(os.environ['MLQ_METRICS_FILE']), mlqueue.__file__, flush=True)\n"
)


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def submit(cluster, api, script: str) -> int:
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(name=NODE["name"], state="READY").exists(), timeout=20, what="the node")
    body = {
        "team": "research-foundation-models",
        "name": "e2e-metrics",
        "command": [sys.executable, "-S", "-c", script],
        "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
    }
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_a_job_reports_metrics_and_the_api_returns_its_series(cluster, api):
    job_id = submit(cluster, api, TRAINER)
    series = lambda: api("alice").get(f"/api/v1/jobs/{job_id}/metrics").json()["series"]  # noqa: E731
    try:
        wait_for(lambda: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=20, what="the job to succeed")
        wait_for(lambda: len(series().get("val_loss", [])) == 4, timeout=10, what="the reports")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    found = series()
    assert [(p["step"], p["value"], p["rank"], p["attempt"]) for p in found["val_loss"]] == [
        (1, 1.0, 0, 1),
        (2, 0.5, 0, 1),
        (3, 1.0 / 3, 0, 1),
        (4, 0.2, 0, 1),
    ]
    assert [(p["step"], p["value"]) for p in found["eval/acc"]] == [(3, 0.75)]
    assert all(p["time"] for p in found["val_loss"])
    log = api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()["text"]
    assert "reported to .mlq-metrics.jsonl" in log and "/python/mlqueue/__init__.py" in log


def slow_trainer(gate) -> str:
    """Two reports, then (once the test has looked at the page and opens `gate`) two more, then
    the job ends: however slow the machine, the last two can only reach the page live."""
    return (
        "import os, time, mlqueue\n"
        "mlqueue.report(step=1, loss=0.9, acc=0.1)\n"
        "mlqueue.report(step=2, loss=0.7)\n"
        "deadline = time.time() + 60\n"
        f"while not os.path.exists({str(gate)!r}) and time.time() < deadline:\n"
        "    time.sleep(0.1)\n"
        "mlqueue.report(step=3, loss=0.5)\n"
        "mlqueue.report(step=4, loss=0.4, acc=0.6)\n"
    )


CHART = "Chart.getChart('metrics-chart').data.datasets.map(d => [d.label, d.data.map(p => [p.x, p.y])])"


def test_the_job_page_draws_the_metrics_and_redraws_them_live(cluster, api, monkeypatch, tmp_path):
    from django.db import connections
    from playwright.sync_api import expect, sync_playwright

    from tests.e2e.browser import CHROMIUM, FLAGS, log_in

    gate = tmp_path / "gate"
    job_id = submit(cluster, api, slow_trainer(gate))
    wait_for(lambda: JobMetric.objects.filter(job_id=job_id).count() == 3, timeout=20, what="the first reports")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            log_in(page, cluster.url, "alice")
            page.goto(f"{cluster.url}/jobs/{job_id}/")
            page.wait_for_function("window.Chart && Chart.getChart('metrics-chart')")
            assert page.evaluate(CHART) == [["acc", [[1, 0.1]]], ["loss", [[1, 0.9], [2, 0.7]]]]
            gate.touch()
            expect(page.locator("#job-state")).to_have_text("SUCCEEDED", timeout=20_000)  # the live panel
            page.wait_for_function(f"JSON.stringify({CHART}).includes('[4,0.4]')", timeout=10_000)
            assert page.evaluate(CHART) == [
                ["acc", [[1, 0.1], [4, 0.6]]],
                ["loss", [[1, 0.9], [2, 0.7], [3, 0.5], [4, 0.4]]],
            ]
            expect(page.locator("#metrics-last tbody tr").first).to_contain_text("acc0.64")
            page.locator("#job-metrics").screenshot(path=str(screenshot_dir(tmp_path) / "job-metrics.png"))
        finally:
            browser.close()
            connections.close_all()
