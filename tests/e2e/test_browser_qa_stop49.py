"""QA stop 49 in a real browser: a rack ticked and then unticked kept the nodes console's
refresh paused (the box kept the focus its click gave it); at 400 px the console's legend and
the notifications page's webhook box made the page scroll sideways. The server half:
tests/integration/test_qa_fixes_stop49_pages.py."""

import pytest

from scheduling.models import SchedulerLease
from tests.e2e.browser import log_in
from tests.e2e.test_browser import browser  # noqa: F401 (fixture)
from tests.nodes import heartbeat

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
IN_USE = "mlqueue.inUse(document.getElementById('heatmap'))"


@pytest.fixture
def ready(demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()


def test_a_rack_ticked_then_unticked_leaves_the_console_refreshing(live_server, ready, browser):  # noqa: F811
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    log_in(page, live_server.url, "ops")
    page.goto(f"{live_server.url}/nodes/")
    rack = page.locator("#rack-z2-r4 input[name=racks]")
    rack.click()
    assert page.evaluate(IN_USE) is True  # ticked: paused
    rack.click()
    assert page.evaluate("document.activeElement.name") == "racks"  # it keeps the focus
    assert page.evaluate(IN_USE) is False
    page.locator("#bulk-bar input.reason").focus()  # a text input focused still pauses
    assert page.evaluate(IN_USE) is True


@pytest.mark.parametrize(("username", "path"), [("ops", "/nodes/"), ("alice", "/account/notifications/")])
def test_the_console_and_the_notifications_page_fit_400_px(live_server, ready, browser, username, path):  # noqa: F811
    page = browser.new_context(viewport={"width": 400, "height": 800}).new_page()
    log_in(page, live_server.url, username)
    page.goto(f"{live_server.url}{path}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
