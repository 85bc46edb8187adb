"""QA walkthrough fixes on the forms: a block-wide submit error marks the block's first input,
a sweep's unreadable parameters get no extra "This field is required.", a user in no team is
told so (and cannot press Submit), the login page keeps the user name, and every page links a
favicon that exists."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils.html import escape

from scheduling.models import Job
from scheduling.web.submit_errors import NO_TEAM, errors_by_input
from scheduling.web.submit_page import PARAMETERS_SHAPE
from tests.integration.test_submit_page import URL, form_of, inline_errors, logged_in, post

ONE_OF = "a job is at most one of an array, a sweep and a pipeline"


@pytest.fixture
def alice(demo) -> Client:
    return logged_in("alice")


@pytest.fixture
def form(alice) -> dict:
    return {**form_of(alice.get(URL)), "command": "python\ntrain.py", "resources.gpu_count": "1"}


def test_an_error_on_a_whole_block_marks_its_first_input(alice, form):
    changes = {"array.count": "3", "sweep.method": "grid", "sweep.parameters": "lr: [0.1, 0.2]"}
    response = post(alice, form, "dry_run", **changes)
    summary = response.context["summary"]
    assert len(summary) == 1 and summary[0].startswith("sweep: ") and ONE_OF in summary[0]
    marked = inline_errors(response, "sweep.method")
    assert marked == escape(summary[0])
    assert re.search(r'id="f-sweep-method" name="sweep.method" aria-invalid="true"', response.content.decode())
    assert Job.objects.count() == 0


def test_errors_by_input_keeps_own_then_below_then_above():
    names = ["env", "sweep.method", "sweep.parameters", "sweep.metric.name", "sweep.metric.goal"]
    shown = errors_by_input(
        names,
        {"env.A": ["bad"], "env": ["whole"], "sweep": ["one of"], "sweep.metric": ["needed"], "other": ["x"]},
    )
    assert shown["env"] == ["whole", "A: bad"]
    assert shown["sweep.method"] == ["sweep: one of"]
    assert shown["sweep.metric.name"] == ["sweep.metric: needed"]
    assert shown["sweep.parameters"] == shown["sweep.metric.goal"] == []


def test_unreadable_sweep_parameters_get_their_own_message_only(alice, form):
    response = post(alice, form, "dry_run", **{"sweep.method": "grid", "sweep.parameters": "lr: [0.1"})
    marked = inline_errors(response, "sweep.parameters")
    assert marked.startswith(escape(PARAMETERS_SHAPE.format(problem="")[:40]))
    assert "This field is required." not in marked
    assert not any("required" in line for line in response.context["summary"])


@pytest.fixture
def loner(demo) -> Client:
    get_user_model().objects.create_user("nora", password="demo")
    return logged_in("nora")


def test_a_user_in_no_team_is_told_so_and_cannot_press_submit(loner):
    html = loner.get(URL).content.decode()
    assert escape(NO_TEAM) in html and 'id="no-team"' in html
    assert re.search(r'<button class="primary" type="submit" name="action" value="submit" disabled', html)
    form = {**form_of(loner.get(URL)), "command": "python\ntrain.py"}
    response = post(loner, form, "dry_run")
    assert inline_errors(response, "team") == escape(NO_TEAM)
    assert "This field is required." not in inline_errors(response, "team")


def test_a_member_gets_an_enabled_submit_and_no_notice(alice):
    html = alice.get(URL).content.decode()
    assert 'id="no-team"' not in html
    assert re.search(r'<button class="primary" type="submit" name="action" value="submit">', html)


def test_the_login_page_keeps_the_user_name_after_a_wrong_password(demo):
    response = Client().post("/accounts/login/", {"username": "alice", "password": "wrong"})
    html = response.content.decode()
    assert "did not match" in html
    assert re.search(r'<input name="username" value="alice"', html)
    assert re.search(r'<input name="password"[^>]*autofocus', html)  # the field to retype
    fresh = Client().get("/accounts/login/").content.decode()
    assert re.search(r'<input name="username" value=""[^>]*autofocus', fresh)


def test_every_page_links_a_favicon_that_exists(alice):
    for html in (alice.get("/queue/").content.decode(), Client().get("/accounts/login/").content.decode()):
        link = re.search(r'<link rel="icon" href="([^"]+)"', html)
        assert link and link[1] == "/static/favicon.svg"
    found = finders.find("favicon.svg")
    assert found and open(found).read().startswith("<svg")
