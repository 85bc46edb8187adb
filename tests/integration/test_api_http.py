"""The API at the HTTP level: a key given twice in a body, a body sent without Content-Length,
the JSON answer of a path no route matches (DEBUG on and off) and of an unhandled error, and the
body limits the README states."""

import json
import re
from pathlib import Path

import pytest
from django.conf import settings

from mlqueue.errors import BODY_TOO_LARGE
from mlqueue.middleware import LENGTH_REQUIRED, NO_SUCH_API_PATH
from mlqueue.parsers import DUPLICATE_KEY, MALFORMED_JSON
from mlqueue.urls import SERVER_ERROR
from mlqueue.yaml_body import MAX_YAML_BYTES, YAML_SYNTAX
from scheduling.models import Job
from scheduling.web import api as jobs_api
from tests.conftest import make_spec

README = Path(__file__).resolve().parents[2] / "README.md"
DRY_RUN_BODY = (
    b'{"team":"research-foundation-models","command":["true"],'
    b'"resources":{"gpu_count":1,"gpu_count":2,"gpu_type":"H100"}}'
)


def post(client, path: str, body: bytes, content_type: str = "application/json", **extra):
    return client.generic("POST", path, body, content_type=content_type, **extra)


# --- A key given twice -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/jobs/dry-run", "/api/v1/jobs"])
def test_a_json_key_given_twice_is_refused_naming_its_path(api, path):
    before = Job.objects.count()

    response = post(api("alice"), path, DRY_RUN_BODY)

    message = DUPLICATE_KEY.format(key="gpu_count")
    assert response.status_code == 400, response.content
    assert response.json() == {
        "detail": f"resources.gpu_count: {message}",
        "fields": {"resources.gpu_count": [message]},
    }
    assert message == "duplicate key 'gpu_count': a key may appear only once in an object."
    assert Job.objects.count() == before


@pytest.mark.parametrize(
    "body, field, key",
    [
        (b'{"team": "a", "team": "b"}', "team", "team"),
        (b'{"jobs": [{"name": "x"}, {"env": {"A": "1", "B": "2", "A": "3"}}]}', "jobs.1.env.A", "A"),
        # The outer object's duplicate first; its value is not looked into.
        (b'{"env": {"A": "1", "A": "2"}, "env": {}}', "env", "env"),
        # Text that the answer cannot carry is replaced.
        (b'{"\\ud800": 1, "\\ud800": 2}', "\ufffd", "\ufffd"),
    ],
)
def test_the_first_key_given_twice_is_named_by_its_dotted_path(api, body, field, key):
    response = post(api("alice"), "/api/v1/jobs/batch", body)

    assert response.status_code == 400, response.content
    assert response.json()["fields"] == {field: [DUPLICATE_KEY.format(key=key)]}


def test_a_body_both_malformed_and_with_a_key_twice_is_refused_as_malformed(api):
    response = post(api("alice"), "/api/v1/jobs", b'{"team": "a", "team": "b"} trailing')

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "body": [MALFORMED_JSON.format(problem="Extra data: line 1 column 28 (char 27)")]
    }


def test_the_same_key_in_different_objects_is_fine(api):
    spec = make_spec(env={"gpu_count": "1"}, team="research-foundation-models")
    response = post(api("alice"), "/api/v1/jobs/dry-run", json.dumps(spec).encode())

    assert response.status_code == 200, response.content


def test_a_yaml_key_given_twice_is_refused_naming_its_line(api):
    text = "team: research-foundation-models\ncommand: ['true']\nresources:\n  gpu_count: 1\n  gpu_count: 2\n"
    response = post(api("alice"), "/api/v1/jobs/dry-run", text.encode(), "application/yaml")

    problem = YAML_SYNTAX.format(line=5, column=3, problem="found duplicate key 'gpu_count'")
    assert response.status_code == 400, response.content
    assert response.json()["fields"] == {"body": [problem]}


# --- A body without Content-Length ---------------------------------------------------------------


def chunked(client, path: str, body: bytes, content_type: str = "application/json"):
    """As daphne passes a chunked body on: Transfer-Encoding, and no CONTENT_LENGTH."""
    return post(client, path, body, content_type, HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="")


