"""Attacks on the agent API, each refused: joining with a stolen, expired, used-up or revoked
token; taking over a registered node's name; reporting a node nobody has; reporting on other
nodes' tasks or other attempts; filling Postgres with logs; a NUL byte blocking the outbox."""

import io
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import JoinToken
from agents.services import ALREADY_REGISTERED, STILL_HAS_TASKS
from agents.tokens import WRONG_JOIN_TOKEN, do_create_join_token
from scheduling import liveness
from scheduling.leader import failures
from scheduling.leader.failures import detect
from scheduling.leader.worker import run_pass
from scheduling.models import Node, SchedulerLease, Task, TaskLog
from teams.models import AuditEvent, hash_token
from tests.conftest import make_spec
from tests.nodes import cordon

BOOTSTRAP = "bootstrap-join-secret"
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
    settings.MLQ_AGENT_JOIN_TOKEN = BOOTSTRAP


def register(token: str, name: str = "n1", **inventory):
    return APIClient().post(
        "/api/v1/agents/register",
        {"name": name, **INVENTORY, **inventory},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def node_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


# --- joining ----------------------------------------------------------------------------------


def test_a_join_token_made_by_the_command_is_shown_once_hashed_and_bounded(clock, db):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_join_token", "--name", "rack z2-r3", "--expires", "24h", "--max-uses", "2", stdout=out, stderr=err
    )
    raw = out.getvalue().strip()
    token = JoinToken.objects.get()
    assert raw.startswith("mlqj_") and token.digest == hash_token(raw) and raw not in str(token.__dict__)
    assert token.expires_at == timezone.now() + timedelta(hours=24)
    assert "revoke_join_token" in err.getvalue()
    assert register(raw, "a").status_code == 201
    assert register(raw, "b").status_code == 201
    used_up = register(raw, "c")
    assert (used_up.status_code, used_up.json()["detail"]) == (401, WRONG_JOIN_TOKEN)
    assert set(Node.objects.values_list("name", flat=True)) == {"a", "b"}
    assert JoinToken.objects.get().uses == 2
    created = AuditEvent.objects.get(kind="SECURITY", reason="JOIN_TOKEN_CREATED")
    assert raw not in created.message and token.hint in created.message
    joined = AuditEvent.objects.get(node__name="a", reason="REGISTERED")
    assert f"join token {token.hint}… (rack z2-r3)" in joined.message


@pytest.mark.parametrize("bad", ["expired", "revoked", "unknown"])
def test_an_expired_revoked_or_unknown_join_token_registers_nothing(clock, db, bad):
    token, raw = do_create_join_token(created_by="test", expires_at=timezone.now() + timedelta(hours=24))
    if bad == "expired":
        clock.shift(timedelta(hours=24, seconds=1))
    elif bad == "revoked":
        call_command("revoke_join_token", token.hint, stdout=io.StringIO())
    else:
        raw = "mlqj_" + "x" * 43
    response = register(raw)
    assert (response.status_code, response.json()["detail"]) == (401, WRONG_JOIN_TOKEN)
    assert not Node.objects.exists()


