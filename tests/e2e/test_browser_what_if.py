"""The what-if preview in a real browser (headless Chromium): a lead proposes a quota change on
the teams page, a real Celery worker (Redis broker) replays the ledger's history under both
quotas while the page polls its progress, and the page shows each team now and as proposed.
Takes docs/screenshots/what-if.png (tests/e2e/browser.py)."""

import pytest
from playwright.sync_api import expect

from scheduling.models import QuotaPreview
from tests.e2e.browser import screenshot_dir
from tests.e2e.cluster import Cluster
from tests.e2e.test_browser import browser, page_for  # noqa: F401 (a fixture)
from tests.e2e.test_schedules import celery
from tests.ledger_history import FM, around_the_morning, busy_morning

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster(tmp_path, demo):
    """Web, scheduler and a Celery worker on the demo data, and a morning of history."""
    busy_morning()
    around_the_morning()
    running = Cluster(tmp_path).start(agents=[])
    celery(running, "worker", "--pool", "solo", "--without-heartbeat", "--without-gossip", "--without-mingle")
    yield running
    running.stop()


def test_a_lead_previews_a_quota_change_and_sees_each_team_now_and_as_proposed(cluster, browser, tmp_path):  # noqa: F811
    page = page_for(browser, cluster, "rita")
    page.goto(f"{cluster.url}/teams/")
    form = page.locator("#what-if-form")
    form.locator("select[name=team]").select_option(FM)
    form.locator("select[name=resource_class]").select_option("gpu:H100")
    form.locator("input[name=borrowing_limit]").fill("0")
    form.locator("input[name=from]").fill("2026-04-13")
    form.locator("input[name=to]").fill("2026-04-14")
    form.locator("#what-if-run").click()
    result = page.locator("#what-if-result")
    expect(result).to_have_attribute("data-state", "DONE", timeout=60_000)
    fm = page.locator(f"#what-if-{FM}")
    expect(fm).to_contain_text("0s → 2h00m")  # FM's average wait, held to its 32 H100
    expect(page.locator("#what-if-teams tbody tr")).to_have_count(4)  # three teams and the cluster
    assert QuotaPreview.objects.get().state == "DONE"
    result.scroll_into_view_if_needed()
    page.locator("#what-if").screenshot(path=str(screenshot_dir(tmp_path) / "what-if.png"))
