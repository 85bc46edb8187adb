"""QA round 5 on a task's environment: each attempt's MASTER_PORT chosen once, when it is
placed, free among the masters on its node (scheduling/assignments.py, leader/apply.py);
MLQ_LOCAL_TASK and MLQ_LOCAL_TASKS for per-machine work; and torchrun's variables refused in a
spec's env wherever a spec is submitted."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from agents import heartbeats
from agents.heartbeats import assignment
from scheduling import assignments
from scheduling.assignments import MASTER_PORTS, MasterPorts, assignment_env, legacy_master_port
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, Task
from scheduling.spec import PER_TASK_ENV, SET_PER_TASK
from tests.conftest import make_spec
from tests.integration.test_agent_api import INVENTORY, JOIN, agent, beat
from tests.integration.test_scheduler_pass import run_all_ranks, submit
from tests.integration.test_submit_page import URL, counts, form_of, inline_errors, logged_in, post
from tests.nodes import cordon, uncordon

NODE = "z1-r1-h100-01"
CLASHING_START = 30000


@pytest.fixture
def one_node(leader):
    """Every demo node but NODE cordoned: whatever is placed goes there."""
    cordon(Node.objects.exclude(name=NODE))
    return leader


@pytest.fixture
def clashing(monkeypatch):
    """Every attempt's hashed start the same port, as jobs 13 and 20013's were (QA)."""
    monkeypatch.setattr(assignments, "master_port", lambda job_id, attempt: CLASHING_START)


def one_gpu(api, name: str) -> Job:
    return submit(api, client_job_id=name, resources={"gpu_count": 1})


def told(job: Job) -> dict[int, str]:
    """Each rank's MASTER_PORT as its assignment carries it."""
    tasks = Task.objects.filter(job=job).select_related("job", "job__owner", "job__parent")
    return {task.rank: assignment(task)["env"]["MASTER_PORT"] for task in tasks}


def stored_port(job: Job) -> int | None:
    return Job.objects.values_list("master_port", flat=True).get(pk=job.pk)


# --- master ports ----------------------------------------------------------------------------------


def test_masters_placed_on_one_node_in_one_pass_get_ports_of_their_own(api, one_node, clashing):
    """QA: two jobs hashed to one port on one node; the second's rank 0 could not bind and the
    failure spent its user's max_retries."""
    first, second = one_gpu(api, "a"), one_gpu(api, "b")
    assert run_pass(epoch=one_node).placed == 2
    assert {stored_port(first), stored_port(second)} == {CLASHING_START, CLASHING_START + 1}
    assert told(first) != told(second)
    assert {told(first)[0], told(second)[0]} == {str(CLASHING_START), str(CLASHING_START + 1)}


def test_a_later_pass_avoids_the_ports_in_use_and_reuses_one_freed(api, one_node, clashing):
    first = one_gpu(api, "a")
    run_pass(epoch=one_node)
    second = one_gpu(api, "b")
    run_pass(epoch=one_node)
    assert (stored_port(first), stored_port(second)) == (CLASHING_START, CLASHING_START + 1)
    run_all_ranks(first)  # RUNNING holds its port as ASSIGNED did
    third = one_gpu(api, "c")
    run_pass(epoch=one_node)
    assert stored_port(third) == CLASHING_START + 2
    run_all_ranks(Job.objects.get(pk=first.pk), exit_code=0)
    fourth = one_gpu(api, "d")
    run_pass(epoch=one_node)
    assert stored_port(fourth) == CLASHING_START  # its attempt is over: the port is free again


def test_masters_on_other_nodes_do_not_take_the_port(api, leader, clashing):
    """Unique per master node, not cluster-wide: 3,268 ports would not do for the cluster."""
    cordon(Node.objects.exclude(name__in=[NODE, "z1-r1-h100-02"]))
    jobs = [submit(api, client_job_id=name, resources={"gpu_count": 8}) for name in ("a", "b")]
    run_pass(epoch=leader)
    assert [stored_port(job) for job in jobs] == [CLASHING_START, CLASHING_START]
    assert len({Task.objects.get(job=job).node_id for job in jobs}) == 2


