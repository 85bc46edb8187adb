"""The schedules API (scheduling/web/schedules_api.py), the `schedule:` block of a submit, who
may see and change a schedule, the 400s, PATCH recomputing next_run_at, and the pages."""

import html
from datetime import UTC, datetime

import pytest
from django.test import Client

from scheduling import schedules
from scheduling.models import Job, Schedule
from teams.models import AuditEvent, EventKind

pytestmark = pytest.mark.django_db

TEAM = "research-foundation-models"
SPEC = {"name": "nightly-eval", "team": TEAM, "command": ["python", "eval.py"]}
BODY = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "spec": SPEC}


def post(api, username: str, body: dict, path: str = "/api/v1/schedules"):
    return api(username).post(path, body, format="json")


def created(api, username: str = "alice", **changes) -> dict:
    response = post(api, username, {**BODY, **changes})
    assert response.status_code == 201, response.json()
    return response.json()


def test_create_returns_the_schedule_with_its_next_fire_time_in_both_zones(clock, api):
    body = created(api)
    assert {key: body[key] for key in ("name", "team", "owner", "cron", "timezone", "concurrency", "suspended")} == {
        "name": "nightly",
        "team": TEAM,
        "owner": "alice",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "concurrency": "forbid",
        "suspended": False,
    }
    assert (body["next_run_at"], body["next_run_local"]) == ("2026-04-21T01:00:00Z", "2026-04-21T03:00:00+02:00")
    assert body["fires"] == []


def test_the_same_create_again_is_200_and_other_settings_under_the_name_409(clock, api):
    first = created(api)
    again = post(api, "alice", BODY)
    assert (again.status_code, again.json()["id"]) == (200, first["id"])
    other = post(api, "alice", {**BODY, "cron": "0 4 * * *"})
    assert other.status_code == 409
    assert other.json()["detail"] == (
        f"team {TEAM} already has schedule {first['id']} named 'nightly' with other settings "
        f"(its cron is '0 3 * * *', not '0 4 * * *'): PATCH /api/v1/schedules/{first['id']} to change it, "
        "or choose another name."
    )


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"spec": {**SPEC, "resources": {"gpu_count": "8"}}},
            "spec.resources.gpu_count",
            "must be an integer, not the string '8'.",
        ),
        ({"spec": {**SPEC, "gpu": 1}}, "spec.gpu", "unknown field."),
        ({"spec": {**SPEC, "client_job_id": "x"}}, "spec.client_job_id", schedules.CLIENT_JOB_ID_GIVEN),
        ({"spec": {**SPEC, "team": "nope"}}, "spec.team", "no team named 'nope'."),
        (
            {"cron": "0 25 * * *"},
            "cron",
            "'0 25 * * *': the hour field '25' is not valid (0-23, lists, ranges and steps).",
        ),
        (
            {"timezone": "Europe/Atlantis"},
            "timezone",
            "'Europe/Atlantis' is not an IANA time zone name such as Europe/Berlin, America/New_York or UTC.",
        ),
        (
            {"concurrency": "sometimes"},
            "concurrency",
            '"sometimes" is not a valid choice (one of allow, forbid, replace).',
        ),
        (
            {"starting_deadline_minutes": 0},
            "starting_deadline_minutes",
            "Ensure this value is greater than or equal to 1.",
        ),
        ({"suspend": "yes"}, "suspend", "must be true or false, not the string 'yes'."),
        ({"every": "day"}, "every", "unknown field."),
    ],
)
def test_a_bad_create_is_a_400_naming_the_field_and_writes_nothing(clock, api, change, field, message):
    response = post(api, "alice", {**BODY, **change})
    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {field: [message]}
    assert not Schedule.objects.exists()


def test_a_team_you_are_not_in_is_a_403(clock, api):
    response = post(api, "victor", BODY)
    assert response.status_code == 403
    assert response.json()["fields"] == {"spec.team": [f"you are not a member of team {TEAM}."]}


