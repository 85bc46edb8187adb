"""The usage ledger tells what happened to an attempt (QA): a user's requeue of a gang one of
whose ranks had already succeeded is REQUEUED, not PREEMPTED; a task its agent never started is
`not_started`, not the loss of a node that was never lost."""

import csv
import io
from datetime import timedelta

import pytest

from scheduling import reports
from scheduling.leader.worker import run_pass
from scheduling.models import Job, LostCause, UsageRecord
from tests.integration.test_agent_api import JOIN, beat
from tests.integration.test_checkpoints import A, B, report, running_job
from tests.integration.test_scheduler_pass import submit


@pytest.fixture(autouse=True)
def join_token(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def test_a_requeue_after_a_rank_succeeded_is_requeued_not_preempted(clock, api, leader):
    job_id, clients = running_job(api, leader, gpus=16, nodes=(A, B))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])  # rank 0 is done at once
    clock.shift(timedelta(minutes=20))
    response = api("alice").post(f"/api/v1/jobs/{job_id}/requeue", {"reason": "new image"}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)
    beat(clients[B], B, [report(job_id, 1, 1, "exited", exit_code=143)])
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job_id).preemptions == 0
    record = UsageRecord.objects.get(job_id=job_id, attempt=1)
    assert (record.outcome, record.stop_reason, record.lost_cause) == ("REQUEUED", "REQUEUED", "")
    usage = api("alice").get("/api/v1/usage?group_by=team&to=2026-04-20T10:00:00Z&format=csv")
    [line] = list(csv.DictReader(io.StringIO(usage.content.decode())))
    assert (line["attempts_preempted"], line["attempts_requeued"]) == ("0", "1")


@pytest.mark.parametrize("cause", ["no_task_user", "no_container_runtime"])
def test_a_task_its_agent_never_started_lost_no_node(api, leader, cause):
    job = submit(api, client_job_id=f"never-{cause[3:7]}", resources={"gpu_count": 8, "gpus_per_task": 8})
    run_pass(epoch=leader)
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=127, cause=cause) == "FAILED"
    record = UsageRecord.objects.get(job_id=job.pk, attempt=1)
    assert (record.outcome, record.failure_class, record.lost_cause) == ("FAILED", "INFRA", LostCause.NOT_STARTED)
    assert record.lost_gpu_hours == 0.0  # nothing ran


def test_a_lost_agent_is_still_a_node_loss(api, leader):
    job = submit(api, client_job_id="lost", resources={"gpu_count": 8, "gpus_per_task": 8})
    run_pass(epoch=leader)
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=137, cause="lost")
    assert UsageRecord.objects.get(job_id=job.pk, attempt=1).lost_cause == LostCause.NODE_LOSS
