"""QA stop 48, the submit page: a checkpoint block without a path (an interval of -1, "abc",
1e400; a retain_last_n of -1) was dropped in silence, the job submitted without one, where the
API refuses the same spec. And YAML -> form with one env value the form cannot hold (a line
break) blamed every env variable."""

import html

import pytest

from scheduling.models import Job
from scheduling.web.form_fit import NOT_IN_FORM
from scheduling.web.submit_page import form_to_spec
from tests.integration.test_submit_page import form_of, inline_errors, post

REQUIRED = "This field is required."


@pytest.fixture
def alice(logged_in):
    return logged_in("alice")


@pytest.fixture
def form(alice) -> dict:
    return {**form_of(alice.get("/jobs/new/")), "command": "python\ntrain.py"}


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"checkpoint.interval_minutes": "-1"}, "checkpoint.path", REQUIRED),
        ({"checkpoint.interval_minutes": "abc"}, "checkpoint.path", REQUIRED),
        ({"checkpoint.interval_minutes": "1e400"}, "checkpoint.path", REQUIRED),
        ({"checkpoint.retain_last_n": "-1"}, "checkpoint.path", REQUIRED),
        ({"checkpoint.path": "s3://ckpt/x", "checkpoint.interval_minutes": "-1"}, "checkpoint.interval_minutes", ""),
        ({"checkpoint.path": "s3://ckpt/x", "checkpoint.interval_minutes": "abc"}, "checkpoint.interval_minutes", ""),
        ({"checkpoint.path": "s3://ckpt/x", "checkpoint.retain_last_n": "-1"}, "checkpoint.retain_last_n", ""),
    ],
)
def test_a_checkpoint_field_filled_in_is_checked_as_the_api_checks_it(alice, api, form, typed, field, message):
    response = post(alice, form, "submit", **typed)
    assert response.status_code == 200 and not Job.objects.exists()
    said = html.unescape(inline_errors(response, field))
    assert said and message in said
    # as the API answers the same spec
    spec = {**form_to_spec({**form, **typed})[0]}
    refused = api("alice").post("/api/v1/jobs", spec, format="json")
    assert refused.status_code == 400 and field in refused.json()["fields"]
    kept = form_of(response)  # what was typed stays in the form
    assert all(kept[name] == value for name, value in typed.items())


def test_a_blank_checkpoint_block_is_no_block_and_a_full_one_is_kept(alice, form):
    assert post(alice, form, "submit", client_job_id="none").status_code == 302
    assert Job.objects.get(client_job_id="none").spec["checkpoint"] is None
    full = {"checkpoint.path": "s3://ckpt/x", "checkpoint.interval_minutes": "15"}
    assert post(alice, form, "submit", client_job_id="full", **full).status_code == 302
    checkpoint = Job.objects.get(client_job_id="full").spec["checkpoint"]
    assert (checkpoint["path"], checkpoint["interval_minutes"]) == ("s3://ckpt/x", 15)


def test_yaml_to_form_names_only_the_env_variables_the_form_cannot_hold(alice, form):
    both = post(alice, form, "from_yaml", yaml='team: research-vision\nenv: {C: "x=y", D: "multi\\nline"}\n')
    warnings = both.context["state"].yaml_errors
    assert warnings == [NOT_IN_FORM.format(path="env.D", value='"multi\\nline"')]
    assert form_of(both)["env"] == "C=x=y"  # the variable it can hold is kept
    alone = post(alice, form, "from_yaml", yaml='team: research-vision\nenv: {C: "x=y"}\n')
    assert alone.context["state"].yaml_errors == [] and form_of(alone)["env"] == "C=x=y"