def test_every_rank_of_an_attempt_is_told_the_stored_port_however_often_it_is_sent(api, leader):
    job = submit(api, resources={"gpu_count": 16})
    run_pass(epoch=leader)
    port = stored_port(job)
    assert port in MASTER_PORTS and port < 32768  # below the ephemeral range (32768-60999)
    assert told(job) == told(job) == {0: str(port), 1: str(port)}


def test_a_new_attempt_gets_a_new_port_chosen_again(api, one_node):
    job = one_gpu(api, "a")
    run_pass(epoch=one_node)
    first = stored_port(job)
    run_all_ranks(job)
    Task.objects.filter(job=job).update(stop_reason="PREEMPTED")
    run_all_ranks(Job.objects.get(pk=job.pk), exit_code=143)
    run_pass(epoch=one_node)
    task = Task.objects.get(job=job)
    assert (task.state, task.attempt) == ("ASSIGNED", 2)
    assert stored_port(job) == assignments.master_port(job.pk, 2) != first
    assert told(job) == {0: str(stored_port(job))}


def test_an_attempt_placed_before_ports_were_stored_keeps_its_port_and_holds_it(api, one_node):
    """A row from before the migration: its rank 0 was told the old formula's port, and is
    still told it; a new master on its node does not take it."""
    old = one_gpu(api, "old")
    run_pass(epoch=one_node)
    Job.objects.filter(pk=old.pk).update(master_port=None)
    assert told(old) == {0: str(legacy_master_port(old.pk, 1))}
    node_id = Task.objects.get(job=old).node_id
    new = one_gpu(api, "new")
    ports = MasterPorts({new.pk: node_id})
    assert ports.taken[node_id] == {legacy_master_port(old.pk, 1)}
    assert ports.attempt == {new.pk: 1}


def test_a_pass_reads_the_ports_in_use_once_however_many_it_places(api, one_node):
    """One read of the masters' nodes a pass, not one per placement."""

    def port_reads(count: int, prefix: str) -> list[str]:
        for n in range(count):
            one_gpu(api, f"{prefix}{n}")
        with CaptureQueriesContext(connection) as queries:
            assert run_pass(epoch=one_node).placed == count
        sql = [q["sql"] for q in queries.captured_queries]
        return [q for q in sql if 'FROM "scheduling_task"' in q and '"scheduling_job"."master_port"' in q]

    assert len(port_reads(1, "a")) == len(port_reads(6, "b")) == 1


# --- the ranks on one node -------------------------------------------------------------------------


def test_tasks_sharing_a_node_are_told_their_place_among_them(api, one_node):
    """LOCAL_RANK is 0 for every task (each has its own CUDA_VISIBLE_DEVICES): per-machine work
    goes by MLQ_LOCAL_TASK / MLQ_LOCAL_TASKS."""
    job = submit(api, resources={"gpu_count": 8, "gpus_per_task": 2})
    run_pass(epoch=one_node)
    tasks = Task.objects.filter(job=job).select_related("job", "job__owner", "job__parent").order_by("rank")
    envs = [assignment(task)["env"] for task in tasks]
    assert [(e["RANK"], e["LOCAL_RANK"], e["MLQ_LOCAL_TASK"], e["MLQ_LOCAL_TASKS"]) for e in envs] == [
        ("0", "0", "0", "4"),
        ("1", "0", "1", "4"),
        ("2", "0", "2", "4"),
        ("3", "0", "3", "4"),
    ]
    assert len({e["CUDA_VISIBLE_DEVICES"] for e in envs}) == 4


def test_a_gang_with_a_task_per_node_is_each_alone_on_its_node(api, leader):
    job = submit(api, resources={"gpu_count": 16})
    run_pass(epoch=leader)
    for task in Task.objects.filter(job=job):
        env = assignment_env(task, job=Job.objects.get(pk=job.pk), master_node="m")
        assert (env["MLQ_LOCAL_TASK"], env["MLQ_LOCAL_TASKS"], env["WORLD_SIZE"]) == ("0", "1", "2")


