"""The environment a task starts with: its attempt, where to resume from, and its gang."""

from django.utils import timezone

from scheduling import reports
from scheduling.assignments import assignment_env, master_port
from scheduling.leader.worker import run_pass
from scheduling.models import Job, SchedulerLease, Task
from tests.conftest import make_spec
from tests.nodes import heartbeat


def test_a_restarted_gang_rank_is_told_its_attempt_and_checkpoint(api, demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now())
    heartbeat()
    job_id = (
        api("alice")
        .post("/api/v1/jobs", make_spec(resources={"gpu_count": 16}, env={"SEED": "1"}), format="json")
        .json()["id"]
    )
    run_pass(epoch=4)
    for task in Task.objects.filter(job_id=job_id):
        reports.do_report_started(job_id=job_id, rank=task.rank, attempt=1)
    Task.objects.filter(job_id=job_id).update(stop_reason="PREEMPTED")
    for rank in (0, 1):
        reports.do_report_exited(job_id=job_id, rank=rank, attempt=1, exit_code=143)
    run_pass(epoch=4)  # requeued whole and placed again

    job = Job.objects.get(pk=job_id)
    rank1 = job.tasks.get(rank=1)
    env = assignment_env(rank1, job=job, master_node=job.tasks.get(rank=0).node.name)
    assert {
        k: env[k]
        for k in (
            "MLQ_ATTEMPT",
            "MLQ_RESTART_COUNT",
            "MLQ_RESUME",
            "MLQ_CHECKPOINT_DIR",
            "MLQ_EPOCH",
            "WORLD_SIZE",
            "RANK",
            "SEED",
        )
    } == {
        "MLQ_ATTEMPT": "2",
        "MLQ_RESTART_COUNT": "1",
        "MLQ_RESUME": "1",
        "MLQ_CHECKPOINT_DIR": "s3://ckpt/llama-70b/run-47",
        "MLQ_EPOCH": "4",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "SEED": "1",
    }
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["MASTER_PORT"] == str(master_port(job_id, 2)) != str(master_port(job_id, 1))


def test_job_id_in_the_checkpoint_path_gives_each_submit_a_directory_of_its_own(api, demo):
    """The example's fixed path made every later submit of it resume the first run's state."""
    spec = {"checkpoint": {"path": "/tmp/ckpt/run-{job_id}"}, "resources": {"gpu_count": 8}}
    ids = [
        api("alice").post("/api/v1/jobs", make_spec(client_job_id=f"ck-{n}", **spec), format="json").json()["id"]
        for n in (1, 2)
    ]
    SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now())
    heartbeat()
    run_pass(epoch=4)
    for job_id in ids:
        job = Job.objects.get(pk=job_id)
        env = assignment_env(job.tasks.get(rank=0), job=job, master_node=job.tasks.get(rank=0).node.name)
        assert env["MLQ_CHECKPOINT_DIR"] == f"/tmp/ckpt/run-{job_id}"


def test_an_attempt_requeued_from_the_start_is_not_told_to_resume(api, demo):
    """QA: a user's requeue under on_preemption: restart said 'from the start' while the next
    attempt had MLQ_RESUME=1 (on_node_failure's default, resume, decided). MLQ_RESUME follows the
    requeue's own verdict."""
    SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now())
    heartbeat()
    spec = make_spec(resources={"gpu_count": 8}, restart_policy={"on_preemption": "restart"})
    job_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    run_pass(epoch=4)
    reports.do_report_started(job_id=job_id, rank=0, attempt=1)
    assert api("alice").post(f"/api/v1/jobs/{job_id}/requeue", {}, format="json").status_code == 200
    reports.do_report_exited(job_id=job_id, rank=0, attempt=1, exit_code=143)
    run_pass(epoch=4)  # requeued from the start, placed again
    job = Job.objects.get(pk=job_id)
    task = job.tasks.get()
    assert task.attempt == 2
    assert assignment_env(task, job=job, master_node=task.node.name)["MLQ_RESUME"] == "0"


def test_a_job_without_a_checkpoint_block_gets_no_checkpoint_variables(api, demo):
    """QA: they were set to empty strings, so os.environ.get(name, default) returned '' (an
    int() of it raised; an empty directory read as the working directory)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now())
    heartbeat()
    job_id = api("alice").post("/api/v1/jobs", make_spec(checkpoint=None), format="json").json()["id"]
    run_pass(epoch=4)
    job = Job.objects.get(pk=job_id)
    task = job.tasks.get(rank=0)
    env = assignment_env(task, job=job, master_node=task.node.name)
    assert not {"MLQ_CHECKPOINT_DIR", "MLQ_CHECKPOINT_INTERVAL_S", "MLQ_CHECKPOINT_RETAIN_LAST_N"} & set(env)
    assert env["MLQ_RESUME"] == "0"
