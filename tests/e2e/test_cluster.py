"""The whole system with real processes: web, scheduler, agents running real tasks."""

import json
import signal
import sys
from itertools import pairwise

import pytest

from scheduling.models import Job, Node
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PRINT_ENV = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ["
    "'RANK', 'WORLD_SIZE', 'NODE_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES', "
    "'MLQ_JOB_ID', 'MLQ_TASK_RANK', 'MLQ_ATTEMPT', 'MLQ_EPOCH']}))"
)


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def submit(api, **spec) -> int:
    body = {"team": "research-foundation-models", "name": "e2e", **spec}
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def job_state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def test_a_gang_of_16_gpus_runs_on_two_agents(cluster, api):
    cluster.start(
        agents=[
            {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"},
            {"name": "z1-r1-h100-02", "zone": "z1", "rack": "z1-r1"},
        ]
    )
    wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")
    job_id = submit(
        api,
        command=[sys.executable, "-c", PRINT_ENV],
        resources={"gpu_count": 16, "gpu_type": "H100", "cpu_per_rank": 8, "memory_per_rank_gb": 64},
    )
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=30, what="the gang to succeed")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    job = Job.objects.get(pk=job_id)
    tasks = list(job.tasks.order_by("rank").select_related("node"))
    assert {t.node.name for t in tasks} == {"z1-r1-h100-01", "z1-r1-h100-02"}
    assert all((t.started_at - job.submitted_at).total_seconds() < 5 for t in tasks)
    envs = [json.loads(api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank={r}").json()["text"]) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1
    assert all(e["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" for e in envs)
    assert {(e["MLQ_JOB_ID"], e["MLQ_ATTEMPT"]) for e in envs} == {(str(job_id), "1")}


LEDGER_JOB = str(__import__("pathlib").Path(__file__).with_name("ledger_job.py"))
NODE_A = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
NODE_B = {"name": "z1-r1-h100-02", "zone": "z1", "rack": "z1-r1"}


def read_ledger(path) -> dict[str, list[tuple[str, float]]]:
    """attempt -> [(what, when)]"""
    found: dict[str, list] = {}
    for line in path.read_text().splitlines():
        attempt, _rank, what, when = line.split()
        found.setdefault(attempt, []).append((what, float(when)))
    return found


def assert_never_overlapping(ledger: dict) -> None:
    spans = sorted(
        (min(t for _, t in events), max(t for _, t in events), attempt) for attempt, events in ledger.items()
    )
    for (_, end, first), (start, _, second) in pairwise(spans):
        assert end < start, f"attempts {first} and {second} overlapped: {spans}"


def ledger_job(api, tmp_path, *, first_run_s: float) -> tuple[int, object]:
    ledger = tmp_path / "ledger.txt"
    job_id = submit(
        api,
        command=[sys.executable, LEDGER_JOB],
        grace_period_seconds=5,
        resources={"gpu_count": 8, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        env={"LEDGER": str(ledger), "RUN_FOR_FIRST": str(first_run_s), "RUN_FOR": "1.5"},
        checkpoint={"path": str(tmp_path / "ckpt")},
    )
    return job_id, ledger


def on_node(job_id: int) -> str | None:
    task = Job.objects.get(pk=job_id).tasks.select_related("node").first()
    return task.node.name if task.node else None


def test_an_agent_killed_with_sigkill_loses_its_node_and_the_job_finishes_elsewhere(cluster, api, tmp_path):
    cluster.start(agents=[NODE_A])
    wait_for(lambda: Node.objects.filter(name=NODE_A["name"], state="READY").exists(), timeout=20, what="node A")
    job_id, ledger = ledger_job(api, tmp_path, first_run_s=120)
    wait_for(lambda: job_state(job_id) == "RUNNING" and ledger.exists(), timeout=15, what="the job on A")
    cluster.add_agent(NODE_B)
    wait_for(lambda: Node.objects.filter(name=NODE_B["name"], state="READY").exists(), timeout=20, what="node B")

    cluster.agents[NODE_A["name"]].signal(signal.SIGKILL)
    wait_for(lambda: Node.objects.get(name=NODE_A["name"]).state == "SUSPECT", timeout=15, what="A SUSPECT")
    wait_for(lambda: Node.objects.get(name=NODE_A["name"]).state == "LOST", timeout=20, what="A LOST")
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=30, what="the job to finish on B")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    assert on_node(job_id) == NODE_B["name"]
    events = read_ledger(ledger)
    assert set(events) == {"1", "2"} and ("end",) == events["2"][-1][:1]
    assert_never_overlapping(events)


def test_a_cut_off_agent_kills_its_tasks_before_the_server_requeues_them(cluster, api, tmp_path):
    from tests.e2e.proxy import Proxy

    cluster.start(agents=[])
    proxy = Proxy(cluster.port)
    cluster.add_agent(NODE_A, server=f"http://127.0.0.1:{proxy.port}")
    wait_for(lambda: Node.objects.filter(name=NODE_A["name"], state="READY").exists(), timeout=20, what="node A")
    job_id, ledger = ledger_job(api, tmp_path, first_run_s=120)
    wait_for(lambda: job_state(job_id) == "RUNNING" and ledger.exists(), timeout=15, what="the job on A")
    cluster.add_agent(NODE_B)
    wait_for(lambda: Node.objects.filter(name=NODE_B["name"], state="READY").exists(), timeout=20, what="node B")

    proxy.cut()
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=40, what="the job to finish on B")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    events = read_ledger(ledger)
    first_attempt_ended = max(t for _, t in events["1"])
    requeued = AuditEvent.objects.get(job_id=job_id, kind="RETRY").created_at.timestamp()
    assert first_attempt_ended < requeued, "the server requeued before the agent had killed the task"
    assert ("checkpoint",) == events["1"][-1][:1]  # the agent's lease kill is a SIGTERM first
    assert "lease expired without renewal" in cluster.agents[NODE_A["name"]].output()
    assert_never_overlapping(events)


def test_drain_checkpoints_the_running_job_and_it_resumes_elsewhere(cluster, api, tmp_path):
    cluster.start(agents=[NODE_A])
    wait_for(lambda: Node.objects.filter(name=NODE_A["name"], state="READY").exists(), timeout=20, what="node A")
    job_id, ledger = ledger_job(api, tmp_path, first_run_s=120)
    wait_for(lambda: job_state(job_id) == "RUNNING" and ledger.exists(), timeout=15, what="the job on A")
    cluster.add_agent(NODE_B)
    wait_for(lambda: Node.objects.filter(name=NODE_B["name"], state="READY").exists(), timeout=20, what="node B")

    response = api("ops").post(f"/api/v1/nodes/{NODE_A['name']}/drain", {"reason": "kernel upgrade"}, format="json")
    assert response.status_code == 200
    try:
        wait_for(lambda: job_state(job_id) == "SUCCEEDED", timeout=30, what="the job to finish on B")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    events = read_ledger(ledger)
    assert events["1"][-1][0] == "checkpoint" and events["2"][-1][0] == "end"
    assert on_node(job_id) == NODE_B["name"]
    job = Job.objects.get(pk=job_id)
    assert (job.preemptions, job.restarts_used, job.retries_used) == (1, 0, 0)  # a drain spends nothing
    assert_never_overlapping(events)
