"""QA stop 48, the nodes console in a real browser: on a filtered view a ticked rack, whose
label counts the nodes shown, acts on those nodes alone (the form posts their names beside
the rack), where it cordoned the READY nodes the filter hid."""

import pytest
from playwright.sync_api import expect

from scheduling.models import Node, SchedulerLease
from tests.e2e.browser import log_in
from tests.e2e.test_browser import browser  # noqa: F401 (fixture)
from tests.nodes import heartbeat

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_rack_ticked_on_a_filtered_console_cordons_only_the_nodes_shown(live_server, demo, browser):  # noqa: F811
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    log_in(page, live_server.url, "ops")
    page.goto(f"{live_server.url}/nodes/?name=cpu-03")
    expect(page.locator("#rack-z1-r4 .rack-count")).to_contain_text("1 of 4 shown")

    page.locator("#rack-z1-r4 input[name=racks]").check()
    page.locator("#bulk-bar input.reason").fill("fan")
    page.locator("#bulk-bar button[value=cordon]").click()

    expect(page.locator("#notice")).to_contain_text("1 node cordoned: z1-r4-cpu-03.")
    cordoned = Node.objects.filter(rack="z1-r4", admin_state="CORDONED").values_list("name", flat=True)
    assert list(cordoned) == ["z1-r4-cpu-03"]
