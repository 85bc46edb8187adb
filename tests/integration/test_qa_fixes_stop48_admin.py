"""QA stop 48, admin surfaces: the teams page's quota form against a change made while it was
open, the console's rack tick under a filter, its Schedule window's UTC offset, the bulk API's
empty rack, a repeated token reset, and a node name that is another endpoint's address."""

import re
from html import unescape

import pytest
from rest_framework.test import APIClient

from agents.pages import NO_TOKEN_TO_RESET, NONE_SHOWN
from agents.services import NAME_IS_A_ROUTE
from mlqueue.date_fields import BAD_OFFSET
from scheduling.models import MaintenanceWindow, Node, SchedulerLease
from scheduling.web.teams_page import CHANGED_SINCE, FORM_OUT_OF_DATE
from teams.models import AuditEvent, Quota
from tests.nodes import drain, heartbeat

FM = "research-foundation-models"
H100 = "gpu:H100"
EDIT_ROW = f"/teams/?team={FM}&resource_class=gpu%3AH100&edit=1"
HTMX = {"HTTP_HX_REQUEST": "true"}
Z1_R4 = [f"z1-r4-cpu-0{i}" for i in range(1, 5)]
BOOTSTRAP = "bootstrap-join-secret"


@pytest.fixture
def ready(demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()


def form_fields(html: str) -> dict[str, str]:
    """The form's inputs by name, as a browser would post them (the reason left to the test)."""
    return {name: unescape(value) for name, value in re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', html)}


def opened_form(client) -> dict[str, str]:
    return form_fields(client.get(EDIT_ROW, **HTMX).content.decode())


def admin_patch(api, **fields):
    body = {"reason": "budget cut", "quotas": {H100: fields}}
    assert api("ops").patch(f"/api/v1/teams/{FM}/quotas", body, format="json").status_code == 200


def quota() -> tuple:
    row = Quota.objects.get(team__name=FM, resource_class=H100)
    return row.guaranteed, row.borrowing_limit, row.weight


def quota_events() -> list[tuple[str, str]]:
    return list(AuditEvent.objects.filter(kind="QUOTA_CHANGED").order_by("id").values_list("actor_name", "message"))


# --- 1. the teams page's quota form -------------------------------------------------------------


def test_the_form_carries_the_values_it_was_drawn_with(logged_in):
    fields = opened_form(logged_in("rita"))
    assert {name: fields[name] for name in ("seen_guaranteed", "seen_borrowing_limit", "seen_weight")} == {
        "seen_guaranteed": "32",
        "seen_borrowing_limit": "64",
        "seen_weight": "1.0",
    }


def test_a_stale_form_saves_only_what_its_user_changed(logged_in, api):
    """QA: the admin's cut of the borrowing limit, made while rita's form was open, was undone by
    her save of the guarantee alone, and logged as hers."""
    rita = logged_in("rita")
    form = opened_form(rita)
    admin_patch(api, borrowing_limit=40)

    response = rita.post("/teams/", {**form, "guaranteed": "33", "reason": "one more"}, **HTMX)

    assert response.status_code == 200 and 'class="editing"' not in response.content.decode()
    assert quota() == (33, 40, 1.0)
    assert quota_events() == [
        ("ops", f"{FM} {H100}: borrowing_limit 64 -> 40 (budget cut)"),
        ("rita", f"{FM} {H100}: guaranteed 32 -> 33 (one more)"),
    ]


def test_a_field_its_user_never_touched_is_not_checked_against_her_rights(logged_in, api):
    """QA: the admin changed the weight while rita's form was open; her save of the guarantee
    was refused for the weight, which only the team above may set."""
    rita = logged_in("rita")
    form = opened_form(rita)
    admin_patch(api, weight=2.0)

    html = rita.post("/teams/", {**form, "guaranteed": "33", "reason": "one more"}, **HTMX).content.decode()

    assert "may change" not in html and quota() == (33, 64, 2.0)


def test_a_field_changed_by_both_is_refused_naming_the_new_value_and_who_set_it(logged_in, api):
    rita = logged_in("rita")
    form = opened_form(rita)
    admin_patch(api, borrowing_limit=40)

    typed = {**form, "guaranteed": "33", "borrowing_limit": "50", "reason": "need more"}
    html = unescape(rita.post("/teams/", typed, **HTMX).content.decode())

    message = CHANGED_SINCE.format(field="borrowing_limit", now=40, who="ops", seen=64, typed=50)
    assert re.search(rf'name="borrowing_limit".*?<span class="error">{re.escape(message)}</span>', html, re.DOTALL)
    assert quota() == (32, 40, 1.0) and len(quota_events()) == 1
    again = form_fields(html)  # what was typed, and the quota as it is now as the form's base
    assert (again["guaranteed"], again["borrowing_limit"], again["reason"]) == ("33", "50", "need more")
    assert (again["seen_guaranteed"], again["seen_borrowing_limit"]) == ("32", "40")

    rita.post("/teams/", again, **HTMX)  # saved again, knowingly: hers over the admin's
    assert quota() == (33, 50, 1.0)
    assert quota_events()[-1] == ("rita", f"{FM} {H100}: guaranteed 32 -> 33, borrowing_limit 40 -> 50 (need more)")


def test_two_tabs_of_one_lead_do_not_undo_each_other(logged_in):
    rita = logged_in("rita")
    first, second = opened_form(rita), opened_form(rita)
    rita.post("/teams/", {**first, "borrowing_limit": "60", "reason": "tab one"}, **HTMX)
    rita.post("/teams/", {**second, "guaranteed": "30", "reason": "tab two"}, **HTMX)
    assert quota() == (30, 60, 1.0)


def test_a_form_with_broken_original_values_is_refused_not_saved(logged_in):
    rita = logged_in("rita")
    form = {**opened_form(rita), "seen_borrowing_limit": "lots", "guaranteed": "33", "reason": "x"}
    html = unescape(rita.post("/teams/", form, **HTMX).content.decode())
    assert FORM_OUT_OF_DATE in html and quota() == (32, 64, 1.0)


# --- 3. a rack's tick under a filter ------------------------------------------------------------


def test_a_filtered_racks_label_counts_what_it_shows_of_the_whole(logged_in, ready):
    drain("z1-r4-cpu-02")
    ops = logged_in("ops")
    html = ops.get("/nodes/?state=DRAINING").content.decode()
    assert 'data-shown="1" data-size="4">· zone z1 · 1 of 4 shown</span>' in html
    assert '<input type="hidden" name="shown-in:z1-r4" value="z1-r4-cpu-02">' in html
    unfiltered = ops.get("/nodes/").content.decode()
    assert "shown-in:" not in unfiltered and "· zone z1 · 4</span>" in unfiltered


@pytest.mark.parametrize(("query", "shown"), [("state=DRAINING", "z1-r4-cpu-02"), ("name=cpu-03", "z1-r4-cpu-03")])
def test_under_a_filter_a_ticked_rack_acts_on_the_nodes_it_showed(logged_in, ready, query, shown):
    """QA: on /nodes/?state=DRAINING a rack labelled 1 was ticked and cordoned: its 3 READY
    nodes, not shown, were cordoned too."""
    drain("z1-r4-cpu-02")
    ops = logged_in("ops")
    form = form_fields(ops.get(f"/nodes/?{query}").content.decode())
    assert form["shown-in:z1-r4"] == shown

    body = {"action": "cordon", "reason": "fan", "racks": "z1-r4", "shown-in:z1-r4": form["shown-in:z1-r4"]}
    html = ops.post(f"/nodes/?{query}", body, **HTMX).content.decode()

    assert f"1 node cordoned: {shown}." in html
    cordoned = Node.objects.filter(name__in=Z1_R4, admin_state="CORDONED").values_list("name", flat=True)
    assert list(cordoned) == [shown]


def test_under_a_filter_a_ticked_rack_without_its_shown_nodes_is_refused(logged_in, ready):
    ops = logged_in("ops")
    html = unescape(
        ops.post("/nodes/?name=cpu-03", {"action": "cordon", "reason": "x", "racks": "z1-r4"}).content.decode()
    )
    assert NONE_SHOWN.format(racks="z1-r4") in html
    assert not Node.objects.filter(admin_state="CORDONED").exists()


def test_under_a_filter_a_window_on_a_ticked_rack_is_for_the_nodes_it_showed(clock, logged_in, ready):
    ops = logged_in("ops")
    body = {"action": "maintenance", "racks": "z1-r4", "shown-in:z1-r4": "z1-r4-cpu-03", "reason": "fan"}
    response = ops.post("/nodes/?name=cpu-03", {**body, "starts_at": "2026-04-20T10:00", "hours": "1"})
    assert response.status_code == 302
    assert MaintenanceWindow.objects.get().nodes == ["z1-r4-cpu-03"]


def test_unfiltered_a_ticked_rack_is_the_whole_rack(logged_in, ready):
    html = logged_in("ops").post("/nodes/", {"action": "cordon", "reason": "fan", "racks": "z1-r4"}, **HTMX)
    assert "4 nodes cordoned" in html.content.decode()


# --- 10. the Schedule window's UTC offset ----------------------------------------------------


def test_the_console_says_the_apis_words_for_an_offset_out_of_range(logged_in):
    typed = "2026-12-06T02:00+25:00"
    body = {"action": "maintenance", "racks": "z2-r3", "starts_at": typed, "hours": "1", "reason": "x"}
    html = unescape(logged_in("ops").post("/nodes/", body, **HTMX).content.decode())
    assert f"starts_at: {BAD_OFFSET.format(value=typed, offset='+25:00')}" in html
    assert "timedelta" not in html


# --- 11. the bulk API's empty rack ------------------------------------------------------------


def test_an_empty_rack_is_named_under_the_field_it_was_sent_in(api):
    ops = api("ops")
    listed = ops.post(
        "/api/v1/nodes/bulk", {"action": "cordon", "racks": ["z1-r3", "zz-r9"], "reason": "x"}, format="json"
    )
    assert (listed.status_code, listed.json()["fields"]) == (400, {"racks": ["no node is in rack zz-r9."]})
    alone = ops.post("/api/v1/nodes/bulk", {"action": "cordon", "rack": "zz-r9", "reason": "x"}, format="json")
    assert alone.json()["fields"] == {"rack": ["no node is in rack zz-r9."]}


# --- 9. a repeated token reset --------------------------------------------------------------


def test_a_reset_of_a_node_without_a_token_changes_and_records_nothing(api, ready, logged_in):
    name = "z1-r1-h100-01"
    Node.objects.filter(name=name).update(token_digest="x" * 64)
    ops = api("ops")
    answers = [ops.post(f"/api/v1/nodes/{name}/reset-token", {"reason": "again"}, format="json") for _ in range(3)]
    assert [answer.json()["changed"] for answer in answers] == [True, False, False]
    assert AuditEvent.objects.filter(node__name=name, reason="NODE_TOKEN_RESET").count() == 1
    assert Node.objects.get(name=name).health == "SUSPECT"
    html = logged_in("ops").post("/nodes/", {"node": name, "action": "reset_token", "reason": "x"}, **HTMX)
    assert NO_TOKEN_TO_RESET.format(node=name) in unescape(html.content.decode())
    assert AuditEvent.objects.filter(node__name=name, reason="NODE_TOKEN_RESET").count() == 1


# --- 6. a node name that is another endpoint's address --------------------------------------


def register(name: str):
    body = {
        "name": name,
        "zone": "z9",
        "rack": "z9-r1",
        "gpu_type": "",
        "gpu_count": 0,
        "cpu_count": 8,
        "memory_gb": 16,
    }
    return APIClient().post("/api/v1/agents/register", body, format="json", HTTP_AUTHORIZATION=f"Bearer {BOOTSTRAP}")


def test_a_node_cannot_be_named_as_another_endpoint(db, settings, fresh_liveness):
    """QA: a node registered as `bulk`, and GET /api/v1/nodes/bulk answered the bulk action's 405."""
    settings.MLQ_AGENT_JOIN_TOKEN = BOOTSTRAP
    refused = register("bulk")
    message = NAME_IS_A_ROUTE.format(name="bulk", path="/api/v1/nodes/bulk")
    assert (refused.status_code, refused.json()["fields"]) == (400, {"name": [message]})
    assert not Node.objects.filter(name="bulk").exists()
    for name in ("Bulk", "bulk-1", "cordon", "events"):  # a name is a route only where it resolves as one
        assert register(name).status_code == 201, name