def test_submitting_a_spec_with_a_schedule_block_creates_a_schedule_not_a_job(clock, api):
    body = {**SPEC, "schedule": {"cron": "*/5 * * * *", "timezone": "UTC", "concurrency": "replace"}}
    response = post(api, "alice", body, path="/api/v1/jobs")
    assert response.status_code == 201
    answer = response.json()
    schedule = Schedule.objects.get()
    assert answer["created"] == "schedule"
    assert answer["message"] == (
        f"a schedule was created, not a job: schedule {schedule.pk} (nightly-eval) submits a run at each fire "
        "time of '*/5 * * * *' in UTC; the first is 2026-04-20T09:05:00+00:00."
    )
    assert (answer["schedule"]["concurrency"], answer["schedule"]["name"]) == ("replace", "nightly-eval")
    assert not Job.objects.exists()
    again = post(api, "alice", body, path="/api/v1/jobs")
    assert (again.status_code, again.json()["message"]) == (
        200,
        f"schedule {schedule.pk} (nightly-eval) already exists with these settings; nothing was created.",
    )


def test_a_bad_schedule_block_names_its_field(clock, api):
    body = {**SPEC, "schedule": {"cron": "* * *"}}
    response = post(api, "alice", body, path="/api/v1/jobs")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["schedule.cron"]


def test_members_of_the_team_see_it_and_others_do_not(clock, api):
    schedule = created(api)
    assert [row["id"] for row in api("rita").get("/api/v1/schedules").json()["results"]] == [schedule["id"]]
    assert api("victor").get("/api/v1/schedules").json()["results"] == []
    assert api("victor").get(f"/api/v1/schedules/{schedule['id']}").status_code == 404
    assert api("ops").get(f"/api/v1/schedules/{schedule['id']}").status_code == 200


@pytest.mark.parametrize(("username", "status"), [("rita", 200), ("ops", 200), ("rita-owned-alice", 403)])
def test_the_owner_leads_and_admins_may_change_it_other_members_may_not(clock, api, username, status):
    owner, actor = ("rita", "alice") if username == "rita-owned-alice" else ("alice", username)
    schedule = created(api, owner)
    response = api(actor).patch(f"/api/v1/schedules/{schedule['id']}", {"concurrency": "allow"}, format="json")
    assert response.status_code == status
    if status == 403:
        assert response.json()["detail"] == (
            f"only the schedule's owner (rita), leads of {TEAM} and site admins may change schedule {schedule['id']}."
        )


