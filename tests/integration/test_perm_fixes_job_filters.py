"""The job list refuses what it cannot filter by, as the nodes list does: `?teem=x` and
`?since=7x` returned every job, `?team=nope` an empty page that read as "no jobs" (found by
QA). A team the caller may not see is answered as one that does not exist."""

import pytest

from mlqueue.query_parameters import ONE_VALUE_BUT, UNKNOWN_PARAMETER
from scheduling.web.filters import NO_VISIBLE_TEAM, JobFilter
from tests.conftest import make_spec

JOBS = "/api/v1/jobs"
FILTERS = ", ".join(JobFilter.base_filters)
UNKNOWN = UNKNOWN_PARAMETER.format(filters=FILTERS, pages="cursor, limit")


@pytest.fixture
def jobs(api) -> dict[str, int]:
    """One job of alice's (research-foundation-models) and one of bob's (production-ranking)."""
    made = {}
    for user, team in (("alice", "research-foundation-models"), ("bob", "production-ranking")):
        response = api(user).post(JOBS, make_spec(client_job_id=None, team=team), format="json")
        assert response.status_code == 201, response.json()
        made[user] = response.json()["id"]
    return made


@pytest.mark.parametrize("query, name", [("teem=x", "teem"), ("since=7x", "since"), ("state=PENDING&sort=id", "sort")])
def test_a_parameter_that_is_no_filter_is_a_400_naming_it(api, jobs, query, name):
    response = api("ops").get(f"{JOBS}?{query}")
    assert (response.status_code, response.json()["fields"]) == (400, {name: [UNKNOWN]})


def test_an_unknown_team_is_a_400_naming_team(api, jobs):
    response = api("alice").get(f"{JOBS}?team=nope")
    assert (response.status_code, response.json()["fields"]) == (400, {"team": [NO_VISIBLE_TEAM.format(name="nope")]})


def test_a_team_the_caller_may_not_see_is_answered_as_one_that_does_not_exist(api, jobs):
    hidden = api("alice").get(f"{JOBS}?team=production-ranking")
    missing = api("alice").get(f"{JOBS}?team=production-rankin")
    assert hidden.status_code == missing.status_code == 400
    assert hidden.json()["fields"] == {"team": [NO_VISIBLE_TEAM.format(name="production-ranking")]}
    assert missing.json()["fields"] == {"team": [NO_VISIBLE_TEAM.format(name="production-rankin")]}


def test_the_callers_teams_and_divisions_still_filter(api, jobs):
    def ids(client, query: str) -> list[int]:
        response = client.get(f"{JOBS}?{query}")
        assert response.status_code == 200, response.json()
        return [row["id"] for row in response.json()["results"]]

    assert ids(api("alice"), "team=research-foundation-models") == [jobs["alice"]]
    assert ids(api("alice"), "team=research") == [jobs["alice"]]  # the division above her team: its teams' jobs
    assert ids(api("ops"), "team=production-ranking") == [jobs["bob"]]  # admins: every team
    assert ids(api("victor"), "team=research") == []  # his division: none of its jobs here are his to see
    assert ids(api("alice"), "state=PENDING&state=RUNNING&limit=5&format=json") == [jobs["alice"]]


def test_a_malformed_value_or_a_repeated_one_value_filter_is_a_400_naming_it(api, jobs):
    bad_parent = api("alice").get(f"{JOBS}?parent=abc")
    assert bad_parent.status_code == 400 and list(bad_parent.json()["fields"]) == ["parent"]
    twice = api("alice").get(f"{JOBS}?owner=alice&owner=bob")
    assert twice.status_code == 400
    assert twice.json()["fields"] == {"owner": [ONE_VALUE_BUT.format(name="owner", multiple="priority, state")]}


def test_the_sdk_and_cli_filters_are_all_accepted(api, jobs):
    """What `mlq jobs --state --team --mine --since` sends (mlqueue/cli/jobs.py), and the
    `next` link it follows (with the cursor)."""
    newer = api("alice").post(JOBS, make_spec(client_job_id=None), format="json").json()["id"]
    query = "state=PENDING&team=research-foundation-models&owner=me&submitted_after=7d&top_level=true&limit=1"
    first = api("alice").get(f"{JOBS}?{query}")
    assert first.status_code == 200, first.json()
    following = api("alice").get(first.json()["next"])
    assert following.status_code == 200, following.json()
    assert [row["id"] for row in first.json()["results"] + following.json()["results"]] == [newer, jobs["alice"]]


@pytest.mark.parametrize("value", ["100%", "%s", "%(x)s", "maybe"])
def test_a_bad_boolean_filter_is_a_400_naming_it_whatever_it_holds(api, value):
    """A value with a % in it made the message's formatting fail: a 500 (found by QA)."""
    response = api("alice").get("/api/v1/jobs", {"top_level": value})
    assert response.status_code == 400, response.content
    assert response.json()["fields"] == {"top_level": [f"true or false, not {value!r}."]}
