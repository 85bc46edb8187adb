"""Confirmed checkpoints, from the agent's event to the record: kept per task for the current
attempt only (fenced like exits), the job's latest, a rate-limited timeline event, a fresh
attempt with none, the snapshot's confirmed checkpoint, and the work an ended attempt lost."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from scheduling import store_view as snapshot
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, Task
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import INVENTORY, JOIN, agent, beat
from tests.nodes import cordon

A, B = "z1-r1-h100-01", "z1-r1-h100-02"
START = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def agent_settings(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


@pytest.fixture
def leader(demo, clock):
    from scheduling.models import SchedulerLease

    SchedulerLease.objects.filter(pk=1).update(epoch=2, renewed_at=timezone.now())
    return 2


def running_job(api, leader, *, gpus=8, nodes=(A,), checkpoint=True) -> tuple[int, dict]:
    clients = {name: agent(name, {**INVENTORY, "address": "10.0.0.1"}) for name in nodes}
    for name, client in clients.items():
        beat(client, name)
    cordon(Node.objects.exclude(name__in=nodes))
    spec = make_spec(
        resources={"gpu_count": gpus},
        grace_period_seconds=5,
        checkpoint={"path": "/ckpt/run", "interval_minutes": 10} if checkpoint else None,
    )
    job_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    run_pass(epoch=leader)
    for task in Task.objects.filter(job_id=job_id).select_related("node"):
        beat(clients[task.node.name], task.node.name, [report(job_id, task.rank, 1, "running")])
    assert Job.objects.get(pk=job_id).state == "RUNNING"
    return job_id, clients


def report(job_id, rank, attempt, state, **more) -> dict:
    return {"job_id": job_id, "rank": rank, "attempt": attempt, "state": state, **more}


def checkpoint(job_id, *, rank=0, attempt=1, step=100, at: datetime, epoch=2) -> dict:
    return {
        "type": "checkpoint",
        "job_id": job_id,
        "rank": rank,
        "attempt": attempt,
        "epoch": epoch,
        "step": step,
        "at": at.timestamp(),
    }


def send(client, node, *events):
    response = client.post(f"/api/v1/agents/{node}/events", {"events": list(events)}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def test_a_checkpoint_is_kept_per_task_and_the_timeline_says_so_at_most_once_a_minute(api, leader, clock):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(seconds=30))
    saved = timezone.now() - timedelta(seconds=2)
    assert send(clients[A], A, checkpoint(job_id, step=100, at=saved)) == {"accepted": 1, "refused": []}
    task = Task.objects.get(job_id=job_id)
    assert (task.last_checkpoint_at, task.checkpoint_step) == (saved, 100)
    assert Job.objects.get(pk=job_id).last_checkpoint_at == saved
    [event] = AuditEvent.objects.filter(job_id=job_id, kind="CHECKPOINT")
    assert (event.actor_name, event.data) == (
        f"agent:{A}",
        {"rank": 0, "attempt": 1, "step": 100, "at": saved.isoformat()},
    )

    for second in range(1, 20):  # a job confirming every second: the fields follow, the timeline does not
        clock.shift(timedelta(seconds=1))
        send(clients[A], A, checkpoint(job_id, step=100 + second, at=timezone.now()))
    assert Task.objects.get(job_id=job_id).checkpoint_step == 119
    assert AuditEvent.objects.filter(job_id=job_id, kind="CHECKPOINT").count() == 1
    clock.shift(timedelta(seconds=45))
    send(clients[A], A, checkpoint(job_id, step=200, at=timezone.now()))
    assert AuditEvent.objects.filter(job_id=job_id, kind="CHECKPOINT").count() == 2


@pytest.mark.parametrize(
    "change, field",
    [
        ({"step": None}, "step"),
        ({"at": None}, "at"),
        ({"step": -1}, "step"),
        ({"step": "12"}, "step"),
        ({"at": "yesterday"}, "at"),
        ({"at": -5}, "at"),
        ({"at": 1e13}, "at"),
        ({"epoch": -1}, "epoch"),
    ],
)
def test_a_malformed_checkpoint_event_is_refused_naming_the_field(api, leader, change, field):
    job_id, clients = running_job(api, leader)
    event = {**checkpoint(job_id, at=timezone.now()), **change}
    event = {key: value for key, value in event.items() if value is not None}
    response = clients[A].post(f"/api/v1/agents/{A}/events", {"events": [event]}, format="json")
    assert response.status_code == 400
    assert field in str(response.json())
    assert Task.objects.get(job_id=job_id).last_checkpoint_at is None


def test_only_the_current_attempt_on_its_own_node_records_a_checkpoint(api, leader, clock):
    job_id, clients = running_job(api, leader)
    other = agent(B)
    beat(other, B)
    clock.shift(timedelta(minutes=5))
    now = timezone.now()
    assigned = Task.objects.get(job_id=job_id).assigned_at
    refused = send(clients[A], A, checkpoint(job_id, attempt=2, at=now))["refused"]
    assert refused == [{"index": 0, "reason": f"job {job_id} rank 0 is at attempt 1 on this node, not attempt 2."}]
    assert (
        send(other, B, checkpoint(job_id, at=now))["refused"][0]["reason"]
        == f"job {job_id} rank 0 is not placed on node {B}."
    )
    prefix = f"job {job_id} rank 0 attempt 1: checkpoint saved"
    earlier = send(clients[A], A, checkpoint(job_id, at=assigned - timedelta(seconds=30)))  # an earlier attempt's file
    assert earlier["accepted"] == 0
    assert earlier["refused"][0]["reason"].startswith(prefix)
    assert earlier["refused"][0]["reason"].endswith("saved before the attempt was placed (an earlier attempt's file).")
    newer_epoch = send(clients[A], A, checkpoint(job_id, at=now, epoch=3))  # newer than its assignment's epoch
    assert "reported under epoch 3, newer than the attempt's placement (epoch 2)" in newer_epoch["refused"][0]["reason"]
    assert Task.objects.get(job_id=job_id).last_checkpoint_at is None

    assert send(clients[A], A, checkpoint(job_id, step=5, at=now)) == {"accepted": 1, "refused": []}
    older = send(clients[A], A, checkpoint(job_id, step=4, at=now - timedelta(seconds=60)))  # time never goes back
    assert older["accepted"] == 0
    recorded = f"a checkpoint as new is already recorded ({now:%Y-%m-%d %H:%M:%S} UTC)."
    assert older["refused"][0]["reason"].endswith(recorded)
    send(clients[A], A, checkpoint(job_id, step=9, at=now + timedelta(days=365)))  # the job's clock lies: now
    task = Task.objects.get(job_id=job_id)
    assert (task.last_checkpoint_at, task.checkpoint_step) == (now, 5)
    clock.shift(timedelta(seconds=1))
    send(clients[A], A, checkpoint(job_id, step=9, at=now + timedelta(days=365)))
    task = Task.objects.get(job_id=job_id)
    assert (task.last_checkpoint_at, task.checkpoint_step) == (timezone.now(), 9)


def test_the_snapshot_counts_from_the_checkpoint_every_rank_confirmed(api, leader, clock):
    job_id, clients = running_job(api, leader, gpus=16, nodes=(A, B))
    started = min(Task.objects.filter(job_id=job_id).values_list("started_at", flat=True))

    def seen():
        [job] = [j for j in snapshot.load_running(timezone.now()) if j.job_id == job_id]
        return job

    assert (seen().last_checkpoint_at, seen().checkpoint_interval_s) == (None, 600.0)
    clock.shift(timedelta(minutes=20))
    rank_of = dict(Task.objects.filter(job_id=job_id).values_list("node__name", "rank"))
    first = timezone.now() - timedelta(minutes=10)
    send(clients[A], A, checkpoint(job_id, rank=rank_of[A], at=first))
    assert seen().last_checkpoint_at is None  # the other rank has confirmed nothing yet
    assert seen().hours_lost_if_stopped(timezone.now().timestamp()) == pytest.approx(
        16 * (timezone.now() - started).total_seconds() / 3600
    )
    send(clients[B], B, checkpoint(job_id, rank=rank_of[B], at=first + timedelta(minutes=5)))
    assert seen().last_checkpoint_at == first.timestamp()
    assert seen().hours_lost_if_stopped(timezone.now().timestamp()) == pytest.approx(16 * 10 / 60)


def drain_and_settle(api, leader, clients, job_id, clock) -> AuditEvent:
    api("ops").post(f"/api/v1/nodes/{A}/drain", {"reason": "kernel upgrade"}, format="json")
    clock.shift(timedelta(seconds=3))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=0)])
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job_id).state == "PENDING"
    return AuditEvent.objects.get(job_id=job_id, to_state="PENDING", reason="PREEMPTED")


def test_a_drained_attempt_records_the_work_lost_since_its_checkpoint_and_the_next_starts_clean(api, leader, clock):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(minutes=30))
    saved = timezone.now() - timedelta(minutes=6)
    send(clients[A], A, checkpoint(job_id, step=300, at=saved))
    clock.shift(timedelta(minutes=1))
    ended_attempt = drain_and_settle(api, leader, clients, job_id, clock)
    lost = (timezone.now() - saved).total_seconds()  # the rank ended at the last tick
    assert ended_attempt.data == {
        "tasks": 1,
        "lost_gpu_hours": round(8 * lost / 3600, 4),
        "lost_since": saved.isoformat(),
        "since_checkpoint": True,
        "checkpoint_step": 300,
    }
    task = Task.objects.get(job_id=job_id)
    assert (task.last_checkpoint_at, task.checkpoint_step, task.state) == (None, None, "PENDING")
    assert Job.objects.get(pk=job_id).last_checkpoint_at == saved  # the job's latest stays
    late = send(clients[A], A, checkpoint(job_id, step=301, at=timezone.now()))  # the ended attempt's last marker
    assert late["accepted"] == 0
    assert late["refused"][0]["reason"].endswith(f"not recorded: the attempt is no longer running on {A}.")


def test_without_a_confirmed_checkpoint_the_whole_attempt_is_lost(api, leader, clock):
    job_id, clients = running_job(api, leader, checkpoint=False)
    started = Task.objects.get(job_id=job_id).started_at
    clock.shift(timedelta(minutes=45))
    ended_attempt = drain_and_settle(api, leader, clients, job_id, clock)
    assert ended_attempt.data == {
        "tasks": 1,
        "lost_gpu_hours": round(8 * (45 * 60 + 3) / 3600, 4),
        "lost_since": started.isoformat(),
        "since_checkpoint": False,
        "checkpoint_step": None,
    }


def test_the_job_page_shows_the_lost_work(api, leader, clock, client):
    job_id, clients = running_job(api, leader)
    clock.shift(timedelta(minutes=30))
    send(clients[A], A, checkpoint(job_id, step=300, at=timezone.now() - timedelta(minutes=6)))
    drain_and_settle(api, leader, clients, job_id, clock)
    client.force_login(Job.objects.get(pk=job_id).owner)
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert "lost 0.81 GPU-hours since the checkpoint of step 300 at 09:24:00" in page
    assert "(INFRA)" not in page  # a task the scheduler stopped (now waiting again) did not fail


def test_a_final_failure_records_the_lost_work_on_its_event(api, leader, clock):
    job_id, clients = running_job(api, leader)
    Job.objects.filter(pk=job_id).update(max_retries=0)
    clock.shift(timedelta(minutes=10))
    saved = timezone.now()
    send(clients[A], A, checkpoint(job_id, step=50, at=saved))
    clock.shift(timedelta(minutes=15))
    beat(clients[A], A, [report(job_id, 0, 1, "exited", exit_code=1)])
    run_pass(epoch=leader)
    assert Job.objects.get(pk=job_id).state == "FAILED"
    [verdict] = AuditEvent.objects.filter(job_id=job_id, reason="APP", from_state="", to_state="FAILED")
    lost = {"lost_gpu_hours": 2.0, "lost_since": saved.isoformat(), "since_checkpoint": True, "checkpoint_step": 50}
    assert verdict.data == lost


def test_the_api_shows_each_attempts_confirmed_checkpoint(api, leader, clock):
    job_id, clients = running_job(api, leader)
    detail = api("alice").get(f"/api/v1/jobs/{job_id}").json()
    assert (detail["last_checkpoint_at"], detail["tasks"][0]["last_checkpoint_at"]) == (None, None)
    clock.shift(timedelta(minutes=12))
    saved = timezone.now() - timedelta(minutes=2)
    send(clients[A], A, checkpoint(job_id, step=1200, at=saved))
    detail = api("alice").get(f"/api/v1/jobs/{job_id}").json()
    [task] = detail["tasks"]
    assert (task["last_checkpoint_at"], task["checkpoint_step"]) == (saved.isoformat().replace("+00:00", "Z"), 1200)
    assert detail["last_checkpoint_at"] == task["last_checkpoint_at"]
