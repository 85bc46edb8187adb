"""Submissions per user are rate limited (MLQ_SUBMIT_RATE): past it, POST /api/v1/jobs answers
429 with Retry-After and creates nothing; reads and other users are not affected."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from mlqueue.settings import env_rate
from scheduling.models import Job
from scheduling.web.throttles import SUBMIT_RATE_EXCEEDED
from tests.conftest import make_spec


@pytest.fixture(autouse=True)
def clock(settings):
    settings.MLQ_SUBMIT_RATE = "3/minute"
    cache.clear()
    with time_machine.travel(datetime(2026, 4, 20, 9, 0, tzinfo=UTC), tick=False) as traveller:
        yield traveller
    cache.clear()


def submit(client, name: str):
    return client.post("/api/v1/jobs", make_spec(client_job_id=name, resources={"gpu_count": 8}), format="json")


def test_a_flood_of_submissions_is_refused_past_the_rate(api, clock):
    alice = api("alice")
    assert [submit(alice, f"j{i}").status_code for i in range(3)] == [201, 201, 201]
    response = submit(alice, "j3")
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert response.json() == {"detail": SUBMIT_RATE_EXCEEDED.format(count=3, period="minute", wait=60)}
    assert response.json()["detail"] == "too many submissions: at most 3 jobs per minute per user; retry in 60 s."
    assert Job.objects.filter(client_job_id="j3").count() == 0
    clock.shift(45)
    assert submit(alice, "j3")["Retry-After"] == "15"
    clock.shift(15)
    assert submit(alice, "j3").status_code == 201


def test_reads_and_other_users_are_not_limited(api):
    alice = api("alice")
    for i in range(3):
        submit(alice, f"j{i}")
    assert submit(alice, "j3").status_code == 429
    assert alice.get("/api/v1/jobs").status_code == 200
    assert alice.get("/api/v1/queue").status_code == 200
    assert submit(api("rita"), "r0").status_code == 201


def test_the_limit_is_per_user_not_per_token(api):
    for i in range(3):
        assert submit(api("alice"), f"j{i}").status_code == 201  # a fresh token each time
    assert submit(api("alice"), "j3").status_code == 429


def test_off_turns_it_off(api, settings):
    settings.MLQ_SUBMIT_RATE = None
    alice = api("alice")
    assert {submit(alice, f"j{i}").status_code for i in range(5)} == {201}


@pytest.mark.parametrize(
    "raw, rate",
    [("", "120/minute"), ("1000/minute", "1000/minute"), ("5/second", "5/second"), ("off", None), ("OFF", None)],
)
def test_the_rate_setting(monkeypatch, raw, rate):
    monkeypatch.setenv("MLQ_SUBMIT_RATE", raw)
    assert env_rate("MLQ_SUBMIT_RATE", "120/minute") == rate


@pytest.mark.parametrize("raw", ["lots", "10", "0/minute", "10/fortnight", "-1/minute", "10/m"])
def test_a_bad_rate_stops_the_server(monkeypatch, raw):
    monkeypatch.setenv("MLQ_SUBMIT_RATE", raw)
    with pytest.raises(ImproperlyConfigured, match="MLQ_SUBMIT_RATE=.* is not a rate: use N/second, N/minute"):
        env_rate("MLQ_SUBMIT_RATE", "120/minute")


def test_the_submit_page_counts_against_the_same_limit(api, demo):
    from tests.integration.test_submit_page import URL, form_of, logged_in, post

    page = logged_in("alice")
    form = {**form_of(page.get(URL)), "command": "python\n-m\ntrain"}
    for i in range(2):
        assert submit(api("alice"), f"j{i}").status_code == 201
    assert post(page, form, "submit", client_job_id="page-0").status_code == 302
    refused = post(page, form, "submit", client_job_id="page-1")
    assert refused.status_code == 429 and refused["Retry-After"] == "60"
    assert "too many submissions: at most 3 jobs per minute per user" in refused.content.decode()
    assert not Job.objects.filter(client_job_id="page-1").exists()
