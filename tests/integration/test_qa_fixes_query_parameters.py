"""Query parameters and bodies QA found taken silently or answered with a 500: a time with a UTC
offset past ±15:59 (PostgreSQL's bound; Python takes ±23:59) and one near the years 1 and 9999,
unknown, repeated and empty parameters on the usage, metrics, logs, forecast accuracy, prices,
tokens and job events lists, a price body with a typo (both prices 0 from now: the class made
free), and metrics of an attempt the job never made. Each is a 400 naming the parameter or field."""

from datetime import UTC, datetime

import pytest
import time_machine

from mlqueue.query_parameters import (
    EMPTY_VALUE,
    ONE_VALUE,
    ONE_VALUE_BUT,
    UNKNOWN_PARAMETER_NO_FILTERS,
    UNKNOWN_PARAMETER_UNPAGED,
)
from mlqueue.serializer_fields import UNKNOWN_FIELD
from scheduling.models import Job, Price, Task, TaskState
from scheduling.web.api import NO_SUCH_ATTEMPT, NO_SUCH_JOB_ATTEMPT, NO_SUCH_RANK
from scheduling.web.filters import NOT_IN_UTC_YEARS
from scheduling.web.usage_api import NO_PRICE
from teams.models import AuditEvent
from tests.conftest import make_spec

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def now():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def job(api, now) -> Job:
    """Alice's job, submitted at NOW, each rank on its first attempt."""
    response = api("alice").post("/api/v1/jobs", make_spec(client_job_id=None), format="json")
    assert response.status_code == 201, response.json()
    Task.objects.filter(job_id=response.json()["id"]).update(state=TaskState.RUNNING, attempt=1)
    return Job.objects.get(pk=response.json()["id"])


def refused(response, name: str) -> list[str]:
    """The 400's reasons for `name`, the only field it names."""
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [name], response.json()
    return response.json()["fields"][name]


# 1. UTC offsets past ±15:59 and the years 1 and 9999 ------------------------------------------


@pytest.mark.parametrize(
    "query, found",
    [
        ("submitted_after=2026-11-01T14:00:00-19:00", True),  # 09:00 UTC on NOW's day
        ("submitted_after=2026-11-02T01:00:01-08:00", False),  # 09:00:01 UTC
        ("submitted_before=2026-11-03T01:00:01%2B16:00", True),  # 09:00:01 UTC
        ("ended_after=2026-11-01T00:00:00%2B16:00", False),  # it has not ended
        ("submitted_before=2026-11-01T09:01:01-23:59", True),  # 09:00:01 UTC
        ("submitted_after=2026-11-01T09:01:01-23:59", False),
        ("submitted_after=0001-01-01T00:00:00Z", True),
        ("submitted_before=9999-12-31T23:59:59Z", True),
    ],
)
def test_a_time_filter_with_any_offset_or_year_filters_in_utc(api, job, query, found):
    response = api("alice").get(f"/api/v1/jobs?{query}")
    assert response.status_code == 200, response.content
    assert [row["id"] for row in response.json()["results"]] == ([job.pk] if found else [])


@pytest.mark.parametrize(
    "query, name",
    [
        ("submitted_after=0001-01-01T00:00:00%2B01:00", "submitted_after"),
        ("submitted_before=9999-12-31T23:00:00-02:00", "submitted_before"),
    ],
)
def test_a_time_filter_outside_the_years_in_utc_is_a_400_naming_it(api, job, query, name):
    assert refused(api("alice").get(f"/api/v1/jobs?{query}"), name) == [NOT_IN_UTC_YEARS]


def test_forecast_accuracy_takes_any_offset_in_utc(api, now):
    query = "from=2026-10-31T00:00:00-19:00&to=2026-11-02T09:00:00%2B16:00"
    response = api("rita").get(f"/api/v1/forecast-accuracy?{query}")
    assert response.status_code == 200, response.content
    assert (response.json()["start"], response.json()["end"]) == ("2026-10-31T19:00:00Z", "2026-11-01T17:00:00Z")


