"""What a pass writes and counts when the store moved on between its snapshot and its apply
step, and what it says when the broker is gone."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from mlqueue.breaker import RedisBreaker
from mlqueue.celery import app as celery_app
from scheduling import metrics, stopping
from scheduling.core.scheduler import schedule
from scheduling.job_control import do_hold_job
from scheduling.leader.apply import apply_decisions
from scheduling.leader.worker import run_pass
from scheduling.models import Node, Task
from scheduling.services import do_cancel_job
from scheduling.stopping import do_request_stop
from scheduling.store_view import build_view
from tests.integration.test_scheduler_pass import run_all_ranks, submit
from tests.nodes import cordon


def decide(now):
    view = build_view(now=now)
    return view, schedule(view.snapshot)


def test_a_job_cancelled_mid_pass_gets_no_stale_reason_back(api, leader, user):
    cordon(Node.objects.filter(gpu_type="H100"))
    job = submit(api, resources={"gpu_count": 8})
    now = timezone.now()
    view, decisions = decide(now)
    assert decisions.pending[job.pk].code == "NO_MATCHING_NODES"

    do_cancel_job(job=job, user=user("alice"), reason="not needed")  # lands between snapshot and apply
    applied = apply_decisions(decisions, view, epoch=leader, now=now)

    job.refresh_from_db()
    assert (job.state, job.pending_reason_code, job.pending_reason_message) == ("CANCELLED", "", "")
    assert applied.reasons_written == 0


def placements_counted() -> tuple[float, float]:
    labels = {"team": "research-foundation-models", "priority": "P1"}
    return (
        REGISTRY.get_sample_value("mlqueue_placements_total", {"resource_class": "gpu:H100"}) or 0.0,
        REGISTRY.get_sample_value("mlqueue_queue_wait_seconds_count", labels) or 0.0,
    )


def test_a_placement_that_lost_its_race_is_not_counted(api, leader, user):
    lost, won = submit(api, resources={"gpu_count": 8}), submit(api, resources={"gpu_count": 8}, client_job_id="won")
    now = timezone.now()
    view, decisions = decide(now)
    assert sorted(p.job_id for p in decisions.placements) == sorted([lost.pk, won.pk])
    before = placements_counted()

    do_cancel_job(job=lost, user=user("alice"), reason="not needed")  # the placement will find it gone
    applied = apply_decisions(decisions, view, epoch=leader, now=now)
    metrics.record_pass(decisions, applied, 5.0, view.snapshot)

    assert (applied.placed, applied.lost_races) == (1, 1)
    assert placements_counted() == (before[0] + 1, before[1] + 1)


def test_a_job_held_mid_pass_is_not_placed(api, leader, user):
    """QA: a hold answered 200 (PENDING, held) between a pass's snapshot and its apply step,
    and the pass placed the job all the same: it ran, held."""
    job = submit(api, resources={"gpu_count": 8})
    now = timezone.now()
    view, decisions = decide(now)
    assert [p.job_id for p in decisions.placements] == [job.pk]

    do_hold_job(user=user("alice"), job=job, reason="not yet")  # lands between snapshot and apply
    applied = apply_decisions(decisions, view, epoch=leader, now=now)

    job.refresh_from_db()
    assert (job.state, job.held, applied.placed, applied.lost_races) == ("PENDING", True, 0, 1)
    assert list(Task.objects.filter(job=job).values_list("state", "node")) == [("PENDING", None)]
    run_pass(epoch=leader)  # and no later pass places it while it is held
    assert Task.objects.get(job=job).state == "PENDING"


def test_a_preemption_whose_victim_already_stopped_is_not_counted(clock, api, leader):
    cordon(Node.objects.exclude(rack="z1-r1"))
    victim = submit(api, user="bob", team="production-ranking", priority="P3", client_job_id="victim")
    run_pass(epoch=leader)
    run_all_ranks(victim)
    clock.shift(timedelta(hours=1))  # the victim has run long enough to be preempted
    submit(api, user="rita", priority="P0", client_job_id="urgent")
    now = timezone.now()
    view, decisions = decide(now)
    [preemption] = decisions.preemptions
    before = REGISTRY.get_sample_value("mlqueue_preemptions_total", {"reason": preemption.reason}) or 0.0

    # Its owner's drain asked it to stop first: the pass's own stop changes nothing.
    do_request_stop(job_id=victim.pk, reason="DRAIN", grace_s=60, message="draining", now=now)
    applied = apply_decisions(decisions, view, epoch=leader, now=now)
    metrics.record_pass(decisions, applied, 5.0, view.snapshot)

    assert applied.preempted == 0
    assert (REGISTRY.get_sample_value("mlqueue_preemptions_total", {"reason": preemption.reason}) or 0.0) == before


@pytest.fixture
def broker_down(monkeypatch):
    """The Celery broker unreachable, as when Redis is down: nothing listens on port 1. The
    app's connection pools are dropped (and restored after) so publishing connects afresh."""
    monkeypatch.setattr(celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(celery_app, "_pool", None)
    monkeypatch.setattr(celery_app.amqp, "_producer_pool", None)
    monkeypatch.setattr(stopping, "_broker", RedisBreaker("broker"))


def test_a_grace_timer_the_broker_refused_is_logged(
    api, leader, broker_down, caplog, django_capture_on_commit_callbacks
):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    run_all_ranks(job)
    with caplog.at_level(logging.WARNING, logger="scheduling.stopping"):
        with django_capture_on_commit_callbacks(execute=True):
            assert do_request_stop(job_id=job.pk, reason="CANCELLED", grace_s=30, message="cancelled") == 1
    [record] = [r for r in caplog.records if r.name == "scheduling.stopping"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"could not schedule the SIGKILL of job {job.pk} in 30 s (")
    assert record.getMessage().endswith("); the leader's sweep will still kill it on time")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scheduling.stopping"):  # a second stop does not wait on it again
        stopping._schedule_kill(job.pk, 30)
    assert [r.getMessage() for r in caplog.records if r.name == "scheduling.stopping"] == [
        f"not scheduling the SIGKILL of job {job.pk} in 30 s (the broker is down); the leader's sweep will still "
        "kill it on time"
    ]
