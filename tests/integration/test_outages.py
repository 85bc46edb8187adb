"""The control plane's own faults are not the nodes': heartbeats are answered with Redis down
(liveness in Postgres, batched), the leader's failure detection restarts its clocks whenever it
cannot trust the silence it sees (a takeover, Redis down or emptied, a full disruption), and a
task its agent stopped because the lease ran out is an infra failure, whatever its exit code."""

import socket
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mlqueue.breaker import RedisBreaker
from mlqueue.redis_client import COMMAND_TIMEOUT_S
from scheduling import liveness, node_health, notify
from scheduling.leader import failures
from scheduling.leader.failures import Clocks, detect
from scheduling.leader.worker import Waker, run_pass
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import JOIN, agent, beat
from tests.nodes import cordon, heartbeat

INVENTORY = {"zone": "z1", "rack": "z1-r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 192, "memory_gb": 2048}
BOUND, MARGIN = 20, 10


@pytest.fixture(autouse=True)
def outage_settings(settings, monkeypatch, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN
    settings.MLQ_OUTAGE_BOUND_S, settings.MLQ_LOST_MARGIN_S = BOUND, MARGIN
    monkeypatch.setattr(liveness, "_redis", RedisBreaker("liveness"))


@pytest.fixture
def redis_down(settings, monkeypatch):
    """Redis is a port where nothing listens (as after a crash)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    monkeypatch.setattr(liveness, "_redis", RedisBreaker("liveness"))
    monkeypatch.setattr(notify, "_wakeups", RedisBreaker("wake-ups"))
    # Its own breaker, so the one tests after it use is not left open by this outage.
    monkeypatch.setattr(node_health, "_redis", RedisBreaker("node health samples"))


@pytest.fixture
def lease(db):
    SchedulerLease.objects.update_or_create(pk=1, defaults={"epoch": 2, "renewed_at": timezone.now()})
    return 2


@pytest.fixture
def leader(demo, lease):
    return lease


def ready_nodes(*names: str, heard_at: datetime) -> None:
    """New nodes whose agents heartbeat at `heard_at`, and the web's batch of them written."""
    for name in names:
        Node.objects.create(name=name, **INVENTORY)
    heartbeat(names, now=heard_at)
    liveness.flush()


def web_batch(*names: str, at: datetime) -> None:
    """Heartbeats from `names` answered at `at` by a web process, which writes its batch."""
    for name in names:
        liveness.record(name, at.timestamp())
    liveness.flush()


def later(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)


def watch(epoch: int, start: datetime, until_s: float, step_s: float = 10) -> list[dict]:
    """A leader looking every `step_s` from `start` to `start + until_s`."""
    return [detect(epoch=epoch, now=later(start, t)) for t in range(0, int(until_s) + 1, int(step_s))]


def test_with_redis_down_heartbeats_renew_the_lease_and_liveness_goes_to_postgres_in_batches(db, redis_down):
    clients = {name: agent(name) for name in ("n1", "n2")}
    replies = [beat(client, name) for name, client in clients.items()]
    assert [reply["lease_s"] for reply in replies] == [BOUND, BOUND]
    liveness.flush()  # what the first beats left (NEW -> READY writes) is out of the way
    with CaptureQueriesContext(connection) as queries:
        for name, client in clients.items():
            beat(client, name)
        written = liveness.flush()
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert written == 2 and len(updates) == 1  # two heartbeats, one statement
    assert Node.objects.filter(last_heartbeat_at__isnull=False).count() == 2
    assert set(liveness.last_heard(["n1", "n2"])) == {"n1", "n2"}


def test_a_pass_runs_with_redis_down_and_a_waker_ticks(api, leader, redis_down):
    api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json")
    report = run_pass(epoch=leader)
    assert report.pending == 1  # no READY node heard from: nothing placed, nothing raised
    assert Waker().wait(0.2) is False


def test_a_waker_on_a_redis_that_does_not_answer_costs_the_loop_one_command_timeout(settings):
    """The leader's loop renews its lease too: a SUBSCRIBE that a hung Redis never answers
    must cost it the command timeout, not the 5 s it once took each tick."""
    with socket.socket() as silent:  # accepts connections (the kernel does), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings.REDIS_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        waker, took = Waker(), []
        for _ in range(2):
            started = time.monotonic()
            assert waker.wait(0.2) is False
            took.append(time.monotonic() - started)
    assert waker.down and max(took) < 0.2 + COMMAND_TIMEOUT_S + 0.3, took


def test_a_new_leader_does_not_read_old_silence_as_dead_nodes(lease, monkeypatch):
    start = timezone.now()
    ready_nodes("n1", heard_at=start - timedelta(hours=1))
    monkeypatch.setattr(failures, "CLOCKS", Clocks())  # this process has just taken the lead
    results = watch(lease, start, BOUND + MARGIN)
    assert [r["lost"] for r in results] == [0, 0, 0, 0] and results[2]["suspect"] == 1
    assert detect(epoch=lease, now=later(start, BOUND + MARGIN + 1))["lost"] == 1
    assert AuditEvent.objects.get(node__name="n1", reason="LOST").message == (
        f"SUSPECT -> LOST: no heartbeat for {BOUND + MARGIN + 1} s (outage bound {BOUND} s + margin {MARGIN} s)"
    )


def test_a_leader_that_stopped_looking_restarts_its_clocks(lease, monkeypatch):
    start = timezone.now()
    ready_nodes("n1", heard_at=start)
    monkeypatch.setattr(failures, "CLOCKS", Clocks())
    detect(epoch=lease, now=start)
    # Its passes failed for a minute (the database was away): no verdict from that silence.
    assert detect(epoch=lease, now=later(start, 60)) == {"suspect": 0, "lost": 0, "reclaimed": 0, "full_disruption": 0}


def test_redis_losing_its_data_restarts_the_clocks(lease, monkeypatch):
    monkeypatch.setattr(liveness, "_pending", liveness.Pending(next_flush=float("inf")))  # no batch written yet
    client = agent("n1")
    beat(client, "n1")
    heard = liveness.last_heard(["n1"])["n1"]
    start = datetime.fromtimestamp(heard, UTC)
    monkeypatch.setattr(failures, "CLOCKS", Clocks(epoch=2))
    detect(epoch=2, now=later(start, 5))
    # Redis restarted without persistence: liveness's keys gone (only those: a FLUSHDB here also
    # emptied what tests on the other workers had just put in the same database).
    liveness._redis.client().delete(liveness.ZSET, liveness.SENTINEL)
    assert Node.objects.get(name="n1").last_heartbeat_at is None  # and this node's batch had not been written yet
    results = watch(2, later(start, 10), BOUND + MARGIN)
    assert [r["lost"] for r in results] == [0, 0, 0, 0]  # counted from when the loss was seen
    assert detect(epoch=2, now=later(start, 10 + BOUND + MARGIN + 1))["lost"] == 1


def test_with_redis_down_the_leader_counts_from_postgres_and_from_when_redis_went(lease, redis_down, monkeypatch):
    start = timezone.now()
    ready_nodes("alive", "dead", heard_at=start)
    monkeypatch.setattr(failures, "CLOCKS", Clocks(epoch=2))
    for seconds in range(10, BOUND + MARGIN + 30, 10):
        web_batch("alive", at=later(start, seconds))
        counts = detect(epoch=2, now=later(start, seconds))
    assert Node.objects.get(name="alive").health == "READY"
    assert Node.objects.get(name="dead").health == "LOST" and counts["full_disruption"] == 0


def test_in_a_full_disruption_no_node_is_lost_and_its_end_restarts_the_clocks(lease, monkeypatch):
    start = timezone.now()
    ready_nodes("a", "b", "c", "d", heard_at=start)
    monkeypatch.setattr(failures, "CLOCKS", Clocks(epoch=2))
    results = watch(2, start, BOUND + MARGIN + 30)  # the web tier is down: nobody is heard
    assert sum(r["lost"] for r in results) == 0 and results[-1]["full_disruption"] == 1
    assert set(Node.objects.values_list("health", flat=True)) == {"SUSPECT"}  # no new work meanwhile
    back = later(start, BOUND + MARGIN + 40)
    verdicts = []
    for seconds in range(0, BOUND + MARGIN + 20, 10):  # three come back and heartbeat on; d really died
        heartbeat(["a", "b", "c"], now=later(back, seconds))
        verdicts.append(detect(epoch=2, now=later(back, seconds)))
    assert verdicts[0]["full_disruption"] == 0
    # d is counted from the end of the disruption, not from its last heartbeat long before:
    assert [v["lost"] for v in verdicts] == [0, 0, 0, 0, 1]
    assert Node.objects.get(name="d").health == "LOST"


def test_a_task_its_agent_stopped_for_the_lease_is_an_infra_failure_even_with_exit_0(api, leader):
    client = agent("z1-r1-h100-01")
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    beat(client, "z1-r1-h100-01", [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}])
    beat(
        client,
        "z1-r1-h100-01",
        [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "exited", "exit_code": 0, "cause": "lease_expired"}],
    )
    task = Task.objects.get(job_id=job_id)
    assert (task.state, task.failure_class, task.exit_code) == ("FAILED", "INFRA", 0)
    event = AuditEvent.objects.filter(job_id=job_id, reason="LEASE_EXPIRED").get()
    assert event.message == (
        "rank 0 ended (exit code 0): stopped on its node: the node agent could not renew its "
        "lease with the control plane within the outage bound"
    )


def test_an_assignment_stopped_before_its_agent_reported_it_does_not_stay_assigned(api, leader):
    """Found by the fault campaign: the agent started it and restarted before reporting the
    start; the leader then preempted it, and no reply offers a stopped assignment again."""
    client = agent("z1-r1-h100-01")
    beat(client, "z1-r1-h100-01")
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    assert do_request_stop(job_id=job_id, reason="PREEMPTED", grace_s=30, message="preempted") == 1
    reply = beat(client, "z1-r1-h100-01")  # the restarted agent holds nothing
    assert reply["assignments"] == []
    task = Task.objects.get(job_id=job_id)
    assert (task.state, task.failure_class) == ("PREEMPTED", "INFRA")
    run_pass(epoch=leader)
    job = Job.objects.get(pk=job_id)
    assert (job.preemptions, job.restarts_used) == (1, 0)
