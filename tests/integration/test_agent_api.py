"""The agent API: joining, heartbeats (in the cache, not Postgres), assignments, events, logs;
node tokens that act only for their node; admin drain; the leader's failure detection."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling import liveness
from scheduling.leader import failures
from scheduling.leader.failures import detect
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.store_view import build_view
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import cordon

JOIN = "join-secret"
INVENTORY = {
    "zone": "z1",
    "rack": "z1-r1",
    "gpu_type": "H100",
    "gpu_count": 8,
    "cpu_count": 192,
    "memory_gb": 2048,
    "labels": {"ib": "ndr400"},
    "address": "10.0.0.1",
}


@pytest.fixture(autouse=True)
def agent_settings(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def agent(name: str, inventory: dict | None = None) -> APIClient:
    client = APIClient()
    response = client.post(
        "/api/v1/agents/register",
        {"name": name, **(inventory or INVENTORY)},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {JOIN}",
    )
    assert response.status_code == 201, response.json()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {response.json()['token']}")
    return client


def beat(client: APIClient, name: str, tasks=()) -> dict:
    response = client.post(f"/api/v1/agents/{name}/heartbeat", {"tasks": list(tasks)}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


@pytest.fixture
def leader(demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=2, renewed_at=timezone.now())
    return 2


def test_join_needs_the_cluster_token(db):
    client = APIClient()
    body = {"name": "n1", **INVENTORY}
    assert client.post("/api/v1/agents/register", body, format="json").status_code == 401
    assert (
        client.post("/api/v1/agents/register", body, format="json", HTTP_AUTHORIZATION="Bearer wrong").status_code
        == 401
    )
    bad = client.post(
        "/api/v1/agents/register", {**body, "gpu_count": 0}, format="json", HTTP_AUTHORIZATION=f"Bearer {JOIN}"
    )
    assert bad.status_code == 400 and "gpu_count" in bad.json()["fields"]
    assert not Node.objects.exists()


def test_a_node_token_acts_only_for_its_node(db):
    first = agent("n1")
    agent("n2")
    response = first.post("/api/v1/agents/n2/heartbeat", {"tasks": []}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "this token belongs to node n1; it cannot act for n2."


def test_first_heartbeat_makes_a_node_ready_and_later_ones_write_nothing(db):
    client = agent("n1")
    assert Node.objects.get(name="n1").state == "NEW"
    beat(client, "n1")
    node = Node.objects.get(name="n1")
    assert (node.state, node.health) == ("READY", "READY") and node.first_heartbeat_at
    assert node.state_reason == "heartbeating since it joined"  # not "again (was NEW)"
    liveness.flush()  # the batch of heartbeats this process heard goes to Postgres now, not during the next one
    with CaptureQueriesContext(connection) as queries:
        beat(client, "n1")
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert writes == []
    assert "n1" in liveness.last_heard(["n1"])


def test_an_assignment_runs_its_course_through_the_agent_api(api, leader):
    client = agent("z1-r1-h100-01", {**INVENTORY, "address": "10.0.0.1"})
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = (
        api("alice")
        .post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}, env={"SEED": "7"}), format="json")
        .json()["id"]
    )
    run_pass(epoch=leader)

    [assignment] = beat(client, "z1-r1-h100-01")["assignments"]
    assert (assignment["job_id"], assignment["rank"], assignment["attempt"], assignment["epoch"]) == (job_id, 0, 1, 2)
    assert assignment["command"] == make_spec()["command"]
    assert assignment["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert (assignment["env"]["MASTER_ADDR"], assignment["env"]["SEED"]) == ("10.0.0.1", "7")

    running = {"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}
    reply = beat(client, "z1-r1-h100-01", [running])
    assert reply["assignments"] == [] and Task.objects.get(job_id=job_id).state == "RUNNING"
    events = [
        {"type": "log", "job_id": job_id, "rank": 0, "attempt": 1, "stream": "stdout", "offset": 0, "data": "step 1\n"},
        {"type": "log", "job_id": job_id, "rank": 0, "attempt": 1, "stream": "stdout", "offset": 7, "data": "step 2\n"},
        {"type": "exited", "job_id": job_id, "rank": 0, "attempt": 1, "exit_code": 0},
    ]
    assert client.post("/api/v1/agents/z1-r1-h100-01/events", {"events": events}, format="json").json() == {
        "accepted": 3,
        "refused": [],
    }
    assert Job.objects.get(pk=job_id).state == "SUCCEEDED"
    log = api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()
    assert (log["text"], log["next_offset"], log["attempt"]) == ("step 1\nstep 2\n", 14, 1)
    # Resuming inside a chunk reads from there on (it read nothing, whatever came after).
    for offset, text in ((3, "p 1\nstep 2\n"), (7, "step 2\n"), (12, "2\n"), (14, "")):
        log = api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0&offset={offset}").json()
        assert (log["text"], log["next_offset"]) == (text, 14)
    assert api("bob").get(f"/api/v1/jobs/{job_id}/logs").status_code == 404


def test_an_agent_running_an_attempt_the_server_no_longer_assigns_is_told_to_kill_it(api, leader):
    client = agent("z1-r1-h100-01")
    reply = beat(client, "z1-r1-h100-01", [{"job_id": 999, "rank": 0, "attempt": 3, "state": "running"}])
    assert reply["kill"] == [{"job_id": 999, "rank": 0, "attempt": 3}]


def test_a_node_cannot_report_for_another_nodes_tasks(api, leader):
    mine, other = agent("z1-r1-h100-01"), agent("z1-r1-h100-02")
    beat(mine, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    event = {"type": "exited", "job_id": job_id, "rank": 0, "attempt": 1, "exit_code": 1}
    assert other.post("/api/v1/agents/z1-r1-h100-02/events", {"events": [event]}, format="json").json() == {
        "accepted": 0,
        "refused": [{"index": 0, "reason": f"job {job_id} rank 0 is not placed on node z1-r1-h100-02."}],
    }
    assert Task.objects.get(job_id=job_id).state == "ASSIGNED"


def test_silent_nodes_go_suspect_then_lost_and_their_tasks_are_requeued(api, leader, settings, monkeypatch):
    settings.MLQ_OUTAGE_BOUND_S, settings.MLQ_LOST_MARGIN_S = 20, 10
    monkeypatch.setattr(failures, "CLOCKS", failures.Clocks(epoch=leader))  # a leader that has been watching
    client = agent("z1-r1-h100-01")
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])
    last = liveness.last_heard(["z1-r1-h100-01"])["z1-r1-h100-01"]
    at = lambda seconds: datetime.fromtimestamp(last + seconds, UTC)  # noqa: E731

    assert detect(epoch=leader, now=at(10)) == {"suspect": 0, "lost": 0, "reclaimed": 0, "full_disruption": 0}
    assert detect(epoch=leader, now=at(16))["suspect"] == 1
    suspect = Node.objects.get(name="z1-r1-h100-01")
    # When the silence began, which stays true while the reason stays on the node.
    assert (suspect.state, suspect.state_reason) == ("SUSPECT", f"no heartbeat since {at(0):%H:%M:%S} UTC")
    assert Task.objects.get(job_id=job_id).state == "RUNNING"  # not before the agent's lease + margin
    assert detect(epoch=leader, now=at(29))["lost"] == 0
    assert detect(epoch=leader, now=at(31))["lost"] == 1
    task = Task.objects.get(job_id=job_id)
    assert (task.state, task.failure_class) == ("FAILED", "INFRA")
    assert AuditEvent.objects.get(node__name="z1-r1-h100-01", reason="LOST").message.startswith(
        "SUSPECT -> LOST: no heartbeat for 31 s (outage bound 20 s + margin 10 s)"
    )
    run_pass(epoch=leader, now=at(32))
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.restarts_used) == ("PENDING", 1)

    beat(
        client,
        "z1-r1-h100-01",
        [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "exited", "exit_code": None, "signal": "SIGKILL"}],
    )
    assert Node.objects.get(name="z1-r1-h100-01").state == "READY"  # back, and its old attempt ignored
    assert Job.objects.get(pk=job_id).restarts_used == 1


def test_drain_signals_running_tasks_and_they_requeue_as_preempted(api, leader, user):
    client = agent("z1-r1-h100-01")
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])

    assert api("rita").post("/api/v1/nodes/z1-r1-h100-01/drain", {"reason": "x"}, format="json").status_code == 403
    assert api("ops").post("/api/v1/nodes/z1-r1-h100-01/drain", {}, format="json").status_code == 400
    response = api("ops").post("/api/v1/nodes/z1-r1-h100-01/drain", {"reason": "replace a DIMM"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "DRAINING"
    # A drain still going, then done (QA: a drained, empty node read as a busy one).
    assert {k: response.json()[k] for k in ("tasks", "tasks_stopping", "drained")} == {
        "tasks": 1,
        "tasks_stopping": 1,
        "drained": False,
    }
    reply = beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])
    kill_in_s = reply["signals"][0].pop("kill_in_s")  # the job's grace: the agent kills then itself
    assert reply["signals"] == [{"job_id": job_id, "rank": 0, "attempt": 1, "signal": "TERM", "reason": "DRAIN"}]
    assert 110 < kill_in_s <= 120
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "exited", "exit_code": 0}])
    run_pass(epoch=leader)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.preemptions, job.restarts_used, job.retries_used) == ("PENDING", 1, 0, 0)
    # The core sees when it waits again from (MLQ_OVERDUE_SINCE_REQUEUE's key), not only its submit.
    [seen] = [j for j in build_view(now=timezone.now()).snapshot.pending if j.job_id == job_id]
    assert seen.queued_at == job.queued_at.timestamp() > seen.submitted_at == job.submitted_at.timestamp()
    [listed] = api("ops").get("/api/v1/nodes?name=z1-r1-h100-01").json()["results"]
    assert (listed["state"], listed["tasks"], listed["tasks_stopping"], listed["drained"]) == ("DRAINING", 0, 0, True)
    audit = AuditEvent.objects.get(node__name="z1-r1-h100-01", reason="DRAINING")
    assert (audit.actor_name, audit.message) == ("ops", "draining: replace a DIMM")
    assert (
        api("ops").post("/api/v1/nodes/z1-r1-h100-01/uncordon", {"reason": "fixed"}, format="json").json()["state"]
        == "READY"
    )


def test_a_spot_reclaim_notice_requeues_at_the_deadline(clock, api, leader):
    client = agent("z1-r1-h100-01")
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = (
        api("alice")
        .post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}, grace_period_seconds=120), format="json")
        .json()["id"]
    )
    run_pass(epoch=leader)
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])
    deadline = timezone.now() + timedelta(seconds=60)
    response = api("ops").post(
        "/api/v1/nodes/z1-r1-h100-01/reclaim-notice", {"deadline": deadline.isoformat()}, format="json"
    )
    assert response.status_code == 200
    task = Task.objects.get(job_id=job_id)
    assert (task.stop_reason, task.stop_signal) == ("DRAIN", "TERM")
    assert task.kill_at == deadline - timedelta(seconds=5)  # its grace shortened to end before the deadline
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])
    clock.shift(timedelta(seconds=61))  # a second past the deadline
    run_pass(epoch=leader)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.preemptions, job.restarts_used) == ("PENDING", 1, 0)
    assert (
        api("ops")
        .post("/api/v1/nodes/z1-r1-h100-01/reclaim-notice", {"deadline": "2020-01-01T00:00:00Z"}, format="json")
        .status_code
        == 400
    )


@pytest.mark.parametrize("deadline", ["9999-12-31T23:59:59Z", "2026-04-21T09:30:00Z"])
def test_a_reclaim_notice_days_ahead_is_refused(clock, api, deadline):
    response = api("ops").post("/api/v1/nodes/z1-r1-h100-01/reclaim-notice", {"deadline": deadline}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"]["deadline"] == [
        "must be within 24 hours from now (for work planned later, schedule a maintenance window)."
    ]
    assert Node.objects.get(name="z1-r1-h100-01").admin_state == ""
