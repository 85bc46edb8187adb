"""The leader's start-time forecast on the real store: written after a pass, served by the
job and queue APIs and the job page, learnt from the team's history, and kept in life."""

import os
import signal
from datetime import datetime, timedelta

import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone

from scheduling.leader import forecasting
from scheduling.leader.forecasting import Forecaster, runtime_fractions
from scheduling.leader.leadership import LeaseRowLeadership
from scheduling.leader.worker import SchedulerWorker, publish_queue_order, run_pass
from scheduling.models import Job, JobState, Node, SchedulerLease
from tests.conftest import make_spec
from tests.integration.test_scheduler_pass import run_all_ranks, submit
from tests.nodes import cordon

ONE_NODE = "z1-r1-h100-01"


@pytest.fixture
def one_node(leader):  # noqa: F811
    """One 8-GPU H100 node: 8-GPU jobs queue behind each other."""
    cordon(Node.objects.filter(gpu_type="H100").exclude(name=ONE_NODE))
    return leader


@pytest.fixture
def forecaster():
    """A leader's forecaster that forecasts on every pass, in its kept workers: ended after
    the test (its workers would outlive it)."""
    kept = Forecaster(interval_s=0)
    yield kept
    kept.stop()


def small(api, name: str, hours: float) -> Job:
    return submit(
        api,
        client_job_id=name,
        name=name,
        priority="P2",
        max_runtime_hours=hours,
        topology_hint="none",
        resources={"gpu_count": 8, "cpu_per_rank": 4, "memory_per_rank_gb": 32},
    )


def forecast_pass(epoch: int):
    return run_pass(epoch=epoch, forecaster=Forecaster(interval_s=0, inline=True))


def seconds_from(moment, origin) -> float:
    return (moment - origin).total_seconds()


def test_queued_jobs_start_within_their_forecast_bound(api, one_node):
    first = small(api, "first", 1.0)
    forecast_pass(one_node)
    first.refresh_from_db()
    started = first.tasks.get().assigned_at
    long_job, short_job = small(api, "long", 2.0), small(api, "short", 0.5)
    forecast_pass(one_node)
    long_job.refresh_from_db()
    short_job.refresh_from_db()
    # Shortest first within a team: the short job goes next, at the latest when the first job's hour is up.
    assert seconds_from(short_job.estimated_start, started) == pytest.approx(3600, abs=5)
    assert seconds_from(long_job.estimated_start, started) == pytest.approx(3600 + 1800, abs=5)
    assert short_job.likely_start == short_job.estimated_start  # no history yet

    body = api("alice").get(f"/api/v1/jobs/{short_job.pk}").json()
    assert body["estimated_start"] is not None and body["likely_start"] is not None
    queue = api("alice").get("/api/v1/queue").json()
    assert [(e["id"], e["position"]) for e in queue["results"]] == [(short_job.pk, 1), (long_job.pk, 2)]
    assert queue["results"][0]["pending_reason"]["code"] == "INSUFFICIENT_CAPACITY"
    assert queue["results"][0]["estimated_start"] == body["estimated_start"]

    # In life the runs are shorter than asked: each queued job starts within the bound the
    # forecast promised before the runs ended.
    promised = {job.pk: job.estimated_start for job in (short_job, long_job)}
    for done, following in ((first, short_job), (short_job, long_job)):
        run_all_ranks(done, exit_code=0)
        forecast_pass(one_node)
        following.refresh_from_db()
        assert following.state == JobState.ASSIGNED
        assert following.tasks.get().assigned_at <= promised[following.pk]
        assert following.estimated_start is None  # placed: the forecast is cleared


def test_the_leader_forecasts_in_a_child_process_and_writes_on_a_later_pass(api, one_node, forecaster):
    small(api, "first", 1.0)
    run_pass(epoch=one_node, forecaster=forecaster)
    assert forecaster.running is not None  # the pass did not wait for it
    waiting = small(api, "waiting", 1.0)
    for _ in range(4):  # a pass writes what the child finished and starts the next forecast
        forecaster.running.join(timeout=30)
        run_pass(epoch=one_node, forecaster=forecaster)
        waiting.refresh_from_db()
        if waiting.estimated_start is not None:
            break
    assert waiting.estimated_start is not None and forecaster.last_ms > 0
    forecaster.stop()
    assert forecaster.running is None


def quarter_hours(api) -> None:
    """The team's jobs used a quarter of the hour they asked for."""
    now = timezone.now()
    for index in range(3):
        old = small(api, f"history-{index}", 1.0)
        Job.objects.filter(pk=old.pk).update(
            state=JobState.SUCCEEDED,
            started_at=now - timedelta(hours=2),
            finished_at=now - timedelta(hours=2) + timedelta(minutes=15),
        )
    assert runtime_fractions(now) == {("research-foundation-models", "gpu:H100"): pytest.approx(0.25)}


