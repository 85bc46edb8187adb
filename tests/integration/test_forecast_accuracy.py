"""The start forecast's accuracy: the leader keeps each job's first forecast and its last one
before it started (StartForecast, through the forecast's rewrites and the placement that
clears the job's own columns), the start is copied to it, and forecast_accuracy_by_week and
GET /api/v1/forecast-accuracy report per ISO week. Clocks frozen."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.cache import cache

from scheduling import forecast_accuracy
from scheduling.forecast_accuracy import WeekAccuracy, forecast_accuracy_by_week
from scheduling.models import Job, Node, StartForecast
from scheduling.web.forecast_accuracy_api import NOT_A_TIME, NOT_BEFORE_TO, NOT_YOUR_TEAM, ONLY_LEADS, TOO_LONG
from teams.models import Team
from tests.integration.test_forecast import ONE_NODE, forecast_pass, small
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.nodes import cordon, heartbeat

WEEK0 = datetime(2026, 11, 2, tzinfo=UTC)  # an ISO week starts on Monday 00:00 UTC
MONDAY = WEEK0 + timedelta(hours=9)
FM, VISION = "research-foundation-models", "research-vision"
URL = "/api/v1/forecast-accuracy"


@pytest.fixture
def clock():
    with time_machine.travel(MONDAY, tick=False) as traveller:
        yield traveller


@pytest.fixture
def one_node(clock, leader):
    """One 8-GPU H100 node: 8-GPU jobs queue behind each other."""
    cordon(Node.objects.filter(gpu_type="H100").exclude(name=ONE_NODE))
    return leader


def later(clock, minutes: int) -> None:
    clock.move_to(MONDAY + timedelta(minutes=minutes))
    heartbeat()  # the fleet stays alive on the frozen clock


def test_the_first_and_the_last_forecast_before_the_start_are_kept(api, clock, one_node):
    first = small(api, "first", 2.0)
    forecast_pass(one_node)
    run_all_ranks(first)  # started at MONDAY, up to 2 hours
    waiting = small(api, "waiting", 1.0)
    forecast_pass(one_node)
    waiting.refresh_from_db()
    assert waiting.estimated_start == MONDAY + timedelta(hours=2)

    later(clock, 5)  # the first job's owner shortens it: the waiting job's forecast moves
    assert api("alice").patch(f"/api/v1/jobs/{first.pk}", {"max_runtime_hours": 1}, format="json").status_code == 200
    forecast_pass(one_node)
    waiting.refresh_from_db()
    assert waiting.estimated_start == MONDAY + timedelta(hours=1)

    later(clock, 40)  # the first job ends early; the waiting one is placed and starts
    run_all_ranks(first, exit_code=0)
    forecast_pass(one_node)
    waiting.refresh_from_db()
    assert waiting.estimated_start is None  # placed: the job's own columns are cleared
    run_all_ranks(waiting)

    kept = StartForecast.objects.get(job=waiting)
    assert (kept.first_latest, kept.first_likely, kept.first_at) == (
        MONDAY + timedelta(hours=2),
        MONDAY + timedelta(hours=2),  # no history: the likely start is the bound
        MONDAY,
    )
    assert (kept.last_latest, kept.last_at) == (MONDAY + timedelta(hours=1), MONDAY + timedelta(minutes=5))
    assert kept.started_at == MONDAY + timedelta(minutes=40) and kept.team.name == FM
    assert not StartForecast.objects.filter(job=first).exists()  # placed at once: never forecast

    assert forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=7)) == [
        WeekAccuracy(MONDAY.date(), 1, 80 * 60.0, 20 * 60.0, 1.0, 1.0)
    ]


def test_a_requeued_job_keeps_the_forecasts_of_its_first_start(api, clock, one_node):
    first = small(api, "first", 1.0)
    forecast_pass(one_node)
    waiting = small(api, "waiting", 1.0)
    forecast_pass(one_node)
    run_all_ranks(first, exit_code=0)
    later(clock, 10)
    forecast_pass(one_node)
    run_all_ranks(Job.objects.get(pk=waiting.pk), exit_code=1)  # it fails: a retry, after back-off
    kept = StartForecast.objects.filter(job=waiting).values().get()
    later(clock, 20)
    forecast_pass(one_node)  # the verdict: back to PENDING
    retry = Job.objects.get(pk=waiting.pk)
    assert retry.estimated_start == MONDAY + timedelta(minutes=20, seconds=30)  # forecast again, not kept
    later(clock, 21)
    small(api, "cutting-in", 1.0)
    forecast_pass(one_node)  # the retry is placed; the new job is forecast behind it
    waiting.refresh_from_db()
    assert waiting.queued_at == MONDAY + timedelta(minutes=20)  # its wait starts again at the requeue
    assert waiting.started_at == MONDAY + timedelta(minutes=10)  # its first start stays
    assert StartForecast.objects.filter(job=waiting).values().get() == kept
    assert (kept["started_at"], kept["last_at"]) == (MONDAY + timedelta(minutes=10), MONDAY)


def forecast(team: str, started: datetime, *, first, last, first_likely=None, last_likely=None) -> StartForecast:
    """A kept forecast with its start; `first`/`last` are the "at the latest" bounds."""
    return StartForecast.objects.create(
        team=Team.objects.get(name=team),
        first_latest=first,
        first_likely=first_likely,
        first_at=started - timedelta(hours=3),
        last_latest=last,
        last_likely=last_likely,
        last_at=started - timedelta(minutes=1),
        started_at=started,
    )


@pytest.fixture
def two_weeks(demo):
    """Week 1: three FM jobs and one of vision's; week 2: none; week 3: one late FM job."""
    t = MONDAY
    m = timedelta(minutes=1)
    forecast(FM, t, first=t + 10 * m, last=t + 2 * m)  # errors 600, 120; in both bounds
    forecast(FM, t + 60 * m, first=t + 30 * m, last=t + 70 * m)  # 1800, 600; late for the first bound
    # Likely starts are the point estimates where the team has history.
    forecast(FM, t + 120 * m, first=t + 200 * m, first_likely=t + 100 * m, last=None, last_likely=t + 125 * m)
    forecast(VISION, t + 10 * m, first=t + 10 * m, last=t + 10 * m)  # exact
    forecast(FM, t + timedelta(days=14), first=t + timedelta(days=13), last=t + timedelta(days=14) - 30 * m)
    StartForecast.objects.create(  # not started yet: not counted
        team=Team.objects.get(name=FM), first_latest=t, first_at=t, last_latest=t, last_at=t
    )