def test_revoking_twice_or_an_unknown_hint_is_a_clear_error(db):
    token, _ = do_create_join_token(created_by="test")
    call_command("revoke_join_token", token.hint, stdout=io.StringIO())
    with pytest.raises(CommandError, match="already revoked"):
        call_command("revoke_join_token", token.hint, stdout=io.StringIO())
    with pytest.raises(CommandError, match="no single join token"):
        call_command("revoke_join_token", "mlqj_nothing", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--expires"):
        call_command("create_join_token", "--expires", "soon", stdout=io.StringIO())
    assert AuditEvent.objects.filter(kind="SECURITY", reason="JOIN_TOKEN_REVOKED").count() == 1


def test_the_join_token_cannot_take_over_a_registered_node(db):
    first = register(BOOTSTRAP, "z1-r1-h100-01")
    real_token = first.json()["token"]
    hijack = register(BOOTSTRAP, "z1-r1-h100-01", cpu_count=1024)
    assert (hijack.status_code, hijack.json()["detail"]) == (409, ALREADY_REGISTERED.format(name="z1-r1-h100-01"))
    node = Node.objects.get(name="z1-r1-h100-01")
    assert (node.token_digest, node.cpu_count) == (hash_token(real_token), 192)
    beat = node_client(real_token).post("/api/v1/agents/z1-r1-h100-01/heartbeat", {"tasks": []}, format="json")
    assert beat.status_code == 200  # the real agent keeps its node


def test_an_agent_restarting_on_its_workdir_re_registers_with_its_own_node_token(db):
    token = register(BOOTSTRAP, "n1").json()["token"]
    again = register(token, "n1", cpu_count=96, task_isolation="uid")
    assert again.status_code == 201 and again.json()["token"] == token
    node = Node.objects.get(name="n1")
    assert (node.cpu_count, node.task_isolation) == (96, "uid")
    other = register(token, "n2")
    assert (other.status_code, other.json()["detail"]) == (403, "this token belongs to node n1; it cannot register n2.")
    assert not Node.objects.filter(name="n2").exists()


def test_an_admin_reset_lets_a_new_agent_join_and_locks_the_old_token_out(api):
    old = register(BOOTSTRAP, "z1-r1-h100-01").json()["token"]
    assert (
        api("rita").post("/api/v1/nodes/z1-r1-h100-01/reset-token", {"reason": "x"}, format="json").status_code == 403
    )
    assert api("ops").post("/api/v1/nodes/z1-r1-h100-01/reset-token", {}, format="json").status_code == 400
    response = api("ops").post("/api/v1/nodes/z1-r1-h100-01/reset-token", {"reason": "reinstalled"}, format="json")
    assert response.status_code == 200
    assert (
        node_client(old).post("/api/v1/agents/z1-r1-h100-01/heartbeat", {"tasks": []}, format="json").status_code == 401
    )
    assert register(BOOTSTRAP, "z1-r1-h100-01").status_code == 201
    audit = AuditEvent.objects.get(kind="SECURITY", reason="NODE_TOKEN_RESET")
    assert (audit.actor_name, audit.node.name, audit.message) == (
        "ops",
        "z1-r1-h100-01",
        "node token of z1-r1-h100-01 reset: reinstalled",
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("gpu_count", 17),
        ("cpu_count", 100_000),
        ("cpu_count", 1025),
        ("memory_gb", 65_537),
        ("scratch_disk_gb", 1_000_001),
        ("cpu_count", 2**31),
        ("memory_gb", 2**63),
        ("labels", {f"k{i}": "v" for i in range(65)}),
        ("labels", {"rack": "x" * 64}),
        ("task_isolation", "root"),
        ("zone", "z1\u202e"),
        ("rack", "r1\u0007"),
        ("labels", {"ib": "a\u200bb"}),
        ("address", "10.0.0.1\u2066"),
    ],
)
def test_an_inventory_out_of_range_is_refused(db, field, value):
    response = register(BOOTSTRAP, "n1", **{field: value})
    assert response.status_code == 400 and any(name.startswith(field) for name in response.json()["fields"])
    assert not Node.objects.exists()


@pytest.mark.parametrize("name", ["z1-r1-h100-01\u202e10-001h", "../../etc", "a/b", "node 1", "-n1", "n1."])
def test_a_node_name_that_is_not_a_host_name_is_refused(db, name):
    response = register(BOOTSTRAP, name)
    assert response.status_code == 400 and "name" in response.json()["fields"]
    assert not Node.objects.exists()


# --- reporting on tasks --------------------------------------------------------------------------


