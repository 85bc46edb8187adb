"""How old the stored start forecasts are: the leader records its forecast's snapshot time and
duration on the lease row (fenced), `GET /api/v1/scheduler` returns them, and the job and queue
APIs and pages say "as of N ago", or that the forecast is stale."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.utils import timezone

from scheduling.core.decisions import Decisions
from scheduling.fencing import Deposed
from scheduling.leader.forecasting import Forecaster, record_forecast
from scheduling.leader.worker import run_pass
from scheduling.models import SchedulerLease
from scheduling.selectors import scheduler_state
from tests.integration.test_cli_groups import mlq  # noqa: F401
from tests.integration.test_forecast import forecaster, one_node, small  # noqa: F401

INTERVAL_S = 5.0
FORECAST_MS = 2000.0
# 5 intervals plus twice the forecast's 2 s
STALE_AFTER_S = 5 * INTERVAL_S + 2 * FORECAST_MS / 1000


@pytest.fixture(autouse=True)
def interval(settings):
    settings.MLQ_FORECAST_INTERVAL_S = INTERVAL_S


def forecast_taken_ago(seconds: float, *, ms: float = FORECAST_MS) -> None:
    """The last forecast's snapshot `seconds` old by the database's clock (the statement's: a
    test's transaction keeps `now()` where it began)."""
    SchedulerLease.objects.filter(pk=1).update(forecast_ms=ms)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {SchedulerLease._meta.db_table} "
            "SET forecast_at = statement_timestamp() - make_interval(secs => %s) WHERE id = 1",
            [seconds],
        )


def logged_in(username: str) -> Client:
    client = Client()
    client.login(username=username, password="demo")
    return client


@pytest.fixture
def waiting(api, one_node):  # noqa: F811
    """A job waiting behind another on the one node, forecast by a pass at `moment`."""
    small(api, "first", 1.0)
    waiting = small(api, "waiting", 1.0)
    moment = timezone.now().replace(microsecond=0)
    run_pass(epoch=one_node, now=moment, forecaster=Forecaster(interval_s=0, inline=True))
    waiting.refresh_from_db()
    assert waiting.estimated_start is not None
    return waiting, moment


def test_a_forecast_records_its_snapshot_time_and_duration(api, waiting):
    job, moment = waiting
    lease = SchedulerLease.objects.get(pk=1)
    assert abs((lease.forecast_at - moment).total_seconds()) < 1e-3
    assert lease.forecast_ms > 0

    state = api("victor").get("/api/v1/scheduler").json()
    assert set(state) >= {"forecast_at", "forecast_ms", "forecast_age_s", "forecast_stale"}
    assert state["forecast_ms"] == pytest.approx(lease.forecast_ms)
    assert 0 <= state["forecast_age_s"] < 60 and state["forecast_stale"] is False

    detail = api("alice").get(f"/api/v1/jobs/{job.pk}").json()
    queue = api("alice").get("/api/v1/queue").json()["results"]
    entry = next(entry for entry in queue if entry["id"] == job.pk)
    why = api("alice").get(f"/api/v1/jobs/{job.pk}/why").json()  # `mlq why` printed its starts with no age
    for body in (detail, entry, why):
        assert body["estimated_start_as_of"] == state["forecast_at"]
        assert body["estimated_start_stale"] is False
    running = next(row for row in api("alice").get("/api/v1/jobs").json()["results"] if row["name"] == "first")
    assert (running["estimated_start_as_of"], running["estimated_start_stale"]) == (None, False)


def test_the_pages_say_how_old_the_start_is(api, waiting):
    job, _ = waiting
    forecast_taken_ago(12)
    alice = logged_in("alice")
    panel = alice.get(f"/jobs/{job.pk}/panel/").content.decode()
    # 12 s, and the seconds a loaded machine takes to get here
    assert re.search(r'<span id="forecast-age" class="small muted">\(as of 1[2-9]s ago\)</span>', panel)
    queue = alice.get("/queue/").content.decode()
    assert re.search(r'<span id="forecast-age" class="muted">as of 1[2-9]s ago</span>', queue)


