"""A pipeline's page in a real browser (issue 17), on the whole system with the demo fleet: the DAG
is drawn with each step's state and follows the steps live, without a reload; a step's box links
to its page, which links back. Screenshot: pipeline-page.png (docs/screenshots/ with
MLQ_SCREENSHOTS=1)."""

import sys

import pytest
from playwright.sync_api import expect

from tests.e2e.browser import screenshot_dir
from tests.e2e.test_browser import api_token, browser, cluster, page_for, submit_as  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ONE_GPU = {"gpu_count": 1, "gpu_type": "H100"}


def sleep(seconds: float) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


def test_the_pipeline_page_draws_its_steps_and_follows_them_live(cluster, browser, tmp_path):  # noqa: F811
    pipeline = {
        "steps": [
            {"name": "prepare", "command": sleep(3)},
            {"name": "train", "after": ["prepare"], "command": sleep(120)},
            {"name": "evaluate", "after": ["train"], "command": sleep(1)},
            {"name": "notify-failure", "after": ["train"], "when": "failure", "command": sleep(1)},
        ]
    }
    body = {"team": "research-foundation-models", "name": "nightly", "resources": ONE_GPU, "topology_hint": "none"}
    parent_id = submit_as(cluster, "alice", {**body, "pipeline": pipeline})

    page = page_for(browser, cluster, "alice")
    page.goto(f"{cluster.url}/jobs/{parent_id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    dag = page.locator("#pipeline-dag")
    expect(dag.locator(".dag-step")).to_have_count(4)
    expect(dag.locator(".dag-edge")).to_have_count(3)
    # prepare runs, ends; train starts: the boxes follow without a reload.
    expect(dag.locator('[data-step="prepare"]')).to_have_attribute("data-state", "SUCCEEDED", timeout=30_000)
    expect(dag.locator('[data-step="train"]')).to_have_attribute("data-state", "RUNNING", timeout=30_000)
    expect(dag.locator('[data-step="evaluate"]')).to_have_attribute("data-state", "PENDING")
    page.screenshot(path=str(screenshot_dir(tmp_path) / "pipeline-page.png"), full_page=True)

    dag.locator('[data-step="train"]').click()
    expect(page.locator("#member-of")).to_contain_text("Step train of pipeline")
    page.locator("#member-of a").click()
    expect(page.locator("#pipeline-dag")).to_be_visible()