def one_started_one_waiting(api, epoch: int) -> tuple[datetime, Job]:
    """After quarter_hours: a one-hour job started by a forecast pass, and when it started; then a
    second one-hour job, waiting behind it."""
    quarter_hours(api)
    first = small(api, "first", 1.0)
    forecast_pass(epoch)
    return first.tasks.get().assigned_at, small(api, "waiting", 1.0)


def test_likely_start_learns_from_the_teams_history(api, one_node):
    started, waiting = one_started_one_waiting(api, one_node)
    forecast_pass(one_node)
    waiting.refresh_from_db()
    assert seconds_from(waiting.estimated_start, started) == pytest.approx(3600, abs=5)
    assert seconds_from(waiting.likely_start, started) == pytest.approx(900, abs=5)

    client = Client()
    client.login(username="alice", password="demo")
    page = client.get(f"/jobs/{waiting.pk}/panel/").content.decode()
    assert "at the latest" in page and "likely around" in page
    assert waiting.estimated_start.strftime("%H:%M") in page and waiting.likely_start.strftime("%H:%M") in page


def test_the_bound_and_the_likely_run_in_two_child_processes_side_by_side(api, one_node, forecaster):
    started, waiting = one_started_one_waiting(api, one_node)
    run_pass(epoch=one_node, forecaster=forecaster)
    pids = forecaster.running.workers.pids
    assert len(pids) == 2 and pids[0] != pids[1]
    for _ in range(4):
        forecaster.running.join(timeout=30)
        run_pass(epoch=one_node, forecaster=forecaster)
        waiting.refresh_from_db()
        if waiting.likely_start is not None:
            break
    assert seconds_from(waiting.estimated_start, started) == pytest.approx(3600, abs=5)
    assert seconds_from(waiting.likely_start, started) == pytest.approx(900, abs=5)
    forecaster.stop()


def test_the_queue_api_checks_its_parameters_and_scopes_to_the_callers_teams(api, one_node):
    response = api("alice").get("/api/v1/queue?limit=0&priority=P9")
    assert response.status_code == 400 and {"limit", "priority"} <= set(response.json()["fields"])
    mine = small(api, "mine", 1.0)
    other = submit(
        api,
        user="bob",
        client_job_id="bobs",
        team="production-ranking",
        priority="P2",
        resources={"gpu_count": 8, "cpu_per_rank": 4, "memory_per_rank_gb": 32},
        topology_hint="none",
    )
    publish_queue_order([other.pk, mine.pk])
    ids = [entry["id"] for entry in api("alice").get("/api/v1/queue").json()["results"]]
    assert ids == [mine.pk]  # bob's job is not alice's to see
    assert [e["id"] for e in api("ops").get("/api/v1/queue").json()["results"]] == [other.pk, mine.pk]
    assert api(None).get("/api/v1/queue").status_code == 401


def test_an_arrays_parallelism_holds_in_the_forecast(api, leader):
    """Six one-GPU elements, at most two at once, on an idle cluster: two start now and the
    forecast starts the others in two more waves, one max_runtime apart."""
    response = api("alice").post(
        "/api/v1/jobs",
        make_spec(
            client_job_id=None,
            max_runtime_hours=1.0,
            topology_hint="none",
            resources={"gpu_count": 1, "gpu_type": "H100"},
            array={"count": 6, "parallelism": 2},
        ),
        format="json",
    )
    assert response.status_code == 201, response.json()
    forecast_pass(leader)
    kids = list(Job.objects.filter(parent_id=response.json()["id"]).order_by("group_index"))
    placed = kids[0].tasks.get().assigned_at
    assert [kid.state for kid in kids] == ["ASSIGNED", "ASSIGNED", "PENDING", "PENDING", "PENDING", "PENDING"]
    waves = [seconds_from(kid.estimated_start, placed) for kid in kids[2:]]
    assert waves == pytest.approx([3600, 3600, 7200, 7200], abs=5)


def test_a_teams_short_cpu_jobs_say_nothing_of_its_gpu_jobs_runtime(api, demo):
    """QA: a team's many one-second CPU jobs (168 h asked) made the likely start of its GPU jobs
    come minutes away while every GPU job ran its hour: the share is per resource class."""
    quarter_hours(api)
    now = timezone.now()
    for index in range(4):
        cpu = small(api, f"cpu-{index}", 168.0)
        Job.objects.filter(pk=cpu.pk).update(
            gpu_type="",
            gpu_count=0,
            state=JobState.SUCCEEDED,
            started_at=now - timedelta(hours=1),
            finished_at=now - timedelta(hours=1) + timedelta(seconds=1),
        )
    fractions = runtime_fractions(now)
    assert fractions[("research-foundation-models", "gpu:H100")] == pytest.approx(0.25)
    assert fractions[("research-foundation-models", "cpu")] == 0.01


