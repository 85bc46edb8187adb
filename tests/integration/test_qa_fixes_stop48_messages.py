"""QA stop 48, small slips in messages: `GET /api/v1/usage?bad=1` listed the parameters it
takes without `format`; `?from=abc` was told date-time formats only, though a plain date works;
a cron of one word "has 1 fields"; a YAML body of a number "is a int"."""

import pytest

from mlqueue.query_parameters import UNKNOWN_PARAMETER_UNPAGED
from tests.conftest import make_spec

USAGE_TAKES = "from, to, team, owner, resource_class, priority, group_by, format"


def test_an_unknown_usage_parameter_lists_format_too(api):
    response = api("ops").get("/api/v1/usage", {"bad": "1"})
    assert response.status_code == 400
    assert response.json()["fields"] == {"bad": [UNKNOWN_PARAMETER_UNPAGED.format(filters=USAGE_TAKES)]}


def test_a_time_in_no_format_is_told_a_plain_date_works_too(api):
    response = api("ops").get("/api/v1/usage", {"from": "abc"})
    assert response.status_code == 400
    said = response.json()["fields"]["from"][0]
    assert said.startswith("Datetime has wrong format. Use one of these formats instead: YYYY-MM-DDThh:mm")
    assert said.endswith(", or a date alone (YYYY-MM-DD: its midnight UTC).")
    # as it says: a plain date is taken, as its midnight UTC
    taken = api("ops").get("/api/v1/usage", {"from": "2026-03-01", "to": "2026-03-02"})
    assert taken.status_code == 200, taken.content


@pytest.mark.parametrize(("cron", "count"), [("bad", "1 field;"), ("* * *", "3 fields;"), ("* * * * * *", "6 fields;")])
def test_a_cron_of_the_wrong_length_counts_its_fields_in_good_grammar(api, cron, count):
    body = {"name": "nightly", "cron": cron, "timezone": "UTC", "spec": make_spec(client_job_id=None)}
    refused = api("alice").post("/api/v1/schedules", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["fields"]["cron"][0].startswith(f"{cron!r} has {count} a cron expression has five")


@pytest.mark.parametrize(("text", "kind"), [("5\n", "an integer"), ("- a\n", "a list"), ("true\n", "a boolean")])
def test_a_yaml_body_that_is_no_mapping_names_its_kind_with_the_right_article(api, text, kind):
    refused = api("alice").post("/api/v1/jobs", text, content_type="application/yaml")
    assert refused.status_code == 400
    assert refused.json()["fields"]["body"] == [
        f"the YAML must be a mapping of spec fields (like the API's JSON object); this one is {kind}."
    ]
