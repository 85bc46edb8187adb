"""Node health through the agent API: the latest sample in Redis, a fatal XID cordons its node
once (reason on the node, one audit entry, the running job stopped as a drain stops it), a bad
GPU leaves placement while its siblings stay, an admin puts it back, N infra failures cordon,
and /metrics exports the sample."""

import re

import pytest
from django.utils import timezone

from mlqueue.breaker import RedisBreaker
from scheduling import node_health
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, Task
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import agent, beat, leader  # noqa: F401 (fixtures)
from tests.nodes import cordon

NAME = "z1-r1-h100-01"


@pytest.fixture(autouse=True)
def health_settings(settings, monkeypatch):
    settings.MLQ_AGENT_JOIN_TOKEN = "join-secret"
    settings.MLQ_HEALTH_INFRA_FAILURES = 2
    # A fresh breaker: one an earlier test's Redis outage opened in this process would skip
    # storing the samples these tests read back.
    monkeypatch.setattr(node_health, "_redis", RedisBreaker("node health samples"))


def gpus(**faults) -> list[dict]:
    """8 healthy GPUs; `faults` maps "gpu3" to what that GPU reports instead."""
    rows = []
    for index in range(8):
        row = {"index": index, "utilization": 0, "memory_used_mb": 0, "memory_total_mb": 81559, "temperature_c": 35}
        rows.append({**row, "ecc_correctable": 0, "ecc_uncorrectable": 0, "xids": [], **faults.get(f"gpu{index}", {})})
    return rows


def sample(**faults) -> dict:
    return {"at": timezone.now().timestamp(), "provider": "fake", "error": "", "gpus": gpus(**faults)}