def test_weeks_report_median_errors_and_the_share_within_the_bound(two_weeks):
    weeks = forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=21))

    assert weeks == [
        # errors first: 600, 1800, 1200, 0 -> median 900; last: 120, 600, 300, 0 -> 210
        WeekAccuracy(MONDAY.date(), 4, 900.0, 210.0, 0.75, 1.0),
        WeekAccuracy(MONDAY.date() + timedelta(days=7), 0, None, None, None, None),
        WeekAccuracy(MONDAY.date() + timedelta(days=14), 1, 86400.0, 1800.0, 0.0, 0.0),
    ]
    # The third job's last forecast has no bound: the share is over the three that had one.
    assert forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=1), teams=[FM]) == [
        WeekAccuracy(MONDAY.date(), 3, 1200.0, 300.0, 2 / 3, 1.0)
    ]


def test_the_database_and_the_embedded_paths_agree(two_weeks, monkeypatch):
    on_postgres = forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=21))
    cache.clear()
    monkeypatch.setattr(forecast_accuracy, "_week_in_database", forecast_accuracy._week_here)
    assert forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=21)) == on_postgres


def test_weeks_that_are_over_are_cached_and_the_current_one_is_not(two_weeks):
    with time_machine.travel(WEEK0 + timedelta(days=14, hours=12), tick=False):  # in the third week
        before = forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=21))
        forecast(FM, MONDAY + timedelta(hours=5), first=MONDAY, last=MONDAY)  # in the first week, after the fact
        forecast(FM, MONDAY + timedelta(days=14, hours=1), first=MONDAY, last=MONDAY)
        after = forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=21))
    assert [week.jobs for week in before] == [4, 0, 1]
    assert [week.jobs for week in after] == [4, 0, 2]  # the week that is over came from the cache
    # Another team set, or part of a week, is its own question.
    assert forecast_accuracy_by_week(WEEK0, WEEK0 + timedelta(days=7), teams=[FM])[0].jobs == 4
    assert forecast_accuracy_by_week(WEEK0 + timedelta(hours=1), WEEK0 + timedelta(days=7))[0].jobs == 5