@pytest.mark.parametrize(
    "query, name, message",
    [
        ("from=0001-01-01T00:00:00%2B01:00", "from", "must be after 1970-01-01."),
        ("to=9999-12-31T23:00:00-02:00", "to", "must be before the year 9000."),
    ],
)
def test_forecast_accuracy_near_the_years_1_and_9999_is_a_400(api, now, query, name, message):
    assert refused(api("rita").get(f"/api/v1/forecast-accuracy?{query}"), name) == [message]


# 2. A price's body ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, fields",
    [
        (
            {"resource_class": "gpu:A100", "gpu_hours": "5.00", "effective_form": "2027-01-01"},
            {"effective_form": [UNKNOWN_FIELD], "gpu_hours": [UNKNOWN_FIELD]},
        ),
        ({"resource_class": "gpu:A100"}, {"gpu_hour": [NO_PRICE], "cpu_hour": [NO_PRICE]}),
        ({"resource_class": "cpu", "cpu_hour": "1", "id": 7}, {"id": [UNKNOWN_FIELD]}),
        ({"resource_class": "cpu", "cpu_hour": "1", "set_by_name": "eve"}, {"set_by_name": [UNKNOWN_FIELD]}),
        (
            {"resource_class": "cpu", "cpu_hour": "1", "effective_from": "1969-12-31"},
            {"effective_from": ["must be after 1970-01-01."]},
        ),
        (
            {"resource_class": "cpu", "cpu_hour": "1", "effective_from": "9000-01-01"},
            {"effective_from": ["must be before the year 9000."]},
        ),
    ],
    ids=["typos", "no price", "id", "set_by_name", "before 1970", "the year 9000"],
)
def test_a_price_body_with_a_typo_or_no_price_is_refused_and_writes_nothing(api, now, body, fields):
    response = api("ops").post("/api/v1/prices", body, format="json")
    assert (response.status_code, response.json()["fields"]) == (400, fields)
    assert not Price.objects.exists() and not AuditEvent.objects.filter(kind="PRICE_CHANGED").exists()


def test_a_price_past_the_year_9999_in_utc_is_a_400(api, now):
    body = {"resource_class": "cpu", "cpu_hour": "1", "effective_from": "9999-12-31T23:00:00-02:00"}
    refused(api("ops").post("/api/v1/prices", body, format="json"), "effective_from")
    assert not Price.objects.exists()


def test_one_price_given_leaves_the_other_at_zero(api, now):
    response = api("ops").post("/api/v1/prices", {"resource_class": "gpu:A100", "cpu_hour": "0.05"}, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["gpu_hour"], response.json()["cpu_hour"]) == ("0.0000", "0.0500")


def test_prices_filter_by_class(api, now):
    Price.objects.create(resource_class="cpu", cpu_hour=1, effective_from=NOW)
    Price.objects.create(resource_class="gpu:H100", gpu_hour=2, effective_from=NOW)
    Price.objects.create(resource_class="gpu:retired", gpu_hour=3, effective_from=NOW)  # known to nothing now

    def classes(query: str) -> list[str]:
        response = api("alice").get(f"/api/v1/prices?{query}")
        assert response.status_code == 200, response.content
        return [row["resource_class"] for row in response.json()]

    assert classes("resource_class=cpu") == ["cpu"]
    assert classes("resource_class=gpu:A100") == []  # known, never priced
    assert classes("resource_class=gpu:retired") == ["gpu:retired"]  # its history stays readable
    assert classes("") == ["cpu", "gpu:H100", "gpu:retired"]
    assert refused(api("alice").get("/api/v1/prices?resource_class=gpu:TPU"), "resource_class")[0].startswith(
        "unknown resource class 'gpu:TPU'"
    )


# 3. and 4. Unknown, repeated and empty parameters --------------------------------------------

USAGE = ", ".join(("from", "to", "team", "owner", "resource_class", "priority", "group_by", "format"))
METRICS = "name, rank, attempt, after_step, spread"
LOGS = "rank, attempt, stream, offset, follow"