def test_a_leader_that_steps_down_ends_its_forecast_and_its_kept_workers(api, demo, forecaster):
    """The forecast's workers are kept from one forecast to the next while the process leads;
    deposed, it ends them with the forecast under way (a standby forecasts nothing)."""
    worker = SchedulerWorker(leadership=LeaseRowLeadership())
    worker.forecaster = forecaster
    assert worker._ensure_leading()
    small(api, "waiting", 1.0)
    assert worker._one_pass() is not None
    processes = [kept.process for kept in worker.forecaster.workers.kept]
    assert processes and all(process.is_alive() for process in processes)
    SchedulerLease.objects.filter(pk=1).update(epoch=F("epoch") + 1, holder="another:1")  # another took over
    assert worker._one_pass() is None
    assert worker.forecaster.running is None and worker.forecaster.workers.kept == []
    assert not any(process.is_alive() for process in processes)


def test_a_forecast_not_back_in_time_is_given_up_and_the_next_one_started(api, one_node, forecaster, monkeypatch):
    """Workers that stopped answering (stopped here, as a thrashing machine would leave them)
    hold up the forecast, never the passes: past `GIVE_UP_S` a pass ends them and starts the
    next forecast in new ones, which writes as before."""
    small(api, "first", 1.0)
    waiting = small(api, "waiting", 1.0)
    run_pass(epoch=one_node, forecaster=forecaster)
    forecaster.running.join(timeout=30)
    run_pass(epoch=one_node, forecaster=forecaster)  # writes it, and asks the same workers again
    stuck = [worker.process for worker in forecaster.workers.kept]
    for process in stuck:
        os.kill(process.pid, signal.SIGSTOP)
    Job.objects.filter(pk=waiting.pk).update(estimated_start=None, likely_start=None)
    run_pass(epoch=one_node, forecaster=forecaster)  # not back, not yet given up
    assert all(process.is_alive() for process in stuck)
    monkeypatch.setattr(forecasting, "GIVE_UP_S", 0.0)
    forecaster.last_ms = 0.0  # nor 10 times the last one's time
    run_pass(epoch=one_node, forecaster=forecaster)
    assert not any(process.is_alive() for process in stuck)
    assert forecaster.running is not None and set(forecaster.workers.pids).isdisjoint(p.pid for p in stuck)
    forecaster.running.join(timeout=30)
    run_pass(epoch=one_node, forecaster=forecaster)
    waiting.refresh_from_db()
    assert waiting.estimated_start is not None


def test_a_leader_whose_renewal_stepped_down_ends_its_workers(api, demo, forecaster):
    """The lease's renewal steps down by itself once it misses its deadline (embedded mode's
    renewal, or a paused process): the next loop finds the lead lost and ends the forecast's
    workers before it competes again (QA: they outlived the lead)."""
    worker = SchedulerWorker(leadership=LeaseRowLeadership())
    worker.forecaster = forecaster
    assert worker._ensure_leading()
    small(api, "waiting", 1.0)
    assert worker._one_pass() is not None
    processes = [kept.process for kept in forecaster.workers.kept]
    assert processes
    worker.leadership.step_down()  # as `maybe_renew` does past its deadline
    SchedulerLease.objects.filter(pk=1).update(epoch=F("epoch") + 1, holder="another:1", renewed_at=timezone.now())
    assert not worker._ensure_leading()
    assert forecaster.running is None and forecaster.workers.kept == []
    assert not any(process.is_alive() for process in processes)


def test_a_job_that_left_the_queue_unplaced_shows_no_forecast_start(api, one_node):
    """A cancelled job keeps its last forecast columns (only a placement clears them): the API
    shows none (QA)."""
    small(api, "first", 1.0)
    waiting = small(api, "waiting", 1.0)
    forecast_pass(one_node)
    waiting.refresh_from_db()
    assert waiting.estimated_start is not None
    assert api("alice").get(f"/api/v1/jobs/{waiting.pk}").json()["estimated_start"] is not None
    assert (
        api("alice").post(f"/api/v1/jobs/{waiting.pk}/cancel", {"reason": "not needed"}, format="json").status_code
        < 300
    )
    shown = api("alice").get(f"/api/v1/jobs/{waiting.pk}").json()
    assert shown["state"] == "CANCELLED" and shown["estimated_start"] is None and shown["likely_start"] is None