@pytest.fixture
def agents(leader, settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN
    clients = {name: agent(name, {**INVENTORY, "address": f"10.0.0.{n}"}) for n, name in ((1, "n1"), (2, "n2"))}
    for name, client in clients.items():
        beat(client, name)
    cordon(Node.objects.exclude(name__in=clients))
    return clients


def test_a_heartbeat_carrying_a_jobs_assignments_costs_no_query_per_task(api, agents, leader, monkeypatch):
    """Rank 0's address and the ranks sharing the node are read once per heartbeat (it read
    rank 0's row again for every other rank)."""
    cordon(["n2"])
    small = submit(api, client_job_id="small", resources={"gpu_count": 2, "gpus_per_task": 1})
    run_pass(epoch=leader)
    uncordon(["n2"])
    cordon(["n1"])
    large = submit(api, client_job_id="large", resources={"gpu_count": 8, "gpus_per_task": 1})
    run_pass(epoch=leader)

    monkeypatch.setattr(heartbeats, "EPOCH_CACHE_S", -1.0)  # read by every heartbeat, not by the first in a second
    counted = {}
    for name, job, tasks in (("n1", small, 2), ("n2", large, 8)):
        with CaptureQueriesContext(connection) as queries:
            sent = beat(agents[name], name)["assignments"]
        counted[name] = len(queries.captured_queries)
        assert [a["job_id"] for a in sent] == [job.pk] * tasks
        assert [a["env"]["MLQ_LOCAL_TASK"] for a in sent] == [str(rank) for rank in range(tasks)]
        assert {(a["env"]["MLQ_LOCAL_TASKS"], a["env"]["MASTER_ADDR"]) for a in sent} == {
            (str(tasks), f"10.0.0.{name[1]}")
        }
        assert {a["env"]["MASTER_PORT"] for a in sent} == {str(stored_port(job))}
    assert counted["n1"] == counted["n2"]


def test_mlqueue_sets_no_unprefixed_variable_a_spec_may_give(api, leader):
    """Every unprefixed name mlqueue sets is one a spec's env is refused (PER_TASK_ENV)."""
    job = submit(api, resources={"gpu_count": 8}, env={"SEED": "1"})
    run_pass(epoch=leader)
    env = assignment_env(Task.objects.get(job=job), job=Job.objects.get(pk=job.pk), master_node="m")
    assert {name for name in env if not name.startswith("MLQ_")} - {"SEED"} == set(PER_TASK_ENV)


# --- refused at submit -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", PER_TASK_ENV)
def test_a_submit_setting_a_per_task_variable_is_400_naming_it(api, name):
    response = api("alice").post("/api/v1/jobs", make_spec(env={"SEED": "1", name: "0"}), format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {f"env.{name}": [SET_PER_TASK.format(name=name)]}
    assert not Job.objects.exists()


def test_secret_env_and_a_batch_and_a_dry_run_are_refused_alike(api):
    message = SET_PER_TASK.format(name="MASTER_PORT")
    secret = api("alice").post("/api/v1/jobs", make_spec(secret_env={"MASTER_PORT": "1234"}), format="json")
    assert (secret.status_code, secret.json()["fields"]) == (400, {"secret_env.MASTER_PORT": [message]})
    specs = [make_spec(client_job_id="ok"), make_spec(client_job_id="bad", env={"MASTER_PORT": "1234"})]
    batch = api("alice").post("/api/v1/jobs/batch", {"jobs": specs}, format="json")
    assert (batch.status_code, batch.json()["fields"]) == (400, {"jobs[1].env.MASTER_PORT": [message]})
    dry = api("alice").post("/api/v1/jobs/dry-run", make_spec(env={"MASTER_PORT": "1234"}), format="json")
    assert (dry.status_code, dry.json()["fields"]) == (400, {"env.MASTER_PORT": [message]})
    assert not Job.objects.exists()


def test_the_submit_page_shows_the_refusal_on_the_env_box_and_writes_nothing(demo):
    alice = logged_in("alice")
    form = {**form_of(alice.get(URL)), "command": "python\n-m\ntrain"}
    before = counts()
    response = post(alice, form, "submit", env="SEED=1\nCUDA_VISIBLE_DEVICES=0")
    message = SET_PER_TASK.format(name="CUDA_VISIBLE_DEVICES")
    assert response.status_code == 200 and counts() == before
    assert inline_errors(response, "env") == escape(f"CUDA_VISIBLE_DEVICES: {message}")