@pytest.mark.parametrize(
    "user, path, query, name, message",
    [
        ("ops", "/api/v1/usage", "start=2026-10-01", "start", UNKNOWN_PARAMETER_UNPAGED.format(filters=USAGE)),
        (
            "ops",
            "/api/v1/usage",
            "format=csv&start=2026-10-01",
            "start",
            UNKNOWN_PARAMETER_UNPAGED.format(filters=USAGE),
        ),
        (
            "ops",
            "/api/v1/usage",
            "priority=P1&priority=P2",
            "priority",
            ONE_VALUE_BUT.format(name="priority", multiple="group_by"),
        ),
        ("ops", "/api/v1/usage", "team=", "team", EMPTY_VALUE.format(name="team")),
        ("alice", "/api/v1/jobs/{job}/metrics", "nmae=loss", "nmae", UNKNOWN_PARAMETER_UNPAGED.format(filters=METRICS)),
        ("alice", "/api/v1/jobs/{job}/metrics", "rank=0&rank=1", "rank", ONE_VALUE.format(name="rank")),
        ("alice", "/api/v1/jobs/{job}/logs", "rnak=1", "rnak", UNKNOWN_PARAMETER_UNPAGED.format(filters=LOGS)),
        ("alice", "/api/v1/jobs/{job}/logs", "stream=stdout&stream=stderr", "stream", ONE_VALUE.format(name="stream")),
        (
            "rita",
            "/api/v1/forecast-accuracy",
            "start=2026-10-01",
            "start",
            UNKNOWN_PARAMETER_UNPAGED.format(filters="from, to, team"),
        ),
        ("rita", "/api/v1/forecast-accuracy", "team=a&team=b", "team", ONE_VALUE.format(name="team")),
        ("alice", "/api/v1/prices", "class=cpu", "class", UNKNOWN_PARAMETER_UNPAGED.format(filters="resource_class")),
        ("alice", "/api/v1/tokens", "cursor=x", "cursor", UNKNOWN_PARAMETER_UNPAGED.format(filters="user")),
        (
            "alice",
            "/api/v1/jobs/{job}/events",
            "bogus=1",
            "bogus",
            UNKNOWN_PARAMETER_NO_FILTERS.format(pages="cursor, limit"),
        ),
        ("alice", "/api/v1/jobs", "submitted_before=", "submitted_before", EMPTY_VALUE.format(name="submitted_before")),
        ("alice", "/api/v1/queue", "team=", "team", EMPTY_VALUE.format(name="team")),
    ],
)
def test_an_unknown_repeated_or_empty_parameter_is_a_400_naming_it(api, job, user, path, query, name, message):
    response = api(user).get(f"{path.format(job=job.pk)}?{query}")
    assert refused(response, name) == [message]
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "user, path, query",
    [
        ("ops", "/api/v1/usage", "group_by=team&group_by=day&format=csv"),
        ("alice", "/api/v1/jobs/{job}/events", "limit=5&format=json"),
        ("alice", "/api/v1/jobs/{job}/metrics", "name=loss&rank=0&attempt=1&after_step=3"),
        ("alice", "/api/v1/jobs/{job}/logs", "rank=0&attempt=1&stream=stderr&offset=0"),
        ("rita", "/api/v1/forecast-accuracy", "from=2026-10-01&to=2026-11-01&team=research-foundation-models"),
        ("alice", "/api/v1/tokens", "user=alice"),
    ],
)
def test_the_parameters_each_list_takes_are_still_taken(api, job, user, path, query):
    response = api(user).get(f"{path.format(job=job.pk)}?{query}")
    assert response.status_code == 200, response.content


def test_forecast_accuracy_asks_who_may_ask_first(api, now):
    assert api("alice").get("/api/v1/forecast-accuracy?start=2026-10-01").status_code == 403


@pytest.mark.parametrize(
    "query, name, message",
    [
        ("attempt=2", "attempt", NO_SUCH_JOB_ATTEMPT.format(job="{job}", made=1)),
        ("rank=0&attempt=2", "attempt", NO_SUCH_ATTEMPT.format(job="{job}", rank=0, made=1)),
        ("rank=64", "rank", NO_SUCH_RANK.format(job="{job}", ranks="ranks 0-{last}")),
    ],
)
def test_metrics_of_an_attempt_or_rank_the_job_has_not_run_are_a_400_as_its_logs(api, job, query, name, message):
    url = f"/api/v1/jobs/{job.pk}/metrics?{query}"
    expected = message.replace("{job}", str(job.pk)).replace("{last}", str(job.task_count - 1))
    assert refused(api("alice").get(url), name) == [expected]
