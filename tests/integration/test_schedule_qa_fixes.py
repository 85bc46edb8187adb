"""What QA found in schedules (as alice member, rita lead, ops admin of the demo): the audit
entries no API showed, a key rotation naming "job None", 403s without `spec.`, a re-applied
file that ignored `suspend`, the list ignoring its parameters, a suspended schedule's stale
next_run_at, and PATCHes that changed nothing writing audit entries."""

import pytest
from cryptography.fernet import Fernet

from mlqueue.query_parameters import UNKNOWN_PARAMETER, UNKNOWN_PARAMETER_NO_FILTERS
from scheduling import schedules
from scheduling.models import Schedule
from scheduling.schedule_spec import DIFFERENT_SUSPEND
from scheduling.web.schedules_api import NO_VISIBLE_TEAM
from teams.models import AuditEvent, EventKind

pytestmark = pytest.mark.django_db

TEAM = "research-foundation-models"
SPEC = {"name": "nightly-eval", "team": TEAM, "command": ["python", "eval.py"]}
BODY = {"name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "spec": SPEC}
PAGES = "cursor, limit"


def created(api, username: str = "alice", **changes) -> dict:
    response = api(username).post("/api/v1/schedules", {**BODY, **changes}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def patch(api, username: str, schedule: dict, body: dict):
    return api(username).patch(f"/api/v1/schedules/{schedule['id']}", body, format="json")


def schedule_entries() -> int:
    return AuditEvent.objects.filter(kind=EventKind.SCHEDULE).count()


# ---- 1. the audit entries, through the API ---------------------------------------------------


def test_the_teams_events_show_its_schedules_entries_to_whoever_sees_its_schedules(clock, api):
    schedule = created(api)
    assert patch(api, "rita", schedule, {"suspended": True, "reason": "quota review"}).status_code == 200
    events = f"/api/v1/teams/{TEAM}/events"
    for username in ("alice", "rita", "ops"):
        rows = api(username).get(events).json()["results"]
        assert [(row["kind"], row["actor"], row["reason"]) for row in rows] == [
            ("SCHEDULE", "rita", "suspended"),
            ("SCHEDULE", "alice", "created"),
        ], username
        assert rows[0]["data"]["schedule"] == schedule["id"]
    # bob reads the team's quotas (public), not its schedules: he sees none of them either.
    assert api("bob").get(events).json()["results"] == []
    assert api("bob").get(f"/api/v1/schedules/{schedule['id']}").status_code == 404


def test_a_schedules_own_events_newest_first_for_who_sees_it(clock, api):
    schedule = created(api)
    other = created(api, name="weekly")
    patch(api, "alice", schedule, {"cron": "30 3 * * *"})
    api("rita").post(f"/api/v1/schedules/{schedule['id']}/run")
    url = f"/api/v1/schedules/{schedule['id']}/events"
    for username in ("alice", "rita", "ops"):
        response = api(username).get(url)
        assert response.status_code == 200, response.json()
        rows = response.json()["results"]
        assert [(row["actor"], row["reason"]) for row in rows] == [
            ("rita", "run now"),
            ("alice", "changed"),
            ("alice", "created"),
        ]
        assert {row["data"]["schedule"] for row in rows} == {schedule["id"]}  # not the other's
    assert set(rows[0]) == {"id", "kind", "actor", "reason", "message", "data", "created_at"}
    assert rows[1]["message"] == f"alice changed schedule {schedule['id']} 'nightly' (cron '0 3 * * *' -> '30 3 * * *')"
    assert [row["reason"] for row in api("alice").get(f"/api/v1/schedules/{other['id']}/events").json()["results"]] == [
        "created"
    ]


def test_a_schedules_events_are_404_to_who_may_not_see_it_and_page_like_the_other_lists(clock, api):
    schedule = created(api)
    for reason in ("one", "two"):
        patch(api, "alice", schedule, {"suspended": True, "reason": reason})
        patch(api, "alice", schedule, {"suspended": False})
    url = f"/api/v1/schedules/{schedule['id']}/events"
    for username in ("victor", "bob"):
        refused = api(username).get(url)
        assert (refused.status_code, refused.json()) == (404, {"detail": f"no such schedule: {schedule['id']}."})
    assert api(None).get(url).status_code == 401
    missing = api("ops").get("/api/v1/schedules/999999/events")
    assert (missing.status_code, missing.json()) == (404, {"detail": "no such schedule: 999999."})
    unknown = api("alice").get(f"{url}?kind=SCHEDULE")
    assert (unknown.status_code, unknown.json()["fields"]) == (
        400,
        {"kind": [UNKNOWN_PARAMETER_NO_FILTERS.format(pages=PAGES)]},
    )
    page = api("alice").get(f"{url}?limit=2").json()
    seen = [row["reason"] for row in page["results"]]
    while page["next"]:
        page = api("alice").get(page["next"]).json()
        seen += [row["reason"] for row in page["results"]]
    assert seen == ["resumed", "suspended", "resumed", "suspended", "created"]


def test_the_schema_has_the_schedules_events(api):
    assert b"/api/v1/schedules/{schedule_id}/events" in api("alice").get("/api/schema/").content


# ---- 2. a key rotation names the schedule, not "job None" --------------------------------------


def test_a_schedule_whose_secret_key_was_dropped_names_itself_and_what_to_do(clock, api, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.MLQ_SECRET_ENV_KEYS = old
    schedule = created(api, spec={**SPEC, "secret_env": {"HF_TOKEN": "hf_s3cret", "WANDB_API_KEY": "8f14"}})
    settings.MLQ_SECRET_ENV_KEYS = new  # restarted with the new key only
    response = api("alice").post(f"/api/v1/schedules/{schedule['id']}/run")
    assert response.status_code == 409
    why = schedules.SECRETS_UNREADABLE.format(id=schedule["id"], name="nightly", names="HF_TOKEN, WANDB_API_KEY")
    assert response.json()["detail"] == f"schedule {schedule['id']} did not run: {why}"
    assert "job None" not in why and "hf_s3cret" not in why
    settings.MLQ_SECRET_ENV_KEYS = f"{new},{old}"  # the old key listed again: it runs
    assert api("alice").post(f"/api/v1/schedules/{schedule['id']}/run").status_code == 409  # same second: that fire
    clock.shift(60)
    assert api("alice").post(f"/api/v1/schedules/{schedule['id']}/run").status_code == 201


def test_re_saving_the_spec_encrypts_its_secrets_with_the_new_key(clock, api, settings):
    """What docs/secrets.md tells to do instead of keeping the old key: PATCH the spec again."""
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.MLQ_SECRET_ENV_KEYS = old
    spec = {**SPEC, "secret_env": {"HF_TOKEN": "hf_s3cret"}}
    schedule = created(api, spec=spec)
    settings.MLQ_SECRET_ENV_KEYS = f"{new},{old}"
    assert patch(api, "alice", schedule, {"spec": spec}).status_code == 200
    settings.MLQ_SECRET_ENV_KEYS = new
    assert api("alice").post(f"/api/v1/schedules/{schedule['id']}/run").status_code == 201


# ---- 3. a refusal for rights names `spec.<field>` ----------------------------------------------


@pytest.mark.parametrize(
    ("username", "spec", "field", "message"),
    [
        ("victor", SPEC, "spec.team", f"you are not a member of team {TEAM}."),
        (
            "alice",
            {**SPEC, "priority": "P0"},
            "spec.priority",
            f"P0 is for incidents: only leads of {TEAM} (or of a team above it) and site admins may submit at P0.",
        ),
    ],
)
def test_a_create_refused_for_rights_names_the_specs_field(clock, api, username, spec, field, message):
    response = api(username).post("/api/v1/schedules", {**BODY, "spec": spec}, format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": f"{field}: {message}", "fields": {field: [message]}}
    assert not Schedule.objects.exists()


# ---- 4. a re-applied file with another `suspend` is a 409 --------------------------------------


@pytest.mark.parametrize("suspend", [{"suspend": False}, {}], ids=["suspend-false", "suspend-left-out"])
def test_applying_a_file_again_against_a_suspended_schedule_is_a_409_naming_it(clock, api, suspend):
    body = {**SPEC, "schedule": {"cron": "0 3 * * *", "name": "n2", **suspend}}
    first = api("alice").post("/api/v1/jobs", body, format="json")
    assert first.status_code == 201, first.json()
    schedule = first.json()["schedule"]
    assert patch(api, "alice", schedule, {"suspended": True}).status_code == 200
    again = api("alice").post("/api/v1/jobs", body, format="json")
    assert again.status_code == 409
    assert again.json()["detail"] == schedules.NAME_TAKEN.format(
        team=TEAM, id=schedule["id"], name="n2", differences=DIFFERENT_SUSPEND[True]
    )
    suspended = {**body, "schedule": {**body["schedule"], "suspend": True}}
    assert api("alice").post("/api/v1/jobs", suspended, format="json").status_code == 200


def test_a_409_names_every_difference_never_a_secret(clock, api):
    schedule = created(api, spec={**SPEC, "secret_env": {"TOK": "one"}})
    response = api("alice").post(
        "/api/v1/schedules",
        {**BODY, "cron": "0 4 * * *", "suspend": True, "spec": {**SPEC, "secret_env": {"TOK": "two"}}},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"team {TEAM} already has schedule {schedule['id']} named 'nightly' with other settings (its cron is "
        "'0 3 * * *', not '0 4 * * *'; it is active, not suspended; its secret_env values differ): "
        f"PATCH /api/v1/schedules/{schedule['id']} to change it, or choose another name."
    )


# ---- 6. the list's parameters, a suspended next_run_at, PATCHes that change nothing ------------


def test_the_list_filters_by_a_team_you_see_and_refuses_any_other_parameter(clock, api):
    ours = created(api)
    listed = api("alice").get(f"/api/v1/schedules?team={TEAM}").json()["results"]
    assert [row["id"] for row in listed] == [ours["id"]]
    assert [row["id"] for row in api("alice").get("/api/v1/schedules?team=research").json()["results"]] == [ours["id"]]
    assert api("ops").get("/api/v1/schedules?team=research-vision").json()["results"] == []
    for name in ("research-vision", "nope"):  # one not yours reads as one that does not exist
        refused = api("alice").get(f"/api/v1/schedules?team={name}")
        assert (refused.status_code, refused.json()["fields"]) == (400, {"team": [NO_VISIBLE_TEAM.format(name=name)]})
    unknown = api("alice").get("/api/v1/schedules?owner=alice")
    assert (unknown.status_code, unknown.json()["fields"]) == (
        400,
        {"owner": [UNKNOWN_PARAMETER.format(filters="team", pages=PAGES)]},
    )


def test_a_suspended_schedules_next_run_is_null_in_the_api_and_none_on_the_page(clock, api, logged_in):
    schedule = created(api)
    suspended = patch(api, "alice", schedule, {"suspended": True}).json()
    assert (suspended["next_run_at"], suspended["next_run_local"]) == (None, None)
    (row,) = api("alice").get("/api/v1/schedules").json()["results"]
    assert (row["next_run_at"], row["next_run_local"]) == (None, None)
    assert api("alice").get(f"/api/v1/schedules/{schedule['id']}").json()["next_run_at"] is None
    listing = logged_in("alice").get("/schedules/").content.decode()
    assert "none while suspended" in listing and "2026-04-21 01:00" not in listing
    resumed = patch(api, "alice", schedule, {"suspended": False}).json()
    assert (resumed["next_run_at"], resumed["next_run_local"]) == ("2026-04-21T01:00:00Z", "2026-04-21T03:00:00+02:00")


@pytest.mark.parametrize(
    "body",
    [{}, {"reason": "just a reason"}, {"cron": "0 3 * * *", "timezone": "Europe/Berlin"}, {"suspended": False}],
    ids=["empty", "reason", "same-timing", "resume-active"],
)
def test_a_patch_that_changes_nothing_writes_nothing(clock, api, body):
    schedule = created(api)
    before = Schedule.objects.get()
    entries = schedule_entries()
    clock.shift(3600)
    response = patch(api, "rita", schedule, body)
    assert response.status_code == 200, response.json()
    assert schedule_entries() == entries
    after = Schedule.objects.get()
    assert (after.updated_at, after.next_run_at) == (before.updated_at, before.next_run_at)


def test_suspending_a_suspended_schedule_again_writes_no_second_entry(clock, api):
    schedule = created(api)
    patch(api, "alice", schedule, {"suspended": True, "reason": "dataset migration"})
    entries = schedule_entries()
    again = patch(api, "rita", schedule, {"suspended": True, "reason": "quota review"})
    assert again.json()["suspended_reason"] == "suspended by alice: dataset migration"
    assert schedule_entries() == entries
