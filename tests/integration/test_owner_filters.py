"""An owner the caller may not name is a 400 wherever jobs are filtered by owner, as the usage
report already answered (a walkthrough): `?owner=alcie` listed nothing on the jobs list and
the queue, and a bulk cancel by `filter: {owner: "alcie"}` (or a team that is a typo)
cancelled nothing, each answered 200 as if no job had matched. A user outside the caller's
teams gets the answer a name that does not exist gets; a former member whose jobs the caller
still sees may be named."""

import pytest

from scheduling.models import Job, JobState
from scheduling.selectors import NO_SUCH_OWNER, NO_VISIBLE_TEAM
from teams.models import Membership
from tests.integration.test_perm_fixes_job_filters import jobs  # noqa: F401 (the fixture)

JOBS = "/api/v1/jobs"


def refused(response, field: str, name: str) -> bool:
    assert response.status_code == 400, response.json()
    return response.json()["fields"] == {field: [NO_SUCH_OWNER.format(name=name)]}


@pytest.mark.parametrize("path", [JOBS, "/api/v1/queue"])
def test_an_unknown_owner_and_one_outside_the_callers_teams_are_the_same_400(api, jobs, path):  # noqa: F811
    assert refused(api("alice").get(f"{path}?owner=alcie"), "owner", "alcie")
    assert refused(api("alice").get(f"{path}?owner=bob"), "owner", "bob")  # production-ranking's: not hers to name


@pytest.mark.parametrize("path", [JOBS, "/api/v1/queue"])
def test_the_caller_its_teammates_and_anyone_for_an_admin_still_filter(api, jobs, path):  # noqa: F811
    def ids(user: str, owner: str) -> list[int]:
        response = api(user).get(f"{path}?owner={owner}")
        assert response.status_code == 200, response.json()
        return [row["id"] for row in response.json()["results"]]

    assert ids("alice", "me") == ids("alice", "alice") == [jobs["alice"]]
    assert ids("rita", "alice") == [jobs["alice"]]  # her team's lead
    assert ids("ops", "bob") == [jobs["bob"]]
    assert ids("alice", "rita") == []  # a teammate with no job: an empty list, not a 400


def test_a_former_member_whose_jobs_the_caller_sees_may_still_be_named(api, jobs):  # noqa: F811
    Membership.objects.filter(user__username="alice").delete()
    response = api("rita").get(f"{JOBS}?owner=alice")
    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [jobs["alice"]]


@pytest.mark.parametrize(
    "wanted, field, message",
    [
        ({"owner": "alcie"}, "owner", NO_SUCH_OWNER.format(name="alcie")),
        ({"owner": "bob"}, "owner", NO_SUCH_OWNER.format(name="bob")),
        ({"team": "research-foundation-model"}, "team", NO_VISIBLE_TEAM.format(name="research-foundation-model")),
        ({"team": "production-ranking"}, "team", NO_VISIBLE_TEAM.format(name="production-ranking")),
    ],
)
def test_a_bulk_cancel_naming_what_it_may_not_is_a_400_and_cancels_nothing(api, jobs, wanted, field, message):  # noqa: F811
    response = api("rita").post(f"{JOBS}/cancel", {"filter": wanted, "reason": "cleanup"}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {f"filter.{field}": [message]}
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.PENDING}


def test_a_bulk_cancel_by_a_teammate_still_cancels_their_jobs(api, jobs):  # noqa: F811
    response = api("rita").post(f"{JOBS}/cancel", {"filter": {"owner": "alice"}, "reason": "cleanup"}, format="json")
    assert response.status_code == 200, response.json()
    assert Job.objects.get(pk=jobs["alice"]).state == JobState.CANCELLED
    assert Job.objects.get(pk=jobs["bob"]).state == JobState.PENDING