def test_a_forecast_past_the_bound_is_stale_everywhere(api, waiting):
    job, _ = waiting
    forecast_taken_ago(STALE_AFTER_S - 2)
    assert scheduler_state().forecast_stale is False
    assert api("alice").get(f"/api/v1/jobs/{job.pk}").json()["estimated_start_stale"] is False

    forecast_taken_ago(300)
    assert api("victor").get("/api/v1/scheduler").json()["forecast_stale"] is True
    assert api("alice").get(f"/api/v1/jobs/{job.pk}").json()["estimated_start_stale"] is True
    queue = api("alice").get("/api/v1/queue").json()["results"]
    assert next(entry for entry in queue if entry["id"] == job.pk)["estimated_start_stale"] is True
    assert api("alice").get(f"/api/v1/jobs/{job.pk}/why").json()["estimated_start_stale"] is True
    alice = logged_in("alice")
    panel = alice.get(f"/jobs/{job.pk}/panel/").content.decode()
    assert '<span id="forecast-age" class="stale">(stale: forecast 5m ago, not refreshed since)</span>' in panel
    assert "as of" not in panel
    assert '<span id="forecast-age" class="stale">stale: 5m old</span>' in alice.get("/queue/").content.decode()


def test_a_slower_forecast_is_given_more_time_before_it_is_stale(demo):
    forecast_taken_ago(60, ms=40_000.0)  # 25 s + 2 x 40 s
    assert (scheduler_state().forecast_stale_after_s, scheduler_state().forecast_stale) == (105.0, False)
    forecast_taken_ago(110, ms=40_000.0)
    assert scheduler_state().forecast_stale is True


def test_the_age_is_the_databases_clock_not_the_web_hosts(demo):
    forecast_taken_ago(10)
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        state = scheduler_state()
    assert 10 <= state.forecast_age_s < 70 and state.forecast_stale is False


def test_no_forecast_yet_is_neither_aged_nor_stale(api, demo):
    state = api("victor").get("/api/v1/scheduler").json()
    assert (state["forecast_at"], state["forecast_age_s"], state["forecast_stale"]) == (None, None, False)


def test_a_deposed_leader_cannot_record_a_forecast(api, waiting, one_node):  # noqa: F811
    before = SchedulerLease.objects.values_list("forecast_at", "forecast_ms").get(pk=1)
    SchedulerLease.objects.filter(pk=1).update(epoch=one_node + 1)
    with pytest.raises(Deposed):
        record_forecast(epoch=one_node, at=timezone.now(), ms=1.0)
    assert SchedulerLease.objects.values_list("forecast_at", "forecast_ms").get(pk=1) == before


def test_a_forecast_finished_after_a_takeover_writes_nothing(api, one_node, forecaster):  # noqa: F811
    small(api, "first", 1.0)
    small(api, "waiting", 1.0)
    run_pass(epoch=one_node, forecaster=forecaster)
    forecaster.running.join(timeout=30)
    SchedulerLease.objects.filter(pk=1).update(epoch=one_node + 1)  # another scheduler took over
    with pytest.raises(Deposed):
        forecaster.maybe_run(forecaster.running.view, Decisions(), epoch=one_node, now=timezone.now())
    assert SchedulerLease.objects.values_list("forecast_at", "forecast_ms").get(pk=1) == (None, None)


def test_mlq_status_says_when_the_start_was_forecast_and_when_it_is_stale(api, waiting, mlq):  # noqa: F811
    job, _ = waiting
    as_of = api("alice").get(f"/api/v1/jobs/{job.pk}").json()["estimated_start_as_of"]
    shown = mlq("status", str(job.pk)).output
    assert f"(as of {as_of})" in shown and "STALE" not in shown
    forecast_taken_ago(300)
    as_of = api("alice").get(f"/api/v1/jobs/{job.pk}").json()["estimated_start_as_of"]
    assert f"(STALE: forecast as of {as_of}, not refreshed since)" in mlq("status", str(job.pk)).output
