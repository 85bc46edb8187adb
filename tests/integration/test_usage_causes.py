"""Every outcome and every cause of lost work the ledger writes reaches the usage CSV (QA: a
user's requeue, REQUEUED, was in the JSON and not in the CSV), and work lost to a quota
reclaim is booked apart from a priority preemption (QA: both were `preemption`)."""

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import history, ledger
from scheduling.core.decisions import Preemption, PreemptionReason
from scheduling.leader.apply import _preempt
from scheduling.models import JobState, LostCause, UsageRecord
from scheduling.states import ON_NODE
from tests.conftest import FROZEN_AT as START
from tests.integration.test_agent_api import JOIN, beat
from tests.integration.test_checkpoints import A, report, running_job
from tests.integration.test_usage_api import RFM, attempt, now, usage  # noqa: F401 (the fixture)


@pytest.fixture(autouse=True)
def join_token(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def written_outcomes() -> list[str]:
    """What `ledger.on_job_state` may write as an attempt's outcome: the state the job left its
    nodes for, or a user's requeue."""
    return [*(state for state in JobState.values if state not in ON_NODE), ledger.REQUEUED]


def test_the_csv_has_a_column_for_every_outcome_and_cause_the_json_shows(api, demo, now):  # noqa: F811
    outcomes, causes = written_outcomes(), LostCause.values
    for job_id, outcome in enumerate(outcomes, start=1):
        cause = causes[job_id % len(causes)]
        attempt(
            job_id, team=RFM, owner="alice", start=-3, end=-1, outcome=outcome, lost_gpu_hours=1.0, lost_cause=cause
        )
    body = usage(api, group_by="owner").json()["rows"][0]
    response = usage(api, group_by="owner", format="csv")
    [line] = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert set(body["attempts_by_outcome"]) == set(outcomes) and set(body["lost_gpu_hours_by_cause"]) == set(causes)
    for outcome, count in body["attempts_by_outcome"].items():
        assert int(line[f"attempts_{outcome.lower()}"]) == count == 1
        assert int(line[f"jobs_{outcome.lower()}"]) == body["jobs_by_outcome"][outcome] == 1
    for cause, hours in body["lost_gpu_hours_by_cause"].items():
        assert float(line[f"lost_{cause}"]) == hours > 0


def test_a_users_requeue_is_its_own_csv_column(api, demo, now):  # noqa: F811
    """QA's case: alice preempted once, requeued once, succeeded once."""
    for job_id, outcome in enumerate(("PREEMPTED", "REQUEUED", "SUCCEEDED"), start=1):
        attempt(job_id, team=RFM, owner="alice", start=-3, end=-1, outcome=outcome)
    [line] = list(csv.DictReader(io.StringIO(usage(api, group_by="owner", format="csv").content.decode())))
    assert (line["attempts_preempted"], line["attempts_requeued"], line["attempts_succeeded"]) == ("1", "1", "1")


@pytest.mark.parametrize(
    "reason, cause",
    [(PreemptionReason.RECLAIM, LostCause.QUOTA_RECLAIM), (PreemptionReason.PRIORITY, LostCause.PREEMPTION)],
)
def test_work_lost_to_a_quota_reclaim_is_booked_apart_from_a_priority_preemption(clock, api, leader, reason, cause):
    job_id, clients = running_job(api, leader, checkpoint=False)
    clock.shift(timedelta(minutes=30))
    preemption = Preemption(job_id, job_id, reason, f"preempted for job {job_id}")
    assert _preempt(preemption, epoch=leader, now=timezone.now())
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=143)])
    record = UsageRecord.objects.get(job_id=job_id)
    assert (record.outcome, record.stop_reason, record.lost_cause) == ("PREEMPTED", "PREEMPTED", cause)
    assert record.lost_gpu_hours == 4.0  # 8 GPUs x 30 minutes, no checkpoint
    window = {"from": START.isoformat(), "to": (START + timedelta(hours=1)).isoformat()}
    total = api("ops").get("/api/v1/usage", window).json()["total"]
    assert total["lost_gpu_hours_by_cause"] == {cause: 4.0}


@pytest.mark.parametrize("cause, lost_gpu_s", [(LostCause.QUOTA_RECLAIM, 7200.0), (LostCause.FAILURE, 0.0)])
def test_a_replay_charges_work_lost_to_a_quota_reclaim_as_the_schedulers(cause, lost_gpu_s):
    """What-if previews replay the ledger (scheduling/history.py): a quota reclaim is the
    scheduler's doing, as a preemption is; a failure is the job's own."""
    row = {
        "job_id": 1,
        "started_at": START,
        "ended_at": START + timedelta(hours=1),
        "outcome": "PREEMPTED",
        "gpus": 8,
        "team_name": RFM,
        "resource_class": "gpu:H100",
        "priority": "P2",
        "lost_gpu_hours": 2.0,
        "lost_cause": cause,
    }
    assert history._attempt(row, START, {}).lost_gpu_s == lost_gpu_s