def test_a_chunked_api_body_is_refused_with_411_not_read_as_empty(api):
    before = Job.objects.count()

    response = chunked(api("alice"), "/api/v1/jobs", json.dumps(make_spec()).encode())

    assert response.status_code == 411
    assert response.json() == {"detail": LENGTH_REQUIRED}
    assert LENGTH_REQUIRED == "send the body with a Content-Length header; chunked request bodies are not read."
    assert Job.objects.count() == before


def test_a_chunked_form_is_refused_with_411_in_text(client, demo):
    response = chunked(client, "/accounts/login/", b"username=alice&password=demo", "application/x-www-form-urlencoded")

    assert response.status_code == 411
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == f"{LENGTH_REQUIRED}\n"


def test_a_body_with_content_length_is_read_whatever_transfer_encoding_says(api):
    spec = json.dumps(make_spec(resources={"gpu_count": 1}, team="research-foundation-models")).encode()
    response = post(api("alice"), "/api/v1/jobs/dry-run", spec, HTTP_TRANSFER_ENCODING="identity")

    assert response.status_code == 200, response.content


# --- Paths no route matches, and errors --------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "method, path", [("DELETE", "/api/v1/tokens/abc"), ("GET", "/api/v1/jobs/-1"), ("POST", "/api/v1/nope/")]
)
def test_an_unmatched_api_path_answers_json_with_debug_on_or_off(api, settings, debug, method, path):
    settings.DEBUG = debug

    response = api("alice").generic(method, path)

    assert response.status_code == 404
    assert response.json() == {"detail": NO_SUCH_API_PATH.format(path=path)}


@pytest.mark.parametrize("debug", [False, True])
def test_an_unmatched_page_path_still_gets_a_page(logged_in, settings, debug):
    settings.DEBUG = debug

    response = logged_in("alice").get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_missing_row_is_a_404_that_names_what_was_asked_for(api):
    """Not Django's "No Job matches the given query." (QA: an admin's `mlq uncordon nope-01`
    printed "No Node matches the given query.")."""
    response = api("alice").get("/api/v1/jobs/999999")
    assert (response.status_code, response.json()) == (404, {"detail": "no such job: 999999."})
    uncordon = api("ops").post("/api/v1/nodes/nope-01/uncordon", {"reason": "x"}, format="json")
    assert (uncordon.status_code, uncordon.json()) == (404, {"detail": "no such node: nope-01."})
    window = api("ops").patch("/api/v1/maintenance/99", {"reason": "x"}, format="json")
    assert (window.status_code, window.json()) == (404, {"detail": "no such maintenance window: 99."})


def test_a_method_not_allowed_answers_json(api):
    response = api("alice").put("/api/v1/jobs", {}, format="json")

    assert response.status_code == 405
    assert response.json() == {"detail": 'Method "PUT" not allowed.'}


def test_an_unhandled_error_under_the_api_answers_json(api, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(jobs_api.Queue, "get", fail)
    client = api("alice")
    client.raise_request_exception = False

    response = client.get("/api/v1/queue")

    assert response.status_code == 500
    assert response.json() == {"detail": SERVER_ERROR}


def test_a_host_not_allowed_under_the_api_answers_json(api):
    response = api("alice").get("/api/v1/jobs", HTTP_HOST="elsewhere.example")

    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


# --- Body limits, as the README states them --------------------------------------------------------


def test_json_bodies_may_be_larger_than_yaml_bodies(api):
    padding = "x" * (MAX_YAML_BYTES + 1000)
    as_json = post(api("alice"), "/api/v1/jobs/dry-run", json.dumps({**make_spec(), "pad": padding}).encode())
    as_yaml = post(api("alice"), "/api/v1/jobs/dry-run", f"pad: {padding}\n".encode(), "application/yaml")

    assert as_json.status_code == 400  # read, then refused for the unknown field, not for its size
    assert as_yaml.status_code == 413
    assert as_yaml.json() == {"detail": BODY_TOO_LARGE.format(limit=MAX_YAML_BYTES)}


def test_the_readme_states_the_body_limits_the_server_applies():
    text = " ".join(README.read_text().split())
    json_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    assert "at most 64 KB (else 413)" not in text
    assert f"JSON bodies up to `MLQ_MAX_BODY_BYTES` ({json_limit:,} bytes, {json_limit // 1024} KiB)" in text
    assert f"YAML bodies up to {MAX_YAML_BYTES:,} bytes ({MAX_YAML_BYTES // 1024} KiB" in text
    assert re.search(r"Content-Length.{0,80}411", text)
