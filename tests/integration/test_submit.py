"""Submitting jobs through the API: the seed job, idempotency, concurrency."""

import threading

import pytest
from django.db import connection

from scheduling.models import Job, Task
from scheduling.services import SPEC_CONFLICT
from teams.models import AuditEvent
from tests.conftest import make_spec


def test_seed_job_as_alice_is_8_pending_tasks_of_8_gpus(api):
    response = api("alice").post("/api/v1/jobs", make_spec(), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "PENDING"
    assert (body["gpu_count"], body["gpus_per_task"], body["task_count"]) == (64, 8, 8)
    assert [t["rank"] for t in body["tasks"]] == list(range(8))
    assert {t["state"] for t in body["tasks"]} == {"PENDING"}
    assert body["pending_reason"] == {"code": "NOT_YET_SCHEDULED", "message": "waiting for the scheduler's next pass"}
    events = api("alice").get(f"/api/v1/jobs/{body['id']}/events").json()["results"]
    assert [(e["kind"], e["actor"], e["to_state"]) for e in events] == [("SUBMITTED", "alice", "PENDING")]
    assert events[0]["message"] == "submitted by alice to research-foundation-models: 8 x 8 H100, priority P1"


def test_spec_defaults_are_filled_and_kept(api):
    spec = {
        "team": "research-vision",
        "command": ["python", "eval.py"],
        "resources": {"gpu_count": 4, "gpu_type": "A100"},
    }
    body = api("victor").post("/api/v1/jobs", spec, format="json").json()

    assert body["name"] == "python"
    assert body["spec"]["resources"] == {
        "gpu_count": 4,
        "gpu_type": "A100",
        "gpus_per_task": 4,
        "tasks": 1,
        "cpu_per_rank": 1,
        "memory_per_rank_gb": 4,
        "scratch_disk_gb": 0,
    }
    assert body["spec"]["restart_policy"]["max_retries"] == 2
    assert (body["priority"], body["spec"]["topology_hint"], body["spec"]["max_runtime_hours"]) == ("P2", "none", 168)


def test_cpu_job_gets_its_tasks(api):
    spec = {"team": "research-vision", "command": ["./etl.sh"], "resources": {"tasks": 3, "cpu_per_rank": 8}}
    body = api("victor").post("/api/v1/jobs", spec, format="json").json()
    assert (body["gpu_count"], body["task_count"], len(body["tasks"])) == (0, 3, 3)


def test_same_client_job_id_and_spec_returns_the_first_job(api):
    client = api("alice")
    first = client.post("/api/v1/jobs", make_spec(), format="json")
    again = client.post("/api/v1/jobs", make_spec(), format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1 and Task.objects.count() == 8


def test_defaults_written_out_are_the_same_spec(api):
    client = api("alice")
    short = {"client_job_id": "x-1", "team": "research-foundation-models", "command": ["a"]}
    first = client.post("/api/v1/jobs", short, format="json").json()
    explicit = first["spec"]
    assert client.post("/api/v1/jobs", explicit, format="json").status_code == 200


def test_same_client_job_id_with_another_spec_is_409(api):
    client = api("alice")
    first = client.post("/api/v1/jobs", make_spec(), format="json").json()
    other = client.post("/api/v1/jobs", make_spec(priority="P2"), format="json")

    assert other.status_code == 409
    assert other.json()["detail"] == SPEC_CONFLICT.format(
        team="research-foundation-models", job_id=first["id"], client_job_id="llama-70b-run-47"
    )
    assert Job.objects.count() == 1


def test_same_client_job_id_in_another_team_is_another_job(api):
    api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json")
    response = api("bob").post(
        "/api/v1/jobs", make_spec(team="production-ranking", resources={"gpu_count": 8}), format="json"
    )
    assert response.status_code == 201
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_identical_submits_make_one_job(api):
    clients = [api("alice") for _ in range(20)]
    barrier = threading.Barrier(20)
    statuses, ids = [], []

    def submit(client):
        try:
            barrier.wait()
            response = client.post("/api/v1/jobs", make_spec(), format="json")
            statuses.append(response.status_code)
            ids.append(response.json()["id"])
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert sorted(statuses) == [200] * 19 + [201]
    assert len(set(ids)) == 1
    assert Job.objects.count() == 1
    assert Task.objects.count() == 8
    assert AuditEvent.objects.filter(kind="SUBMITTED").count() == 1


def test_list_filters_by_team_state_and_priority(api):
    alice, bob = api("alice"), api("bob")
    alice.post("/api/v1/jobs", make_spec(client_job_id="a", priority="P1"), format="json")
    alice.post("/api/v1/jobs", make_spec(client_job_id="b", priority="P3"), format="json")
    bob.post("/api/v1/jobs", make_spec(client_job_id="c", team="production-ranking"), format="json")
    admin = api("ops")

    def names(client, query=""):
        return [j["client_job_id"] for j in client.get(f"/api/v1/jobs{query}").json()["results"]]

    assert names(admin) == ["c", "b", "a"]
    assert names(alice) == ["b", "a"]
    assert names(admin, "?team=production-ranking") == ["c"]
    assert names(admin, "?priority=P3") == ["b"]
    assert names(admin, "?state=PENDING&priority=P1") == ["c", "a"]
    assert names(admin, "?state=RUNNING") == []


def test_list_pages_with_a_cursor(api):
    client = api("alice")
    for i in range(5):
        client.post("/api/v1/jobs", make_spec(client_job_id=f"j{i}", resources={"gpu_count": 1}), format="json")
    page = client.get("/api/v1/jobs?limit=2").json()
    seen = [j["client_job_id"] for j in page["results"]]
    while page["next"]:
        page = client.get(page["next"]).json()
        seen += [j["client_job_id"] for j in page["results"]]
    assert seen == ["j4", "j3", "j2", "j1", "j0"]


def test_list_does_a_fixed_number_of_queries(api, django_assert_max_num_queries):
    client = api("alice")
    for i in range(10):
        client.post("/api/v1/jobs", make_spec(client_job_id=f"j{i}", resources={"gpu_count": 1}), format="json")
    with django_assert_max_num_queries(6):
        assert len(client.get("/api/v1/jobs").json()["results"]) == 10


def test_depends_on_links_jobs(api):
    client = api("alice")
    first = client.post("/api/v1/jobs", make_spec(client_job_id="prep", resources={"gpu_count": 1}), format="json")
    second = client.post(
        "/api/v1/jobs", make_spec(client_job_id="train", depends_on=[first.json()["id"]]), format="json"
    )
    assert second.status_code == 201
    assert second.json()["depends_on"] == [first.json()["id"]]


def test_a_plain_submit_does_a_fixed_number_of_queries(api, django_assert_num_queries):
    """With its token remembered: the team, the user's memberships, the inventory (can it ever
    run), whether the client_job_id exists; then, in one transaction (a savepoint here, inside
    the test's), the job, its task and its SUBMITTED event. The answer reads nothing back."""
    client = api("alice")
    client.get("/api/v1/teams")  # the token is now remembered
    with django_assert_num_queries(9):
        response = client.post("/api/v1/jobs", make_spec(client_job_id="q", resources={"gpu_count": 1}), format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert response.json()["tasks"] == [
        {
            "rank": 0,
            "state": "PENDING",
            "node": None,
            "gpu_indices": [],
            "attempt": 0,
            "epoch": 0,
            "failure_class": "",
            "stop_reason": "",
            "exit_code": None,
            "exit_signal": "",
            "exit_cause": "",
            "assigned_at": None,
            "started_at": None,
            "finished_at": None,
            "last_checkpoint_at": None,
            "checkpoint_step": None,
        }
    ]
    # The same answer as reading the job back (GET), but for what changes by reading it.
    assert response.json() == client.get(f"/api/v1/jobs/{job.pk}").json()
