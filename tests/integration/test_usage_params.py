"""The usage API's parameters as QA typed them: `owner=me` (`mlq usage --mine`), a resource
class in another case, a UTC offset past ±23:59, and RFC 3339's lowercase t and z (the list
filters' times read them the same way: one parser)."""

import pytest

from mlqueue.date_fields import BAD_OFFSET
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)
from tests.integration.test_usage_api import RFM, attempt, now, usage  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db
WINDOW = ("--from", "2026-04-20T08:00:00Z", "--to", "2026-04-20T12:00:00Z")


@pytest.fixture
def rows(demo, now):  # noqa: F811
    attempt(1, team=RFM, owner="alice", start=-3, end=-0.5)  # 8 H100 for 2.5 h: 20 GPU-h
    attempt(2, team=RFM, owner="rita", start=-2, end=-1, gpus=16)  # 16 GPU-h, in alice's team


def owners(response) -> dict[str, float]:
    assert response.status_code == 200, response.content
    return {row["owner"]: row["gpu_hours"] for row in response.json()["rows"]}


def test_owner_me_is_the_caller(api, rows):
    assert owners(usage(api, "alice", owner="me", group_by="owner")) == {"alice": 20.0}
    assert owners(usage(api, "rita", owner="me", group_by="owner")) == {"rita": 16.0}


@pytest.mark.parametrize("spelled", ["gpu:h100", "GPU:H100", "gpu:H100"])
def test_a_resource_class_in_another_case_is_the_class(api, rows, spelled):
    response = usage(api, resource_class=spelled, group_by="resource_class")
    assert response.status_code == 200, response.content
    assert [(row["resource_class"], row["gpu_hours"]) for row in response.json()["rows"]] == [("gpu:H100", 36.0)]


@pytest.mark.parametrize("field", ["from", "to"])
def test_an_offset_past_23_59_is_refused_naming_the_field(api, rows, field):
    value = "2026-04-20T09:40:00+24:00"
    response = usage(api, **{field: value})
    assert response.status_code == 400
    assert response.json()["fields"] == {field: [BAD_OFFSET.format(value=value, offset="+24:00")]}


def test_a_lowercase_t_and_z_are_read(api, rows):
    lower = usage(api, **{"from": "2026-04-20t08:00:00z", "to": "2026-04-20t12:00:00z"})
    assert lower.status_code == 200, lower.content
    assert lower.json() == usage(api).json()


def test_the_job_list_filters_read_times_the_same_way(api, rows):
    answer = api("alice").get("/api/v1/jobs", {"submitted_after": "2026-04-20t08:00:00z"})
    assert answer.status_code == 200, answer.content
    value = "2026-04-20T09:40:00+24:00"
    refused = api("alice").get("/api/v1/jobs", {"submitted_after": value})
    assert refused.status_code == 400
    assert BAD_OFFSET.format(value=value, offset="+24:00") in str(refused.json())


def test_mlq_usage_mine_and_a_class_in_any_case(mlq, rows):  # noqa: F811
    result = mlq("usage", *WINDOW, "--mine", "--class", "h100", "--by", "owner")
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.output.splitlines()[2:]] == [["alice", "20.0"], ["TOTAL", "20.0"]]
    refused = mlq("usage", "--mine", "--owner", "rita")
    assert refused.exit_code == 2 and "give --owner or --mine, not both" in refused.output
