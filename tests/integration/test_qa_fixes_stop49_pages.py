"""QA stop 49, the browser UI's server side: the queue drew a cancelled job's last start
forecast; a job page button's refused reason was thrown away and its error only flashed at the
top; a reload of a refused button's answer, or its address typed, was a blank 405; the submit
form's dry run said nothing of an array or a sweep; a token expiry of 11 digits was "not an
integer". The browser half: tests/e2e/test_browser_qa_stop49.py."""

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Job, Schedule
from scheduling.states import TaskState
from tests.conftest import make_spec
from tests.integration.test_submit_page import form_of, post


def submit(api, username="alice", **overrides) -> int:
    overrides.setdefault("client_job_id", None)
    answer = api(username).post("/api/v1/jobs", make_spec(**overrides), format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


@pytest.mark.django_db
def test_the_queue_draws_no_start_forecast_for_a_job_that_left_the_queue(api, logged_in):
    waiting, cancelled = submit(api, name="waits"), submit(api, name="cancelled")
    soon = timezone.now() + timedelta(hours=2)
    Job.objects.filter(pk__in=[waiting, cancelled]).update(estimated_start=soon, likely_start=soon)
    assert api("alice").post(f"/api/v1/jobs/{cancelled}/cancel", {}, format="json").status_code == 200
    assert Job.objects.get(pk=cancelled).state == TaskState.CANCELLED
    page = logged_in("alice").get("/queue/?state=all").content.decode()
    row = {job_id: re.search(rf'<tr id="job-{job_id}".*?</tr>', page, re.S)[0] for job_id in (waiting, cancelled)}
    assert 'title="at the latest"' in row[waiting]
    assert 'title="at the latest"' not in row[cancelled] and "≤" not in row[cancelled]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("verb", "done", "reason", "said"),
    [
        ("cancel", "cancelled", "x" * 600, "at most 500 characters (600 given): nothing was cancelled."),
        ("hold", "held", "night\u200bly", "must not contain U+200B ZERO WIDTH SPACE"),
        ("cancel", "cancelled", 'a "quoted" <b>reason</b>', None),
    ],
)
def test_a_refused_reason_stays_in_its_box_with_the_error_beside_it(api, logged_in, verb, done, reason, said):
    job_id = submit(api)
    client = logged_in("alice")
    if said is None:  # a reason the page takes: the job is cancelled, nothing kept
        assert client.post(f"/jobs/{job_id}/{verb}/", {"reason": reason}).status_code == 302
        return
    response = client.post(f"/jobs/{job_id}/{verb}/", {"reason": reason})
    assert response.status_code == 400
    page = response.content.decode()
    form = re.search(rf'<form[^>]*id="job-{verb}".*?</form>', page, re.S)[0]
    box = re.search(r"<input name=\"reason\"[^>]*>", form)[0]
    assert 'maxlength="500"' in box
    assert html.unescape(re.search(r'value="([^"]*)"', box)[1]) == reason
    error = re.search(r'<div class="flash error field-error" data-field="reason"[^>]*>(.*?)</div>', form, re.S)
    assert error and said in html.unescape(error[1])
    assert page.count(said.split(":")[0]) >= 1 and "field-error" not in page.replace(form, "")
    assert Job.objects.get(pk=job_id).state == TaskState.PENDING and not Job.objects.get(pk=job_id).held


@pytest.mark.django_db
def test_a_group_cancels_refused_reason_stays_in_the_groups_box(api, logged_in):
    parent = submit(api, array={"count": 3})
    response = logged_in("alice").post(f"/jobs/{parent}/cancel/", {"reason": "y" * 501})
    assert response.status_code == 400
    form = re.search(r'<form[^>]*id="group-cancel".*?</form>', response.content.decode(), re.S)[0]
    assert 'value="' + "y" * 501 + '"' in form and "nothing was cancelled" in form


@pytest.mark.django_db
def test_a_buttons_address_opened_with_get_goes_back_to_its_page(api, logged_in, demo):
    job_id = submit(api)
    client = logged_in("alice")
    for verb in ("cancel", "hold", "release", "requeue"):
        response = client.get(f"/jobs/{job_id}/{verb}/")
        assert (response.status_code, response["Location"]) == (302, f"/jobs/{job_id}/"), verb
    assert client.put(f"/jobs/{job_id}/cancel/").status_code == 405
    assert Job.objects.get(pk=job_id).state == TaskState.PENDING  # a GET changes nothing
    schedule = Schedule.objects.first()
    if schedule is not None:
        response = logged_in("ops").get(f"/schedules/{schedule.pk}/run/")
        assert (response.status_code, response["Location"]) == (302, f"/schedules/{schedule.pk}/")
    assert logged_in("rita").get("/teams/what-if/")["Location"] == "/teams/"
    assert client.get(f"/jobs/{job_id + 1000}/cancel/").status_code == 302  # the page says 404


@pytest.fixture
def form(logged_in) -> dict:
    client = logged_in("alice")
    return {**form_of(client.get("/jobs/new/")), "command": "python\ntrain.py"}


@pytest.mark.django_db
def test_the_submit_forms_dry_run_says_what_an_array_makes(logged_in, form):
    page = post(logged_in("alice"), form, "dry_run", **{"array.count": "3", "array.parallelism": "2"}).content.decode()
    said = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p id="dry-run-group">.*?</p>', page, re.S)[0]))
    assert "An array of 3 elements (indices 0-2), at most 2 at once" in said
    assert "fails once more than 0 fail for good" in said and "one element's" in said


@pytest.mark.django_db
def test_the_submit_forms_dry_run_lists_a_sweeps_trials(logged_in, form):
    typed = {"sweep.method": "grid", "sweep.parameters": "lr: [0.1, 0.01]\nbatch: [32, 64]"}
    page = post(logged_in("alice"), form, "dry_run", **typed).content.decode()
    said = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p id="dry-run-group">.*?</p>', page, re.S)[0]))
    assert "A grid sweep of 4 trials" in said and "fails only when every trial has failed" in said
    trials = re.search(r'<table[^>]*id="dry-run-trials".*?</table>', page, re.S)[0]
    assert trials.count("<tr>") == 5 and "lr=0.1" in html.unescape(trials)


@pytest.mark.django_db
@pytest.mark.parametrize("typed", ["99999999999", "9" * 40, "4000"])
def test_a_token_expiry_too_large_is_refused_by_its_limit(logged_in, typed):
    response = logged_in("alice").post("/account/tokens/", {"name": "ci", "expires_in_days": typed})
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "less than or equal to 3650" in page and "must be an integer" not in page
