"""Task-user slots (scheduling/task_slots.py): the leader gives a job the lowest free slot at
its first placement, the job keeps it through requeues, and a job that is over frees it."""

import pytest

from agents.heartbeats import assignment
from scheduling import reports
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Task
from scheduling.task_slots import Slots
from teams.models import AuditEvent
from tests.integration.test_scheduler_pass import run_all_ranks, submit


def one_node_job(api, name: str) -> Job:
    return submit(api, client_job_id=name, resources={"gpu_count": 8, "gpus_per_task": 8})


def slots(*jobs: Job) -> list[int | None]:
    return [Job.objects.get(pk=job.pk).run_slot for job in jobs]


def test_slots_are_given_at_placement_kept_through_a_requeue_and_freed_when_a_job_is_over(api, leader):
    first, second, third = (one_node_job(api, name) for name in ("a", "b", "c"))
    assert slots(first, second, third) == [None, None, None]  # none before a placement
    run_pass(epoch=leader)
    assert sorted(slots(first, second, third)) == [0, 1, 2]
    task = Task.objects.select_related("job", "job__owner").get(job=first)
    assert assignment(task)["task_slot"] == slots(first)[0]  # what the agent runs the task as

    for job in (first, second, third):
        run_all_ranks(job)
    started = AuditEvent.objects.get(job=first, reason="STARTED")
    assert started.actor_name == f"agent:{task.node.name}"  # the node's name, as other agent entries (not its id)
    run_all_ranks(second, exit_code=0)
    freed = slots(second)[0]
    fourth = one_node_job(api, "d")
    run_pass(epoch=leader)
    assert slots(fourth) == [freed]  # the lowest free: the one the job that succeeded held

    kept = slots(first)[0]
    response = api("alice").post(f"/api/v1/jobs/{first.pk}/requeue", {"reason": "move it"}, format="json")
    assert response.status_code == 200, response.json()
    for task in first.tasks.all():
        reports.do_report_exited(job_id=first.pk, rank=task.rank, attempt=task.attempt, exit_code=143)
    run_pass(epoch=leader)  # requeued
    run_pass(epoch=leader)  # placed again
    first.refresh_from_db()
    assert set(first.tasks.values_list("attempt", flat=True)) == {2}
    assert slots(first) == [kept]  # the new attempt runs as the same user: it reads its checkpoints


def test_a_job_back_from_over_whose_slot_went_to_another_gets_a_new_one(api, leader):
    done, running = one_node_job(api, "done"), one_node_job(api, "running")
    Job.objects.filter(pk=done.pk).update(state="SUCCEEDED", run_slot=0)
    Job.objects.filter(pk=running.pk).update(state="RUNNING", run_slot=0)  # slot 0 went on after it was over
    Job.objects.filter(pk=done.pk).update(state="PENDING")  # and it came back (a retry)
    held = Slots()
    assert held.slot_for(running.pk) == 0  # the one with tasks on nodes keeps it
    assert held.slot_for(done.pk) == 1
    assert held.slot_for(done.pk) == 1 and held.slot_for(running.pk) == 0  # asked again: the same


@pytest.mark.parametrize(
    ("cause", "reason", "said"),
    [
        ("no_task_user", "NO_TASK_USER", "its node agent had no user to run it as"),
        ("no_container_runtime", "NO_CONTAINER_RUNTIME", "it names an image and its node has no container runtime"),
    ],
)
def test_no_user_or_no_runtime_for_a_task_is_the_nodes_failure_not_the_jobs(api, leader, cause, reason, said):
    job = one_node_job(api, f"no-{cause[3:7]}")
    run_pass(epoch=leader)
    task = job.tasks.get()
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=127, cause=cause) == "FAILED"
    task.refresh_from_db()
    assert task.failure_class == "INFRA"
    ended = AuditEvent.objects.get(job=job, reason=reason)
    assert said in ended.message
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.retries_used, job.restarts_used) == (0, 1)  # a restart, not a retry (and placed again)
    requeued = AuditEvent.objects.get(job=job, to_state="PENDING", kind="TRANSITION")
    assert requeued.from_state == "FAILED"  # the state its tasks were in, not every state allowed
    # The verdict names the cause (it said "lost to an infrastructure failure" alone), and the
    # next attempt starts without it.
    assert requeued.message.startswith(f"lost to an infrastructure failure (rank 0 was not started: {said}); restart 1")
    task.refresh_from_db()
    assert (task.state, task.exit_cause) == ("ASSIGNED", "")
