"""Maintenance windows: the admin-only API (bad input named, audited), the scheduler keeping
long jobs off a window's nodes with the reason, the start (drain, requeue) and end (uncordon,
only what it drained) on a frozen clock, and exactly once with two firers at the same instant."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from scheduling import maintenance
from scheduling.leader.worker import run_pass
from scheduling.models import AdminState, Job, MaintenanceState, MaintenanceWindow, Node, StopReason, Task
from teams.models import AuditEvent
from tests.conftest import FROZEN_AT, make_spec
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.nodes import cordon

Z1_R1 = [f"z1-r1-h100-0{i}" for i in range(1, 9)]
Z2_R1 = [f"z2-r1-h100-0{i}" for i in range(1, 9)]
AT_10 = "2026-04-20T10:00:00Z"


def window_body(**overrides) -> dict:
    return {"rack": "z1-r1", "starts_at": AT_10, "duration_hours": 4, "reason": "PDU swap", **overrides}


def schedule_window(api, **overrides) -> MaintenanceWindow:
    response = api("ops").post("/api/v1/maintenance", window_body(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return MaintenanceWindow.objects.get(pk=response.json()["id"])


def submit(api, *, hours: float, gpus: int = 8) -> Job:
    spec = make_spec(
        client_job_id=f"maintenance-{hours}-{Job.objects.count()}",
        resources={"gpu_count": gpus, "gpus_per_task": gpus},
        max_runtime_hours=hours,
    )
    response = api("alice").post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        (
            {"starts_at": "2026-04-20T08:59:00Z"},
            "starts_at",
            "must be in the future (it is 2026-04-20 09:00:00 UTC now).",
        ),
        (
            {"duration_hours": None, "ends_at": "2026-04-20T09:30:00Z"},
            "ends_at",
            "must be after starts_at (2026-04-20 10:00 UTC).",
        ),
        ({"ends_at": "2026-04-20T12:00:00Z"}, "ends_at", "give ends_at or duration_hours, not both."),
        ({"duration_hours": None}, "ends_at", "give ends_at or duration_hours."),
        ({"duration_hours": 24 * 31}, "duration_hours", "Ensure this value is less than or equal to 720."),
        (
            {"duration_hours": None, "ends_at": "2026-05-20T10:00:01Z"},  # 720 h and a second
            "ends_at",
            "a window lasts at most 30 days (720 h); 720.000277778 h asked.",
        ),
        ({"rack": "z9-r9"}, "rack", "no node is in rack z9-r9."),
        ({"rack": "", "zone": "z7"}, "zone", "no node is in zone z7."),
        ({"rack": "", "names": ["z1-r1-h100-01", "nope"]}, "names", "no such node: nope."),
        ({"zone": "z1"}, "rack", "give exactly one of rack, zone or names."),
        ({"rack": ""}, "rack", "give exactly one of rack, zone or names."),
        ({"reason": ""}, "reason", "This field may not be blank."),
        ({"starts_at": "tomorrow"}, "starts_at", None),
        (
            {"starts_at": "2026-02-30T10:00:00Z"},
            "starts_at",
            "'2026-02-30T10:00:00Z' is in the right format but is not a real date and time: day is out of range "
            "for month.",
        ),
        ({"starts_at": "2027-04-21T10:00:00Z"}, "starts_at", "must be within a year from now."),
        ({"starts_at": "9999-12-31T23:00:00Z"}, "starts_at", "must be within a year from now."),
        # No window of a moment, whichever way its end is given.
        (
            {"duration_hours": None, "ends_at": "2026-04-20T10:00:00.500Z"},
            "ends_at",
            "a window lasts at least 0.001 h (3.6 s; 0.5 s asked).",
        ),
        ({"duration_hours": 0.0001}, "duration_hours", "Ensure this value is greater than or equal to 0.001."),
        # Strict types: true is not 1 hour, a number is not a reason, and nothing unknown passes.
        ({"duration_hours": True}, "duration_hours", "must be a number, not bool."),
        ({"reason": 123}, "reason", "must be a string, not int."),
        ({"reason": "\u200b"}, "reason", None),  # a zero-width space is no reason
        ({"reason": "\x07bell"}, "reason", None),
        ({"state": "DONE"}, "state", "unknown field."),
    ],
)
def test_bad_windows_are_refused_naming_the_field(clock, api, overrides, field, message):
    body = {key: value for key, value in window_body(**overrides).items() if value is not None}
    response = api("ops").post("/api/v1/maintenance", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    if message is not None:
        assert response.json()["fields"][field] == [message]
        assert response.json()["detail"] == f"{field}: {message}"
    assert not MaintenanceWindow.objects.exists()


def test_overlapping_windows_on_a_node_are_refused(clock, api):
    first = schedule_window(api)
    response = api("ops").post(
        "/api/v1/maintenance",
        {"names": ["z1-r1-h100-03"], "starts_at": "2026-04-20T13:00:00Z", "duration_hours": 2, "reason": "x"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["fields"]["starts_at"] == [
        f"overlaps maintenance #{first.pk} (rack z1-r1, 2026-04-20 10:00 to 2026-04-20 14:00 UTC) on 1 of its nodes "
        "(z1-r1-h100-03); windows on the same node may not overlap: change or cancel that one first."
    ]
    # Back to back, or elsewhere at the same time, is fine.
    schedule_window(api, names=["z1-r1-h100-03"], rack="", starts_at="2026-04-20T14:00:00Z")
    schedule_window(api, rack="z2-r1")


def test_only_site_admins_see_or_schedule_windows(clock, api):
    assert api("rita").post("/api/v1/maintenance", window_body(), format="json").status_code == 403
    assert api("alice").get("/api/v1/maintenance").status_code == 403
    assert api(None).get("/api/v1/maintenance").status_code in (401, 403)
    window = schedule_window(api)
    assert api("alice").delete(f"/api/v1/maintenance/{window.pk}").status_code == 403


def test_schedule_change_cancel_are_listed_and_audited(clock, api):
    window = schedule_window(api)
    body = api("ops").get("/api/v1/maintenance").json()
    assert [(w["id"], w["target"], w["nodes"], w["state"], w["duration_hours"]) for w in body] == [
        (window.pk, "rack z1-r1", Z1_R1, "SCHEDULED", 4.0)
    ]
    moved = api("ops").patch(
        f"/api/v1/maintenance/{window.pk}",
        {"starts_at": "2026-04-20T11:00:00Z", "reason": "PDU swap, later"},
        format="json",
    )
    assert moved.status_code == 200, moved.json()
    # Moved, it keeps its 4 hours (the old end kept made it 3 hours, unasked).
    assert (moved.json()["starts_at"], moved.json()["ends_at"]) == ("2026-04-20T11:00:00Z", "2026-04-20T15:00:00Z")
    same = api("ops").patch(f"/api/v1/maintenance/{window.pk}", {"reason": "PDU swap, later"}, format="json")
    assert same.status_code == 200 and same.json()["ends_at"] == "2026-04-20T15:00:00Z"  # nothing changed: no event
    cancelled = api("ops").delete(f"/api/v1/maintenance/{window.pk}")
    assert cancelled.json()["state"] == "CANCELLED"
    assert api("ops").delete(f"/api/v1/maintenance/{window.pk}").status_code == 409
    assert api("ops").get("/api/v1/maintenance").json() == []
    assert [w["id"] for w in api("ops").get("/api/v1/maintenance?state=CANCELLED").json()] == [window.pk]
    either = api("ops").get("/api/v1/maintenance?state=CANCELLED&state=SCHEDULED").json()  # not the last alone
    assert [w["id"] for w in either] == [window.pk]
    assert api("ops").get("/api/v1/maintenance?state=DONE&state=OVER").json()["fields"]["state"] == [
        "one of SCHEDULED, ACTIVE, DONE, CANCELLED, not 'OVER'."
    ]
    typo = api("ops").get("/api/v1/maintenance?stat=DONE")  # it listed every open window, as if unfiltered
    assert (typo.status_code, list(typo.json()["fields"])) == (400, ["stat"])
    paged = api("ops").get("/api/v1/maintenance?limit=5")  # not paginated: a limit would be ignored
    assert paged.json()["fields"] == {"limit": ["not a parameter here: it takes state."]}
    events = AuditEvent.objects.filter(kind="MAINTENANCE").order_by("id")
    history = api("ops").get(f"/api/v1/maintenance/{window.pk}/events").json()["results"]
    assert [e["id"] for e in history] == [e.pk for e in reversed(events)]  # newest first
    assert api("alice").get(f"/api/v1/maintenance/{window.pk}/events").status_code == 403
    assert api("ops").get("/api/v1/maintenance/999999/events").json() == {
        "detail": "no such maintenance window: 999999."
    }
    assert [(e.actor_name, e.reason, e.data["window"]) for e in events] == [
        ("ops", "SCHEDULED", window.pk),
        ("ops", "CHANGED", window.pk),
        ("ops", "CANCELLED", window.pk),
    ]
    assert events[1].message == (
        f"maintenance #{window.pk} changed: rack z1-r1, 2026-04-20 11:00 to 15:00 UTC: PDU swap, later"
    )


def test_a_long_job_is_kept_off_the_windows_and_a_short_one_is_not(clock, api, leader):
    schedule_window(api)  # z1-r1 at 10:00 for 4 h
    later = schedule_window(api, rack="z2-r1", starts_at="2026-04-20T12:00:00Z", duration_hours=1.5)
    first = MaintenanceWindow.objects.get(target="rack z1-r1")
    long, short = submit(api, hours=6), submit(api, hours=1)
    run_pass(epoch=leader)
    long.refresh_from_db()
    assert long.pending_reason_code == "MAINTENANCE"
    assert long.pending_reason_message == (
        f"rack z1-r1 drains at 2026-04-20 10:00 UTC for 4 h (maintenance #{first.pk}); "
        "this job's 6 h time limit would run into it"
    )
    assert Task.objects.get(job=short).node.rack in ("z1-r1", "z2-r1")
    # "What would help" tries the free room off the windows too, and names the longest limit that
    # starts now: up to z2-r1's window, 3 h away (it said 1 h, z1-r1's, the first window on the
    # nodes a placement ignoring windows would take).
    why = api("alice").get(f"/api/v1/jobs/{long.pk}/why").json()
    assert why["reason"]["code"] == "MAINTENANCE"
    assert why["suggestions"][0] == f"fits now with a time limit of at most 3 h (ending before maintenance #{later.pk})"
    # Once z2-r1's window is cancelled, the long job goes there.
    api("ops").delete(f"/api/v1/maintenance/{later.pk}")
    run_pass(epoch=leader)
    assert Task.objects.get(job=long).node.rack == "z2-r1"


def test_the_window_drains_on_time_and_uncordons_only_what_it_drained(clock, api, leader):
    job = submit(api, hours=24)  # running before the window was scheduled
    run_pass(epoch=leader)
    task = Task.objects.get(job=job)
    run_all_ranks(job)
    busy, idle, fan = task.node.name, *[name for name in Z1_R1 + Z2_R1 if name != task.node.name][:2]
    cordon(fan, reason="bad fan")  # an admin's cordon before the window
    window = schedule_window(api, names=[busy, idle, fan], rack="")

    clock.move_to(FROZEN_AT + timedelta(minutes=59, seconds=59))
    assert maintenance.run_due() == ([], [])
    clock.move_to(FROZEN_AT + timedelta(hours=1))
    run_pass(epoch=leader)  # the leader's pass fires it
    window.refresh_from_db()
    assert (window.state, window.drained) == (MaintenanceState.ACTIVE, sorted([busy, idle]))
    reason = f"maintenance #{window.pk}: PDU swap (until 2026-04-20 14:00 UTC)"
    assert {n.name: (n.admin_state, n.admin_reason) for n in Node.objects.filter(name__in=window.nodes)} == {
        busy: (AdminState.DRAINING, reason),
        idle: (AdminState.DRAINING, reason),
        fan: (AdminState.CORDONED, "bad fan"),
    }
    assert Node.objects.get(name=busy).state_reason == reason
    task.refresh_from_db()
    assert task.stop_reason == StopReason.DRAIN  # SIGTERM now, the job's grace, then requeued
    drains = AuditEvent.objects.filter(kind="NODE_STATE", reason="DRAINING", actor_name=f"maintenance #{window.pk}")
    assert drains.count() == 2

    cordon(idle, reason="found a bad DIMM")  # an admin's own cordon during the window
    clock.move_to(FROZEN_AT + timedelta(hours=5))
    assert maintenance.run_due() == ([], [window.pk])
    assert {n.name: (n.admin_state, n.admin_reason) for n in Node.objects.filter(name__in=window.nodes)} == {
        busy: (AdminState.NONE, ""),
        idle: (AdminState.CORDONED, "found a bad DIMM"),
        fan: (AdminState.CORDONED, "bad fan"),
    }
    ended = AuditEvent.objects.get(kind="MAINTENANCE", reason="ENDED")
    assert ended.message == f"maintenance #{window.pk} ended: uncordoned 1 node(s); left as they are: {idle}"


def test_cancelling_an_active_window_ends_it_now(clock, api, leader):
    window = schedule_window(api)
    clock.move_to(FROZEN_AT + timedelta(hours=2))
    assert maintenance.run_due() == ([window.pk], [])
    assert api("ops").patch(f"/api/v1/maintenance/{window.pk}", {"reason": "x"}, format="json").status_code == 409
    assert api("ops").delete(f"/api/v1/maintenance/{window.pk}").json()["state"] == "CANCELLED"
    assert set(Node.objects.filter(name__in=Z1_R1).values_list("admin_state", flat=True)) == {AdminState.NONE}
    assert maintenance.run_due() == ([], [])


def test_a_node_an_admin_uncordons_during_the_window_is_back_in_service(clock, api, leader):
    window = schedule_window(api, names=Z1_R1[:1], rack="")
    clock.move_to(FROZEN_AT + timedelta(hours=2))
    assert maintenance.run_due() == ([window.pk], [])
    for name in Z1_R1[1:] + Z2_R1:
        cordon(name, reason="kept out of this test")
    job = submit(api, hours=6)
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert job.state == "PENDING" and job.pending_reason_code != "MAINTENANCE"  # the node is drained

    response = api("ops").post(f"/api/v1/nodes/{Z1_R1[0]}/uncordon", {"reason": "swap done early"}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)
    assert Task.objects.get(job=job).node.name == Z1_R1[0]  # not held until 14:00 by the window
    clock.move_to(FROZEN_AT + timedelta(hours=5))
    assert maintenance.run_due() == ([], [window.pk])
    ended = AuditEvent.objects.get(kind="MAINTENANCE", reason="ENDED")
    assert ended.message == f"maintenance #{window.pk} ended: uncordoned 0 node(s); left as they are: {Z1_R1[0]}"


@pytest.mark.django_db(transaction=True)
def test_two_firers_at_the_same_instant_start_and_end_a_window_once(clock, api):
    window = schedule_window(api)
    results, errors = [], []
    barrier = threading.Barrier(2)

    def fire(at):
        try:
            barrier.wait()
            results.append(maintenance.run_due(now=at))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    for at in (FROZEN_AT + timedelta(hours=1), FROZEN_AT + timedelta(hours=5)):
        threads = [threading.Thread(target=fire, args=(at,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == []
    assert sorted(results) == [([], []), ([], []), ([], [window.pk]), ([window.pk], [])]
    kinds = AuditEvent.objects.filter(kind="MAINTENANCE").values_list("reason", flat=True)
    assert sorted(kinds) == ["ENDED", "SCHEDULED", "STARTED"]
    assert AuditEvent.objects.filter(kind="NODE_STATE", reason="DRAINING").count() == 8
    assert AuditEvent.objects.filter(kind="NODE_STATE", reason="UNCORDONED").count() == 8


def test_the_console_schedules_lists_and_cancels_windows(clock, logged_in):
    ops = logged_in("ops")
    body = {"racks": ["z1-r1"], "starts_at": "2026-04-20T10:00", "hours": "4", "reason": "PDU swap"}
    response = ops.post("/nodes/", {**body, "action": "maintenance"})
    assert response.status_code == 302
    window = MaintenanceWindow.objects.get()
    assert (window.target, window.nodes, window.ends_at - window.starts_at) == ("rack z1-r1", Z1_R1, timedelta(hours=4))
    page = ops.get("/nodes/").content.decode()
    notice = f"maintenance #{window.pk} scheduled: rack z1-r1, 2026-04-20 10:00 to 2026-04-20 14:00 UTC: PDU swap."
    assert notice in page  # the window named once, its times and reason
    assert f'id="window-{window.pk}" data-state="SCHEDULED"' in page
    assert "rack z1-r1" in page and "2026-04-20 10:00" in page
    node_page = ops.get("/nodes/z1-r1-h100-03/").content.decode()
    assert f'id="window-{window.pk}"' in node_page
    assert 'id="window-' not in ops.get("/nodes/z2-r1-h100-03/").content.decode()
    # The selection of a rack and a node elsewhere is named by its nodes.
    picked = {**body, "nodes": ["z2-r1-h100-01"], "starts_at": "2026-04-21T10:00", "action": "maintenance"}
    assert ops.post("/nodes/", picked).status_code == 302
    assert MaintenanceWindow.objects.get(starts_at__day=21).target == "9 nodes"
    ops.post("/nodes/", {"window": window.pk, "action": "cancel_maintenance"})
    window.refresh_from_db()
    assert window.state == MaintenanceState.CANCELLED


def test_a_cancel_drawn_before_the_window_started_does_not_end_it(clock, logged_in):
    """QA: the console's "Cancel", drawn while the window was SCHEDULED and clicked once it had
    started, ended it mid-maintenance and put its rack back in service, unasked."""
    ops = logged_in("ops")
    body = {"racks": ["z1-r1"], "starts_at": "2026-04-20T10:00", "hours": "4", "reason": "PDU swap"}
    ops.post("/nodes/", {**body, "action": "maintenance"})
    window = MaintenanceWindow.objects.get()
    assert 'name="seen" value="SCHEDULED"' in ops.get("/nodes/").content.decode()
    clock.shift(timedelta(hours=1, minutes=5))
    maintenance.run_due()
    stale = {"window": window.pk, "action": "cancel_maintenance", "seen": "SCHEDULED"}
    response = ops.post("/nodes/", stale, HTTP_HX_REQUEST="true")
    assert maintenance.CHANGED_SINCE.format(id=window.pk, seen="SCHEDULED", state="ACTIVE") in (
        response.content.decode().replace("&#x27;", "'")
    )
    window.refresh_from_db()
    assert window.state == MaintenanceState.ACTIVE
    # The heatmap's refresh brings the windows list with it (it showed SCHEDULED until a reload).
    refreshed = ops.get("/nodes/?part=heatmap", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="maintenance-windows" hx-swap-oob="true"' in refreshed and 'name="seen" value="ACTIVE"' in refreshed
    page = ops.get("/nodes/").content.decode()
    assert 'name="seen" value="ACTIVE"' in page and f"confirm('End maintenance #{window.pk} now" in page
    ops.post("/nodes/", {**stale, "seen": "ACTIVE"})
    window.refresh_from_db()
    assert window.state == MaintenanceState.CANCELLED


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"starts_at": "2026-04-20T08:00"}, "starts_at: must be in the future (it is 2026-04-20 09:00:00 UTC now)."),
        ({"starts_at": "soon"}, "starts_at: a date and time (UTC), e.g. 2026-12-02T02:00."),
        (  # was a 500
            {"starts_at": "2026-02-30T02:00"},
            "starts_at: '2026-02-30T02:00' is in the right format but is not a real date and time: day is out of "
            "range for month.",
        ),
        ({"hours": "four"}, "hours: a number of hours, e.g. 4."),
        ({"reason": " "}, "reason: say why: it is shown on the nodes and recorded in the audit log."),
        ({"racks": []}, "nodes: select the racks or nodes the window is for."),
        # Numbers Python parses that are no length (they were a 500), and a window of a moment.
        ({"hours": "nan"}, "hours: a number of hours, e.g. 4."),
        ({"hours": "inf"}, "hours: a number of hours, e.g. 4."),
        ({"hours": "1e400"}, "hours: a number of hours, e.g. 4."),
        ({"hours": "1e300"}, "hours: a number of hours from 0.001 to 720 (1e+300 asked)."),
        ({"hours": "0.0001"}, "hours: a number of hours from 0.001 to 720 (0.0001 asked)."),
        # A rack with no node was dropped: the window covered the others only.
        ({"racks": ["z1-r1", "nope"]}, "racks: no node is in rack nope."),
        # The form's field is `nodes`, as the bulk actions say (it said "names: no such node: nope.").
        ({"racks": [], "nodes": ["nope"]}, "nodes: no such node: nope."),
        ({"nodes": ["z2-r1-h100-01", "nope"]}, "nodes: no such node: nope."),
        ({"reason": "\u200b"}, "reason: must not contain U+200B ZERO WIDTH SPACE"),
    ],
)
def test_the_console_names_what_is_wrong(clock, logged_in, changes, error):
    body = {"racks": ["z1-r1"], "starts_at": "2026-04-20T10:00", "hours": "4", "reason": "PDU swap", **changes}
    response = logged_in("ops").post("/nodes/", {**body, "action": "maintenance"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200  # htmx swaps no 4xx: the refusal must reach #action-error
    assert error in response.content.decode().replace("&#x27;", "'")
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize("window", ["abc", "", "1" * 30, "١"])
def test_the_console_refuses_a_window_id_that_is_none(clock, logged_in, window):
    response = logged_in("ops").post(
        "/nodes/", {"window": window, "action": "cancel_maintenance"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200  # htmx swaps no 4xx
    assert "window: not a window id" in response.content.decode()


def test_the_console_says_a_window_is_not_there_on_the_console(clock, logged_in):
    response = logged_in("ops").post(
        "/nodes/", {"window": "999", "action": "cancel_maintenance"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200  # htmx swaps no 4xx
    assert "window: there is no maintenance window #999." in response.content.decode()


def test_a_window_whose_start_has_passed_cannot_be_changed_but_by_moving_it(clock, api):
    """Its start passed before run_due started it: a reason-only change was refused naming
    starts_at, which it had not sent."""
    window = schedule_window(api)
    clock.move_to(FROZEN_AT + timedelta(hours=1, seconds=1))  # 10:00:01, not yet started
    response = api("ops").patch(f"/api/v1/maintenance/{window.pk}", {"reason": "later"}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == maintenance.DUE.format(id=window.pk, starts_at=window.starts_at)
    moved = api("ops").patch(f"/api/v1/maintenance/{window.pk}", {"starts_at": "2026-04-20T12:00:00Z"}, format="json")
    assert moved.status_code == 200 and moved.json()["ends_at"] == "2026-04-20T16:00:00Z"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"rack": "z2-r1"}, "rack", "unknown field."),  # its nodes do not change: cancel and schedule another
        ({"state": "DONE"}, "state", "unknown field."),
        ({"duration_hours": True}, "duration_hours", "must be a number, not bool."),
        ({"duration_hours": None, "ends_at": "2026-04-20T10:00:01Z"}, "ends_at", None),
    ],
)
def test_a_change_to_a_window_is_refused_naming_the_field(clock, api, changes, field, message):
    window = schedule_window(api)
    body = {key: value for key, value in changes.items() if value is not None}
    response = api("ops").patch(f"/api/v1/maintenance/{window.pk}", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    if message is not None:
        assert response.json()["fields"][field] == [message]
    window.refresh_from_db()
    assert (window.nodes, window.state, window.ends_at - window.starts_at) == (Z1_R1, "SCHEDULED", timedelta(hours=4))
