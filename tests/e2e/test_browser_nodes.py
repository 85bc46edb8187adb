"""The nodes console in a real browser with the planning fleet (issue 19): 2,500 machines in
32 racks, an admin picks a rack, gives one reason and drains it; the rack's squares turn
DRAINING in place (htmx), each node has its audit entry. Screenshot: nodes-console.png
(docs/screenshots/ with MLQ_SCREENSHOTS=1)."""

import pytest
from playwright.sync_api import expect

from bench.nodes_page import populate
from scheduling.models import Node
from teams.models import AuditEvent
from tests.e2e.browser import log_in, screenshot_dir
from tests.e2e.test_browser import browser  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
RACK = "z1-r3"


def test_an_admin_drains_a_rack_of_a_2500_node_fleet_from_the_console(live_server, demo, browser, tmp_path):  # noqa: F811
    populate(2500)
    rack = list(Node.objects.filter(rack=RACK).values_list("name", "health"))
    page = browser.new_context(viewport={"width": 1600, "height": 1000}).new_page()
    log_in(page, live_server.url, "ops")
    page.goto(f"{live_server.url}/nodes/")
    expect(page.locator(".cell[id^=node-]")).to_have_count(2500)
    expect(page.locator("#matching")).to_have_attribute("data-count", "2500")

    page.locator(f"#rack-{RACK} input[name=racks]").check()
    page.locator("#bulk-bar input.reason").fill("replace the rack's PDU")
    page.locator("#bulk-bar button[value=drain]").click()
    expect(page.locator("#notice")).to_contain_text(f"{len(rack)} nodes drained", timeout=15_000)
    up = [name for name, health in rack if health == "READY"]
    expect(page.locator(f"#rack-{RACK} .cell[data-state=DRAINING]")).to_have_count(len(up))
    for name, health in rack[:3]:
        expect(page.locator(f"#node-{name}")).to_have_attribute(
            "data-state", "DRAINING" if health == "READY" else health
        )
    events = AuditEvent.objects.filter(kind="NODE_STATE", reason="DRAINING", actor_name="ops")
    assert sorted(events.values_list("node__name", flat=True)) == sorted(name for name, _ in rack)
    assert set(events.values_list("message", flat=True)) == {"draining: replace the rack's PDU"}
    page.screenshot(path=str(screenshot_dir(tmp_path) / "nodes-console.png"), full_page=True)

    page.locator(f"#node-{up[0]}").click()
    expect(page.locator("#node-state")).to_have_attribute("data-state", "DRAINING")
    expect(page.locator("#history")).to_contain_text("draining: replace the rack's PDU")
