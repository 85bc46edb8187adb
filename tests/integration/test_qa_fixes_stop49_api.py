"""QA stop 49, the API as a new user reads it: a `depends_on` refusal named the entry by its
place once the list was sorted by job id (`[99999, 27]` refused as `depends_on.1`); a list
where a choice goes was quoted as Python writes it; a submit took `?dry_run=1` and ignored it."""

import pytest

from scheduling.models import Job
from tests.conftest import make_spec

pytestmark = pytest.mark.django_db


def submit(api, **overrides):
    return api("alice").post("/api/v1/jobs", make_spec(client_job_id=None, **overrides), format="json")


@pytest.fixture
def known(api) -> int:
    answer = submit(api)
    assert answer.status_code == 201
    return answer.json()["id"]


@pytest.mark.parametrize("url", ["/api/v1/jobs", "/api/v1/jobs/dry-run"])
def test_an_unknown_dependency_is_named_by_its_place_as_written(api, known, url):
    cases = [
        ([99999, known], "depends_on.0"),
        ([known, {"job": 99998, "on": "failure"}], "depends_on.1.job"),
        ([known, known, 99997], "depends_on.2"),  # a repeat, dropped once read, still counts
        ([{"job": 99996}, 5], "depends_on.0.job"),
    ]
    for depends_on, field in cases:
        answer = api("alice").post(url, make_spec(client_job_id=None, depends_on=depends_on), format="json")
        assert answer.status_code == 400, answer.content
        assert list(answer.json()["fields"]) == [field], (depends_on, answer.json())


def test_a_batch_names_the_entry_as_its_spec_wrote_it(api, known):
    body = {"jobs": [make_spec(client_job_id=None), make_spec(client_job_id=None, depends_on=[99999, known])]}
    answer = api("alice").post("/api/v1/jobs/batch", body, format="json")
    assert answer.status_code == 400
    assert "jobs[1].depends_on.0" in answer.json()["fields"], answer.json()


@pytest.mark.parametrize(
    ("url", "method", "body", "field", "said"),
    [
        ("/api/v1/notifications/settings", "put", {"on": [["started"]]}, "on.0", "not a list."),
        ("/api/v1/notifications/settings", "put", {"on": [{"a": 1}]}, "on.0", "not an object."),
        ("/api/v1/jobs", "post", make_spec(client_job_id=None, priority=["P1"]), "priority", "not a list."),
    ],
)
def test_a_list_or_an_object_where_a_choice_goes_is_named_so(api, url, method, body, field, said):
    """QA: refused as `"['started']" is not a valid choice`, a Python list quoted as the value."""
    answer = getattr(api("alice"), method)(url, body, format="json")
    assert answer.status_code == 400
    (message,) = answer.json()["fields"][field]
    assert message.startswith("must be one of ") and message.endswith(said) and "[" not in message, message


@pytest.mark.parametrize(
    "url", ["/api/v1/jobs?dry_run=1", "/api/v1/jobs/?dry_run=true&x=1", "/api/v1/jobs/batch?dry_run=1"]
)
def test_a_submit_refuses_query_parameters_and_writes_nothing(api, url):
    """QA: `POST /api/v1/jobs?dry_run=1` ignored the parameter and submitted the job."""
    spec = make_spec(client_job_id=None)
    body = {"jobs": [spec]} if "batch" in url else spec
    answer = api("alice").post(url, body, format="json")
    assert answer.status_code == 400
    assert "dry_run" in answer.json()["fields"] and "POST /api/v1/jobs/dry-run" in answer.json()["detail"]
    assert not Job.objects.exists()
    assert api("alice").post("/api/v1/jobs?format=json", spec, format="json").status_code == 201  # DRF's own


def test_a_dry_run_refuses_query_parameters(api):
    answer = api("alice").post("/api/v1/jobs/dry-run?verbose=1", make_spec(client_job_id=None), format="json")
    assert answer.status_code == 400 and "verbose" in answer.json()["fields"]