def beat_health(client, health: dict, tasks=()) -> dict:
    response = client.post(f"/api/v1/agents/{NAME}/heartbeat", {"tasks": list(tasks), "health": health}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


@pytest.fixture
def node_with_job(api, leader):  # noqa: F811
    client = agent(NAME)
    beat(client, NAME)
    cordon(Node.objects.exclude(name=NAME))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 4}), format="json").json()["id"]
    run_pass(epoch=leader)
    running = [{"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}]
    beat(client, NAME, running)
    assert Task.objects.get(job_id=job_id).gpu_indices == [0, 1, 2, 3]
    return client, job_id, running


def test_the_latest_sample_is_kept_in_redis_not_postgres(node_with_job, django_assert_max_num_queries):
    client, _, running = node_with_job
    healthy = sample(gpu2={"utilization": 88})
    with django_assert_max_num_queries(2):  # the node and its tasks; the epoch; nothing written
        beat_health(client, healthy, running)
    kept = node_health.latest([NAME, "z9-nowhere"])
    assert list(kept) == [NAME]
    assert kept[NAME]["gpus"][2]["utilization"] == 88 and kept[NAME]["received_at"] > 0
    assert Node.objects.get(name=NAME).health_marks == {}


def test_a_fatal_xid_cordons_the_node_once_and_requeues_its_job_as_a_drain(node_with_job, api, leader):  # noqa: F811
    client, job_id, running = node_with_job
    at = timezone.now().timestamp()
    fault = sample(gpu3={"xids": [{"code": 79, "at": at}]})

    reply = beat_health(client, fault, running)
    beat_health(client, fault, running)  # the same fault, reported again: nothing more

    node = Node.objects.get(name=NAME)
    assert (node.state, node.admin_reason) == ("CORDONED", "XID 79 (GPU has fallen off the bus) on GPU 3")
    audit = AuditEvent.objects.filter(node=node, actor_name="health")
    assert [(e.reason, e.message) for e in audit] == [
        ("CORDONED", "cordoned automatically: XID 79 (GPU has fallen off the bus) on GPU 3")
    ]
    kill_in_s = reply["signals"][0].pop("kill_in_s")  # the job's grace: the agent kills then itself
    assert reply["signals"] == [{"job_id": job_id, "rank": 0, "attempt": 1, "signal": "TERM", "reason": "DRAIN"}]
    assert 110 < kill_in_s <= 120
    beat(client, NAME, [{**running[0], "state": "exited", "exit_code": 0}])
    run_pass(epoch=leader)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.preemptions, job.restarts_used, job.retries_used) == ("PENDING", 1, 0, 0)
    retry = AuditEvent.objects.get(job=job, kind="RETRY")  # it said "drained off its node" (QA)
    assert retry.message.startswith("stopped for a fault on its node (a GPU error or a failed health check); requeued")

    # The admin uncordons: the fault acted on does not cordon again; a new XID does.
    uncordoned = api("ops").post(f"/api/v1/nodes/{NAME}/uncordon", {"reason": "GPU reseated"}, format="json")
    assert uncordoned.json()["state"] == "READY"
    # Said to the admin (QA: the uncordon of a node whose latest sample reports the fault said nothing).
    assert uncordoned.json()["warnings"] == ["XID 79 (GPU has fallen off the bus) on GPU 3"]
    beat_health(client, fault)
    assert Node.objects.get(name=NAME).state == "READY"
    beat_health(client, sample(gpu3={"xids": [{"code": 79, "at": at}, {"code": 79, "at": at + 60}]}))
    assert Node.objects.get(name=NAME).state == "CORDONED"


def test_a_bad_gpu_is_excluded_its_siblings_stay_schedulable(node_with_job, api, leader):  # noqa: F811
    client, job_id, running = node_with_job
    beat_health(client, sample(gpu2={"ecc_uncorrectable": 1}), running)

    node = Node.objects.get(name=NAME)
    assert (node.state, node.excluded_gpus) == ("READY", {"2": "1 uncorrectable ECC error(s)"})
    assert AuditEvent.objects.get(node=node, reason="GPU_EXCLUDED").message == (
        "excluded from placement: GPU 2: 1 uncorrectable ECC error(s)"
    )
    assert Task.objects.get(job_id=job_id).stop_reason == "DRAIN"  # it held GPU 2
    beat(client, NAME, [{**running[0], "state": "exited", "exit_code": 0}])
    run_pass(epoch=leader)  # requeued, and placed again on the healthy GPUs

    run_pass(epoch=leader)
    assert Task.objects.get(job_id=job_id).gpu_indices == [0, 1, 3, 4]  # never GPU 2

    spec = make_spec(client_job_id="second", resources={"gpu_count": 4})
    second = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    run_pass(epoch=leader)  # 3 usable GPUs are free, not 4
    shown = api("alice").get(f"/api/v1/jobs/{second}").json()
    why = shown["pending_reason"]["message"]
    assert why.startswith("needs 4 H100; 3 of 7 free (") and f"; 1 H100 excluded as unhealthy ({NAME} GPU 2)" in why

    refused = api("ops").post(f"/api/v1/nodes/{NAME}/include-gpus", {"gpus": [5], "reason": "x"}, format="json")
    assert refused.status_code == 400 and "GPU 5" in refused.json()["fields"]["gpus"][0]
    back = api("ops").post(f"/api/v1/nodes/{NAME}/include-gpus", {"gpus": [2], "reason": "reseated"}, format="json")
    assert back.status_code == 200 and back.json()["excluded_gpus"] == {}
    assert AuditEvent.objects.get(node__name=NAME, reason="GPU_INCLUDED").actor_name == "ops"


def test_a_failing_health_check_cordons_once_per_run_of_failures(node_with_job):
    client, _, running = node_with_job
    check = {"status": "failed", "exit_code": 2, "output": "dcgmi diag: PCIe replay", "at": 100.0, "failed_since": 90.0}
    beat_health(client, {**sample(), "check": check}, running)
    beat_health(client, {**sample(), "check": {**check, "at": 160.0}}, running)
    node = Node.objects.get(name=NAME)
    assert node.admin_reason == "health check failed (exit 2): dcgmi diag: PCIe replay"
    assert AuditEvent.objects.filter(node=node, actor_name="health").count() == 1


def test_every_gpu_fallen_off_the_bus_cordons_with_a_reason_that_fits(node_with_job, api, leader):  # noqa: F811
    """Eight findings joined came to 366 characters, past the 300 of the node's reason: every
    heartbeat with a sample was a 500, the node stayed READY and jobs were placed on it."""
    client, job_id, running = node_with_job
    at = timezone.now().timestamp()
    reply = beat_health(client, sample(**{f"gpu{i}": {"xids": [{"code": 79, "at": at}]} for i in range(8)}), running)
    node = Node.objects.get(name=NAME)
    findings = [f"XID 79 (GPU has fallen off the bus) on GPU {i}" for i in range(8)]
    reason = "; ".join(findings[:5]) + node_health.MORE_FAULTS.format(count=3)
    assert (node.state, node.admin_reason, node.state_reason) == ("CORDONED", reason, reason)
    assert len(reason) <= 300
    event = AuditEvent.objects.get(node=node, actor_name="health")
    assert event.data["findings"] == findings  # every one, in full
    assert reply["signals"][0]["reason"] == "DRAIN"


def test_a_long_health_check_output_fits_and_is_shown_without_control_characters(node_with_job):
    client, _, running = node_with_job
    output = "\x1b[31mdcgmi diag\u202e FAIL\x07 " + "E" * 270  # the 300 the protocol allows
    check = {"status": "failed", "exit_code": -2147483648, "output": output, "at": 100.0, "failed_since": 90.0}
    beat_health(client, {**sample(), "check": check}, running)
    node = Node.objects.get(name=NAME)
    assert node.state == "CORDONED" and len(node.admin_reason) == 300
    assert node.admin_reason.startswith("health check failed (exit -2147483648): [31mdcgmi diag FAIL EEE")
    assert node.admin_reason.endswith("E...")


def test_faults_on_gpus_the_node_does_not_have_are_ignored(node_with_job):
    """GPUs 12 and 15 of an 8-GPU node were excluded: the console showed 6/8 free."""
    client, _, running = node_with_job
    at = timezone.now().timestamp()
    ghosts = [
        {**gpus()[0], "index": 12, "xids": [{"code": 48, "at": at}]},
        {**gpus()[0], "index": 15, "xids": [{"code": 79, "at": at}]},
    ]
    beat_health(client, {**sample(), "gpus": gpus() + ghosts}, running)
    node = Node.objects.get(name=NAME)
    assert (node.state, node.excluded_gpus, node.health_marks) == ("READY", {}, {})
    assert not AuditEvent.objects.filter(node=node, actor_name="health").exists()


@pytest.mark.parametrize(
    "reasons, limit, expected",
    [
        (["a", "b"], 10, "a; b"),
        (["aaaa", "bbbb", "cccc"], 60, "aaaa; bbbb; cccc"),
        (["x" * 30, "y" * 30, "z" * 30], 80, "x" * 30 + "; and 2 more (the node's events list them all)"),
        (["x" * 200], 50, "x" * 47 + "..."),
    ],
)
def test_a_cordon_reason_keeps_whole_findings_then_says_how_many_more(reasons, limit, expected):
    assert node_health.cordon_reason(reasons, limit) == expected


def test_infra_failures_within_the_window_cordon(node_with_job):
    client, job_id, running = node_with_job
    node = Node.objects.get(name=NAME)
    assert not node_health.note_infra_failures(node, 1, now=timezone.now())
    beat(client, NAME, [])  # the agent no longer holds the running task: lost, an infra failure
    node.refresh_from_db()
    assert (node.state, node.admin_reason) == ("CORDONED", "2 infrastructure failures within 600 s (2 tasks lost)")


def test_infra_failures_count_faults_not_the_tasks_each_one_lost(node_with_job):
    """One agent restart that loses a whole gang is one fault of the machine's: the rule
    (2 here) counts it once however many ranks it cost, and cordons on the second fault."""
    node = Node.objects.get(name=NAME)
    assert not node_health.note_infra_failures(node, 8, now=timezone.now())
    node.refresh_from_db()
    assert node.state != "CORDONED"
    assert node_health.note_infra_failures(node, 3, now=timezone.now())
    node.refresh_from_db()
    assert (node.state, node.admin_reason) == ("CORDONED", "2 infrastructure failures within 600 s (11 tasks lost)")
    event = AuditEvent.objects.get(node=node, actor_name="health")
    assert (event.data["infra_failures"], event.data["tasks_lost"]) == (2, 11)


def test_infra_failures_outside_the_window_do_not_add_up(node_with_job, settings):
    node = Node.objects.get(name=NAME)
    long_ago = timezone.now() - timezone.timedelta(seconds=settings.MLQ_HEALTH_INFRA_WINDOW_S + 5)
    assert not node_health.note_infra_failures(node, 1, now=long_ago)
    assert not node_health.note_infra_failures(node, 1, now=timezone.now())
    node.refresh_from_db()
    assert node.state != "CORDONED"


def test_bad_samples_are_a_400_naming_the_field(node_with_job):
    client, _, _ = node_with_job
    for bad, field in [
        ({**sample(), "provider": "magic"}, "provider"),
        ({**sample(), "gpus": gpus(gpu1={"utilization": 101})}, "gpus"),
        ({**sample(), "gpus": [gpus()[0], gpus()[0]]}, "gpus"),
        ({**sample(), "check": {"status": "meh", "at": 1.0}}, "check"),
    ]:
        response = client.post(f"/api/v1/agents/{NAME}/heartbeat", {"health": bad}, format="json")
        assert response.status_code == 400, bad
        assert any(name.startswith(f"health.{field}") for name in response.json()["fields"]), response.json()


def test_metrics_export_the_latest_samples(node_with_job, client):
    agent_client, _, running = node_with_job
    beat_health(agent_client, sample(gpu1={"utilization": 55, "temperature_c": 66}), running)
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert f'mlqueue_gpu_utilization_percent{{gpu="1",node="{NAME}"}} 55.0' in body
    assert f'mlqueue_gpu_temperature_celsius{{gpu="1",node="{NAME}"}} 66.0' in body
    assert f'mlqueue_gpu_excluded{{gpu="1",node="{NAME}"}}' not in body


def test_the_node_page_shows_each_gpu_its_health_and_puts_excluded_ones_back(node_with_job, logged_in):
    client, _, running = node_with_job
    check = {"status": "ok", "exit_code": 0, "output": "all 8 GPUs pass", "at": timezone.now().timestamp()}
    hot = sample(gpu5={"temperature_c": 93, "utilization": 99}, gpu6={"ecc_uncorrectable": 1})
    beat_health(client, {**hot, "check": check}, running)

    page = logged_in("ops").get(f"/nodes/{NAME}/").content.decode()
    assert "Telemetry from FAKE" in page and 'data-status="ok"' in page and "all 8 GPUs pass" in page
    assert '<tr id="gpu-6" data-excluded="1">' in page and "excluded</span> 1 uncorrectable ECC error(s)" in page
    row = page[page.index('<tr id="gpu-5"') : page.index('<tr id="gpu-6"')]
    assert "99%" in row and "93 °C" in row and "warning" in row and "hot (93 °C)" in row
    assert "GPU 6: excluded: 1 uncorrectable ECC error(s)" in page  # its square

    back = logged_in("ops").post(
        "/nodes/", {"node": NAME, "from": "node", "action": "include_gpus", "reason": "swapped the board"}
    )
    assert back.status_code == 302 and Node.objects.get(name=NAME).excluded_gpus == {}
    assert AuditEvent.objects.get(node__name=NAME, reason="GPU_INCLUDED").message == (
        "GPU 6 back in placement: swapped the board"
    )


def test_a_running_jobs_page_shows_its_gpus_utilization(node_with_job, logged_in):
    client, job_id, running = node_with_job
    beat_health(client, sample(gpu0={"utilization": 91}, gpu3={"utilization": 12}, gpu4={"utilization": 77}), running)
    page = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    use = page[page.index('class="mono gpu-use"') :].split("</td>")[0]
    assert [part.split(">")[-1] for part in use.split("</span>")[:-1]] == ["0: 91%", "1: 0%", "2: 0%", "3: 12%"]


def test_two_heartbeats_racing_with_one_fault_act_once(node_with_job):
    from scheduling import health_rules, nodes

    node = Node.objects.get(name=NAME)
    verdict = health_rules.judge(sample(gpu4={"ecc_uncorrectable": 1}), {}, node_health.rules())
    stale = Node.objects.get(name=NAME)  # what the second heartbeat read, before the first wrote
    assert node_health.act(node, verdict, now=timezone.now())
    assert not node_health.act(stale, verdict, now=timezone.now())
    assert AuditEvent.objects.filter(node__name=NAME, reason="GPU_EXCLUDED").count() == 1
    assert not nodes.do_claim_health_marks(node=stale, before={}, after={"xid_at": 1.0})


def test_excluded_gpus_are_counted_apart_in_metrics_and_the_console(node_with_job, client, logged_in):
    agent_client, _, running = node_with_job  # its job holds GPUs 0-3
    faults = sample(gpu6={"ecc_uncorrectable": 1}, gpu2={"xids": [{"code": 48, "at": 1.0}]})
    beat_health(agent_client, faults, running)
    body = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    # GPU 2 is still held (its job is being stopped): used, not excluded; GPU 6 is out.
    assert 'mlqueue_gpus{resource_class="gpu:H100",state="unavailable_excluded"} 1.0' in body
    assert 'mlqueue_gpus{resource_class="gpu:H100",state="free"} 3.0' in body
    assert 'mlqueue_gpu_excluded{gpu="6",node="z1-r1-h100-01"} 1.0' in body
    assert 'mlqueue_gpu_excluded{gpu="2",node="z1-r1-h100-01"} 1.0' in body
    page = logged_in("ops").get("/nodes/").content.decode()
    assert re.search(rf'id="node-{NAME}"[^>]*title="[^"]* 3/8 H100 GPUs free', page)