def test_patch_cron_and_timezone_recompute_the_next_fire_time(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    body = api("alice").patch(url, {"cron": "30 12 * * *", "timezone": "America/New_York"}, format="json").json()
    assert (body["next_run_at"], body["next_run_local"]) == ("2026-04-20T16:30:00Z", "2026-04-20T12:30:00-04:00")
    bad = api("alice").patch(url, {"cron": "nope"}, format="json")
    assert bad.status_code == 400
    assert list(bad.json()["fields"]) == ["cron"]
    assert Schedule.objects.get().cron == "30 12 * * *"


def test_patch_a_spec_is_validated_and_must_stay_in_the_team(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    moved = api("alice").patch(url, {"spec": {**SPEC, "team": "research-vision"}}, format="json")
    assert moved.status_code == 403  # alice is not in research-vision: refused as a submit would be
    assert moved.json()["fields"] == {"spec.team": ["you are not a member of team research-vision."]}
    p0 = api("alice").patch(url, {"spec": {**SPEC, "priority": "P0"}}, format="json")  # alice does not lead it
    assert p0.status_code == 403
    assert p0.json()["fields"] == {
        "spec.priority": [
            f"P0 is for incidents: only leads of {TEAM} (or of a team above it) and site admins may submit at P0."
        ]
    }
    bad = api("alice").patch(url, {"spec": {**SPEC, "priority": "P9"}}, format="json")
    assert bad.json()["fields"] == {"spec.priority": ['"P9" is not a valid choice (one of P0, P1, P2, P3).']}
    good = api("alice").patch(url, {"spec": {**SPEC, "command": ["python", "eval2.py"]}}, format="json")
    assert good.json()["spec"]["command"] == ["python", "eval2.py"]


def test_suspend_with_a_reason_and_resume(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    body = api("alice").patch(url, {"suspended": True, "reason": "dataset migration"}, format="json").json()
    assert (body["suspended"], body["suspended_reason"]) == (True, "suspended by alice: dataset migration")
    body = api("alice").patch(url, {"suspended": False}, format="json").json()
    assert (body["suspended"], body["suspended_reason"]) == (False, "")


def test_a_second_suspend_keeps_the_first_reason(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    api("alice").patch(url, {"suspended": True, "reason": "dataset migration"}, format="json")
    body = api("rita").patch(url, {"suspended": True, "reason": "quota review"}, format="json").json()
    assert (body["suspended"], body["suspended_reason"]) == (True, "suspended by alice: dataset migration")
    api("alice").patch(url, {"suspended": False}, format="json")
    body = api("rita").patch(url, {"suspended": True, "reason": "quota review"}, format="json").json()
    assert body["suspended_reason"] == "suspended by rita: quota review"


def test_a_suspend_reason_too_long_to_store_is_a_400_not_a_500(clock, api):
    """The reason is stored after "suspended by <user>: " in a column of 500: a reason of 500 was a 500."""
    schedule = created(api)
    response = api("alice").patch(
        f"/api/v1/schedules/{schedule['id']}", {"suspended": True, "reason": "x" * 301}, format="json"
    )
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["reason"]
    assert not Schedule.objects.get().suspended


def test_renaming_to_a_name_taken_in_the_team_is_a_409_that_says_so(clock, api):
    first = created(api)
    second = created(api, name="weekly")
    response = api("alice").patch(f"/api/v1/schedules/{second['id']}", {"name": first["name"]}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"team {TEAM} already has schedule {first['id']} named {first['name']!r}: choose another name."
    )


def test_resume_is_refused_while_the_owner_may_not_submit(clock, api, user):
    schedule = created(api)
    Schedule.objects.filter(pk=schedule["id"]).update(suspended=True, suspended_reason="paused")
    user("alice").memberships.all().delete()
    response = api("rita").patch(f"/api/v1/schedules/{schedule['id']}", {"suspended": False}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"schedule {schedule['id']} cannot resume: no longer a member; delete it and create it again as someone "
        f"who may submit to {TEAM}."
    )


def test_run_now_submits_a_run_then_forbid_refuses_while_it_is_active(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}/run"
    response = api("rita").post(url)
    assert response.status_code == 201
    fire = response.json()
    job = api("alice").get(f"/api/v1/jobs/{fire['job']}").json()
    assert (job["schedule"], job["scheduled_for"], job["owner"]) == (schedule["id"], "2026-04-20T09:00:00Z", "alice")
    clock.shift(1)  # in the same second it is the same fire time, answered with the same run
    again = api("alice").post(url)
    assert again.status_code == 409
    assert again.json()["detail"] == (
        f"schedule {schedule['id']} did not run: its last run, job {fire['job']}, is still PENDING "
        "(concurrency: forbid)"
    )
    listed = api("alice").get(f"/api/v1/jobs?schedule={schedule['id']}").json()["results"]
    assert [row["id"] for row in listed] == [fire["job"]]
    history = api("alice").get(f"/api/v1/schedules/{schedule['id']}").json()["fires"]
    assert [row["outcome"] for row in history] == ["SKIPPED_ACTIVE", "SUBMITTED"]
    assert api("victor").post(url).status_code == 404


def test_delete_keeps_the_runs(clock, api):
    schedule = created(api)
    run = api("alice").post(f"/api/v1/schedules/{schedule['id']}/run").json()
    assert api("rita").delete(f"/api/v1/schedules/{schedule['id']}").status_code == 204
    assert not Schedule.objects.exists()
    assert Job.objects.get(pk=run["job"]).schedule_id is None


def test_the_pages_list_show_and_act_with_csrf(clock, api, logged_in):
    schedule = created(api)
    client = logged_in("alice")
    listing = client.get("/schedules/").content.decode()
    assert "nightly" in listing and "2026-04-21 01:00" in listing and "2026-04-21 03:00 CEST" in listing
    # The viewer's own zone: the browser rewrites this element from its ISO instant (mlqueue.js).
    assert '<time datetime="2026-04-21T01:00:00+00:00" data-local>2026-04-21 01:00 UTC</time>' in listing
    page = client.get(f"/schedules/{schedule['id']}/").content.decode()
    assert "Run now" in page and "Suspend" in page
    client.post(f"/schedules/{schedule['id']}/suspend/", {"reason": "migration"})
    assert Schedule.objects.get().suspended_reason == "suspended by alice: migration"
    client.post(f"/schedules/{schedule['id']}/run/")
    run = Job.objects.get(schedule_id=schedule["id"])
    job_page = client.get(f"/jobs/{run.pk}/").content.decode()
    assert f'The run of schedule <a href="/schedules/{schedule["id"]}/">nightly</a>' in job_page
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(Schedule.objects.get().owner)
    assert forged.post(f"/schedules/{schedule['id']}/resume/").status_code == 403
    assert Schedule.objects.get().suspended


def test_the_page_refuses_a_bad_suspend_reason_naming_it_not_cutting_it(clock, api, logged_in):
    schedule = created(api)
    client = logged_in("alice")
    for reason, message in (
        ("y" * 400, "reason: Ensure this field has no more than 300 characters."),
        ("a\x1bb", "reason: must not contain U+001B CONTROL CHARACTER"),
    ):
        page = client.post(f"/schedules/{schedule['id']}/suspend/", {"reason": reason}, follow=True)
        assert message in html.unescape(page.content.decode()), reason
        assert not Schedule.objects.get().suspended  # not suspended with the reason cut short
    assert "ErrorDetail" not in page.content.decode()


def test_the_schema_still_builds(api):
    response = api("alice").get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/schedules/{schedule_id}/run" in response.content


def test_the_next_fire_is_in_utc_in_the_database(clock, api):
    created(api)
    assert Schedule.objects.get().next_run_at == datetime(2026, 4, 21, 1, 0, tzinfo=UTC)


def test_a_leads_new_spec_makes_the_lead_the_owner_so_nothing_runs_under_the_members_name(clock, api):
    """A lead could rewrite a member's spec and run it now: the run was the member's job (and,
    with mapped users, their UID), and nothing recorded who wrote the command."""
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    edited = api("rita").patch(url, {"spec": {**SPEC, "command": ["sh", "-c", "whoami"]}}, format="json")
    assert edited.status_code == 200, edited.json()
    assert edited.json()["owner"] == "rita"
    fire = api("rita").post(f"{url}/run")
    assert fire.status_code in (200, 201), fire.json()
    run = Job.objects.get(schedule_id=schedule["id"])
    assert run.owner.username == "rita"
    timing = api("rita").patch(url, {"cron": "0 4 * * *"}, format="json").json()
    assert timing["owner"] == "rita"  # a timing change by another lead would keep the owner too
    untouched = created(api, name="other")
    api("rita").patch(f"/api/v1/schedules/{untouched['id']}", {"cron": "0 5 * * *"}, format="json")
    assert Schedule.objects.get(pk=untouched["id"]).owner.username == "alice"


def test_every_change_to_a_schedule_is_in_its_teams_audit_log_with_who_did_it(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}"
    api("alice").patch(url, {"cron": "30 3 * * *"}, format="json")
    api("rita").patch(url, {"suspended": True, "reason": "quota review"}, format="json")
    api("rita").patch(url, {"suspended": False, "spec": {**SPEC, "command": ["python", "eval2.py"]}}, format="json")
    api("rita").post(f"{url}/run")
    api("ops").delete(url)
    events = AuditEvent.objects.filter(kind=EventKind.SCHEDULE).order_by("id")
    assert [(e.actor_name, e.reason, e.team.name, e.data["schedule"]) for e in events] == [
        ("alice", "created", TEAM, schedule["id"]),
        ("alice", "changed", TEAM, schedule["id"]),
        ("rita", "suspended", TEAM, schedule["id"]),
        ("rita", "resumed", TEAM, schedule["id"]),
        ("rita", "run now", TEAM, schedule["id"]),
        ("ops", "deleted", TEAM, schedule["id"]),
    ]
    messages = [e.message for e in events]
    assert "cron '0 3 * * *' -> '30 3 * * *'" in messages[1]
    assert messages[2] == f"rita suspended schedule {schedule['id']} 'nightly': quota review (suspended False -> True)"
    assert "it now runs as rita (was alice)" in messages[3]
    assert messages[4].startswith(f"rita ran schedule {schedule['id']} 'nightly' now, as its owner rita: SUBMITTED")