@pytest.fixture
def placed(api):
    """Alice's 8-GPU job placed on z1-r1-h100-01 by a real pass; (job id, that node's client)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=2, renewed_at=timezone.now())
    client = node_client(register(BOOTSTRAP, "z1-r1-h100-01").json()["token"])
    client.post("/api/v1/agents/z1-r1-h100-01/heartbeat", {"tasks": []}, format="json")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=2)
    return job_id, client


def events(client, name: str, *items) -> dict:
    response = client.post(f"/api/v1/agents/{name}/events", {"events": list(items)}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def log(job_id: int, data: str, *, offset: int = 0, attempt: int = 1) -> dict:
    return {
        "type": "log",
        "job_id": job_id,
        "rank": 0,
        "attempt": attempt,
        "stream": "stdout",
        "offset": offset,
        "data": data,
    }


def test_a_node_cannot_write_logs_into_a_task_placed_nowhere_or_elsewhere(api, placed):
    job_id, _ = placed
    attacker = node_client(register(BOOTSTRAP, "z2-r1-h100-09").json()["token"])
    pending = (
        api("bob")
        .post(
            "/api/v1/jobs",
            make_spec(team="production-ranking", client_job_id="other", resources={"gpu_count": 8}),
            format="json",
        )
        .json()["id"]
    )
    reply = events(attacker, "z2-r1-h100-09", log(pending, "forged"), log(job_id, "forged"))
    assert reply["accepted"] == 0
    assert [r["reason"] for r in reply["refused"]] == [
        f"job {pending} rank 0 is not placed on node z2-r1-h100-09.",
        f"job {job_id} rank 0 is not placed on node z2-r1-h100-09.",
    ]
    assert not TaskLog.objects.exists()


def test_a_node_reports_only_on_the_attempt_placed_there(placed):
    job_id, client = placed
    reply = events(
        client,
        "z1-r1-h100-01",
        log(job_id, "from attempt 7", attempt=7),
        {"type": "exited", "job_id": job_id, "rank": 0, "attempt": 7, "exit_code": 1},
    )
    assert reply["accepted"] == 0
    assert reply["refused"][0]["reason"] == f"job {job_id} rank 0 is at attempt 1 on this node, not attempt 7."
    assert Task.objects.get(job_id=job_id).state == "ASSIGNED" and not TaskLog.objects.exists()


def test_the_last_log_chunks_of_a_requeued_attempt_come_only_from_its_node(api, placed):
    job_id, client = placed
    other = node_client(register(BOOTSTRAP, "z2-r1-h100-09").json()["token"])
    events(client, "z1-r1-h100-01", {"type": "started", "job_id": job_id, "rank": 0, "attempt": 1})
    api("ops").post("/api/v1/nodes/z1-r1-h100-01/drain", {"reason": "x"}, format="json")
    events(client, "z1-r1-h100-01", {"type": "exited", "job_id": job_id, "rank": 0, "attempt": 1, "exit_code": 0})
    run_pass(epoch=2)
    task = Task.objects.get(job_id=job_id)
    assert (task.state, task.node, task.last_node.name) == ("PENDING", None, "z1-r1-h100-01")
    assert events(other, "z2-r1-h100-09", log(job_id, "forged"))["accepted"] == 0
    assert events(client, "z1-r1-h100-01", log(job_id, "last words\n"))["accepted"] == 1
    assert list(TaskLog.objects.values_list("text", flat=True)) == ["last words\n"]


def test_stored_logs_are_capped_by_what_is_stored_not_by_the_offset_claimed(settings, placed):
    settings.MLQ_MAX_LOG_CHARS = 100
    job_id, client = placed
    chunks = [log(job_id, "x" * 40, offset=offset) for offset in (0, 40, 10**12, 2 * 10**12, 3 * 10**12)]
    assert events(client, "z1-r1-h100-01", *chunks)["accepted"] == 5
    assert sum(len(text) for text in TaskLog.objects.values_list("text", flat=True)) == 100
    assert events(client, "z1-r1-h100-01", log(job_id, "y" * 40, offset=4 * 10**12))["accepted"] == 1
    assert TaskLog.objects.count() == 3
    capped = AuditEvent.objects.get(job_id=job_id, reason="LOG_CAPPED")
    assert capped.message.startswith("rank 0 attempt 1: stdout reached the 100 characters kept")


def test_a_nul_byte_or_a_lone_surrogate_in_a_log_is_stored_in_place_and_blocks_nothing(placed):
    job_id, client = placed
    body = (
        '{"events": [{"type": "log", "job_id": JOB, "rank": 0, "attempt": 1, "stream": "stdout", "offset": 0, '
        '"data": "a\\u0000b\\ud800c\\n"}, {"type": "started", "job_id": JOB, "rank": 0, "attempt": 1}]}'
    ).replace("JOB", str(job_id))
    response = client.post("/api/v1/agents/z1-r1-h100-01/events", body, content_type="application/json")
    assert response.status_code == 200, response.json() and response.json()["accepted"] == 2
    assert TaskLog.objects.get().text == "a\ufffdb\ufffdc\n"  # one for one: offsets stay true
    assert Task.objects.get(job_id=job_id).state == "RUNNING"


def test_an_event_the_agent_had_to_drop_is_on_the_jobs_timeline(placed):
    job_id, client = placed
    dropped = {
        "type": "dropped",
        "job_id": job_id,
        "rank": 0,
        "attempt": 1,
        "data": "the agent dropped a log event the server refused 3 times: HTTP 400",
    }
    assert events(client, "z1-r1-h100-01", dropped)["accepted"] == 1
    event = AuditEvent.objects.get(job_id=job_id, reason="AGENT_DROPPED_EVENT")
    assert (event.actor_name, event.message) == ("agent:z1-r1-h100-01", dropped["data"])


@pytest.mark.parametrize(
    "field, value",
    [("job_id", 2**63), ("rank", 2**31), ("attempt", 2**31), ("exit_code", 2**31), ("offset", 2**63), ("job_id", 0)],
)
def test_integers_past_what_the_store_holds_are_refused(placed, field, value):
    job_id, client = placed
    event = {**log(job_id, "x"), "type": "exited", "exit_code": 0, field: value}
    response = client.post("/api/v1/agents/z1-r1-h100-01/events", {"events": [event]}, format="json")
    assert response.status_code == 400 and f"events.0.{field}" in response.json()["fields"]
    assert Task.objects.get(job_id=job_id).state == "ASSIGNED"


def test_nul_or_surrogates_elsewhere_in_an_event_are_replaced_not_a_500(placed):
    job_id, client = placed
    body = (
        '{"events": [{"type": "exited", "job_id": JOB, "rank": 0, "attempt": 1, "exit_code": null, '
        '"signal": "KILL\\u0000", "\\ud800": 1}]}'
    ).replace("JOB", str(job_id))
    response = client.post("/api/v1/agents/z1-r1-h100-01/events", body, content_type="application/json")
    assert response.status_code == 200 and response.json()["accepted"] == 1
    assert Task.objects.get(job_id=job_id).exit_signal == "KILL\ufffd"


def test_a_reset_node_with_tasks_left_cannot_be_taken_until_they_are_requeued(api, placed, settings, monkeypatch):
    job_id, client = placed
    api("ops").post("/api/v1/nodes/z1-r1-h100-01/reset-token", {"reason": "token leaked"}, format="json")
    assert Node.objects.get(name="z1-r1-h100-01").state == "SUSPECT"  # nothing new goes there
    early = register(BOOTSTRAP, "z1-r1-h100-01")
    assert (early.status_code, early.json()["detail"]) == (409, STILL_HAS_TASKS.format(name="z1-r1-h100-01"))
    settings.MLQ_OUTAGE_BOUND_S, settings.MLQ_LOST_MARGIN_S = 20, 10
    monkeypatch.setattr(failures, "CLOCKS", failures.Clocks(epoch=2))  # a leader that has been watching
    last = liveness.last_heard(["z1-r1-h100-01"])["z1-r1-h100-01"]
    detect(epoch=2, now=datetime.fromtimestamp(last + 31, UTC))  # past the bound + margin: LOST
    assert Task.objects.get(job_id=job_id).state == "FAILED"
    lost = AuditEvent.objects.filter(job_id=job_id, reason="NODE_LOST").get()  # the reset named (QA)
    assert lost.message.endswith("; an admin had reset its node token, and no agent has registered with a new one")
    assert register(BOOTSTRAP, "z1-r1-h100-01").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_two_agents_racing_for_a_new_name_get_one_node_and_one_409(settings):
    settings.MLQ_AGENT_JOIN_TOKEN = BOOTSTRAP
    barrier, statuses = threading.Barrier(2), []

    def join():
        barrier.wait()
        try:
            statuses.append(register(BOOTSTRAP, "z9-r1-new").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=join) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(statuses) == [201, 409]
    assert AuditEvent.objects.filter(node__name="z9-r1-new", reason="REGISTERED").count() == 1