def test_a_range_counts_the_jobs_that_started_in_it(two_weeks):
    weeks = forecast_accuracy_by_week(MONDAY + timedelta(minutes=30), MONDAY + timedelta(days=1))
    assert [(week.week, week.jobs) for week in weeks] == [(MONDAY.date(), 2)]


def test_the_api_answers_admins_for_every_team(two_weeks, api):
    body = api("ops").get(URL, {"from": "2026-11-02", "to": "2026-11-16"}).json()

    assert body["start"] == "2026-11-02T00:00:00Z" and body["end"] == "2026-11-16T00:00:00Z"
    assert body["teams"] is None
    assert body["weeks"] == [
        {
            "week": "2026-11-02",
            "jobs": 4,
            "first_median_error_s": 900.0,
            "last_median_error_s": 210.0,
            "first_within_bound": 0.75,
            "last_within_bound": 1.0,
        },
        {
            "week": "2026-11-09",
            "jobs": 0,
            "first_median_error_s": None,
            "last_median_error_s": None,
            "first_within_bound": None,
            "last_within_bound": None,
        },
    ]


def test_a_lead_reads_the_teams_it_leads(two_weeks, api):
    body = api("rita").get(URL, {"from": "2026-11-02", "to": "2026-11-09"}).json()
    assert body["teams"] == [FM] and body["weeks"][0]["jobs"] == 3

    refused = api("rita").get(URL, {"from": "2026-11-02", "to": "2026-11-09", "team": VISION})
    assert refused.status_code == 403 and refused.json()["detail"] == NOT_YOUR_TEAM.format(name=VISION)
    assert (
        api("ops").get(URL, {"from": "2026-11-02", "to": "2026-11-09", "team": VISION}).json()["weeks"][0]["jobs"] == 1
    )


def test_a_division_covers_the_teams_below_it(two_weeks, api):
    """Jobs run in leaf teams only: a division's answer is its teams' (as the usage API's)."""
    body = api("ops").get(URL, {"from": "2026-11-02", "to": "2026-11-09", "team": "research"}).json()
    assert body["teams"] == ["research", FM, VISION] and body["weeks"][0]["jobs"] == 4


@pytest.mark.parametrize("user", ["alice", "bob", "victor"])
def test_members_who_lead_nothing_are_refused(demo, api, user):
    response = api(user).get(URL)
    assert response.status_code == 403 and response.json()["detail"] == ONLY_LEADS


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"from": "last week"}, "from", NOT_A_TIME),
        (
            {"to": "2026-13-45"},
            "to",
            "'2026-13-45' is in the right format but is not a real date and time: month must be in 1..12.",
        ),
        (
            {"from": "2026-02-30"},
            "from",
            "'2026-02-30' is in the right format but is not a real date and time: day is out of range for month.",
        ),
        ({"to": "0001-01-02"}, "to", "must be after 1970-01-01."),  # the default from was a 500
        ({"from": "2026-11-09", "to": "2026-11-02"}, "from", NOT_BEFORE_TO.format(to="2026-11-02T00:00:00+00:00")),
        (
            {"from": "2025-01-01", "to": "2026-11-02"},
            "to",
            TOO_LONG.format(start="2025-01-01", end="2026-11-02", days=670),
        ),
        ({"team": "nope"}, "team", "no team named 'nope'."),
        ({"from": "9999-12-01", "to": "9999-12-31"}, "to", "must be before the year 9000."),  # was a 500
    ],
    ids=[
        "not a time",
        "no such month",
        "no such day",
        "near the year 1",
        "backwards",
        "too long",
        "unknown team",
        "near the year 9999",
    ],
)
def test_bad_parameters_are_400_naming_the_field(demo, api, params, field, message):
    response = api("ops").get(URL, params)
    assert response.status_code == 400
    assert response.json()["fields"] == {field: [message]}
    assert api("alice").get(URL, params).status_code in (403, 400)  # who may ask comes first
    if field != "team":
        assert api("alice").get(URL, params).status_code == 403


def test_defaults_are_the_last_twelve_weeks(clock, demo, api):
    body = api("ops").get(URL).json()
    assert body["end"] == "2026-11-02T09:00:00Z" and len(body["weeks"]) == 13  # 12 weeks, over 13 ISO weeks
