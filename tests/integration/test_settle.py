"""The leader applying a settle verdict on the real store: preemptions that spend nothing,
infra failures that spend restarts, one event per change, counters only for what committed."""

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY

from scheduling import lifecycle, reports
from scheduling.leader.reconcile import reconcile
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Task
from teams.models import AuditEvent
from tests.integration.test_scheduler_pass import run_all_ranks, submit
from tests.nodes import heartbeat


def stop_and_exit(job: Job, stop_reason: str) -> None:
    """The scheduler asked every rank to stop (`stop_reason`), and every rank exited on SIGTERM."""
    Task.objects.filter(job=job).update(stop_reason=stop_reason, stop_signal="TERM")
    for task in job.tasks.order_by("rank"):
        reports.do_report_exited(job_id=job.pk, rank=task.rank, attempt=task.attempt, exit_code=143)


def counters(job: Job) -> tuple[str, int, int, int]:
    job.refresh_from_db()
    return job.state, job.preemptions, job.restarts_used, job.retries_used


def test_a_job_preempted_25_times_with_max_restarts_20_is_still_requeued(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_restarts": 20, "max_retries": 0})
    run_pass(epoch=leader)
    for attempt in range(1, 26):
        heartbeat()  # the agents beat on: on a loaded machine the 25 rounds outlast a silent node's 15 s
        run_all_ranks(job)
        stop_and_exit(job, "PREEMPTED")
        run_pass(epoch=leader)  # requeued, and placed again at once on the idle cluster
        assert job.tasks.get().attempt == attempt + 1
    assert counters(job) == ("ASSIGNED", 25, 0, 0)
    assert AuditEvent.objects.filter(job=job, kind="RETRY").last().message == (
        "preempted; requeued, resuming from its last checkpoint, if any (preemption 25; restarts and retries not spent)"
    )


def test_drains_and_spot_reclaims_spend_nothing_either(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_restarts": 0, "max_retries": 0})
    run_pass(epoch=leader)
    run_all_ranks(job)
    stop_and_exit(job, "DRAIN")
    run_pass(epoch=leader)
    assert counters(job) == ("ASSIGNED", 1, 0, 0)
    assert AuditEvent.objects.get(job=job, kind="RETRY").message == (
        "drained off its node; requeued, resuming from its last checkpoint, if any "
        "(preemption 1; restarts and retries not spent)"
    )


def lose_the_node_under(job: Job) -> None:
    """What the failure detector does to a LOST node's tasks (scheduling/leader/failures.py)."""
    for task in job.tasks.all():
        assert lifecycle.transition_task(
            task,
            to_state="FAILED",
            attempt=task.attempt,
            actor_name="scheduler",
            reason="NODE_LOST",
            message="node lost",
            failure_class="INFRA",
        )


def test_a_lost_node_still_spends_max_restarts(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_restarts": 1, "max_retries": 0})
    run_pass(epoch=leader)
    for _ in range(2):
        run_all_ranks(job)
        lose_the_node_under(job)
        run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class, job.restarts_used, job.preemptions) == ("FAILED", "INFRA", 1, 0)
    assert AuditEvent.objects.get(job=job, kind="RETRY").message == (
        "lost to an infrastructure failure; restart 1 of 1, resuming from its last checkpoint, if any "
        "(retries not spent)"
    )
    assert AuditEvent.objects.get(job=job, kind="TRANSITION", to_state="FAILED", reason="INFRA").message == (
        "lost to an infrastructure failure; no restarts left (1 allowed)"
    )


def test_on_preemption_fail_fails_the_job_with_one_event(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"on_preemption": "fail"})
    run_pass(epoch=leader)
    run_all_ranks(job)
    stop_and_exit(job, "PREEMPTED")
    run_pass(epoch=leader)

    job.refresh_from_db()
    assert (job.state, job.failure_class) == ("FAILED", "INFRA")
    failed = AuditEvent.objects.filter(job=job, kind="TRANSITION", to_state="FAILED")
    assert [(e.from_state, e.reason, e.message) for e in failed] == [
        ("PREEMPTED", "INFRA", "preempted, and its restart policy says fail")
    ]


def outcomes(outcome: str, failure_class: str) -> float:
    labels = {"outcome": outcome, "failure_class": failure_class}
    return REGISTRY.get_sample_value("mlqueue_job_outcomes_total", labels) or 0.0


class RolledBack(Exception):
    pass


def test_a_rolled_back_settle_counts_no_outcome(api, leader, django_capture_on_commit_callbacks):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_retries": 0})
    run_pass(epoch=leader)
    run_all_ranks(job, exit_code=3)
    before = outcomes("failed", "APP")

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RolledBack):
        with transaction.atomic():
            assert reconcile(epoch=leader, now=timezone.now()).failed == 1
            raise RolledBack  # the verdict's transaction never commits
    assert Job.objects.get(pk=job.pk).failure_class == ""
    assert outcomes("failed", "APP") == before

    with django_capture_on_commit_callbacks(execute=True):
        reconcile(epoch=leader, now=timezone.now())
    assert Job.objects.get(pk=job.pk).failure_class == "APP"
    assert outcomes("failed", "APP") == before + 1


def test_the_api_and_the_job_page_show_preemptions_beside_restarts_and_retries(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    run_all_ranks(job)
    stop_and_exit(job, "PREEMPTED")
    run_pass(epoch=leader)

    body = api("alice").get(f"/api/v1/jobs/{job.pk}").json()
    assert {k: body[k] for k in ("preemptions", "restarts_used", "max_restarts", "retries_used", "max_retries")} == {
        "preemptions": 1,
        "restarts_used": 0,
        "max_restarts": 20,
        "retries_used": 0,
        "max_retries": 2,
    }
    client = Client()
    client.login(username="alice", password="demo")
    page = client.get(f"/jobs/{job.pk}/panel/").content.decode()
    assert ("0 of 2 retries, 0 of 20 restarts used, 1 preemption (preemptions spend neither)") in page


def test_a_job_past_its_time_whose_node_is_lost_in_the_grace_period_ends_timeout(api, leader):
    """QA: the detector failed its ranks INFRA (their stop reason TIMEOUT kept) and the job was
    restarted from the start, a second attempt of a job that had run out of time."""
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_restarts": 5})
    run_pass(epoch=leader)
    run_all_ranks(job)
    Task.objects.filter(job=job).update(stop_reason="TIMEOUT", stop_signal="TERM")
    lose_the_node_under(job)
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class, job.restarts_used) == ("FAILED", "TIMEOUT", 0)
