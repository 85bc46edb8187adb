"""Transitions on the real store: conditional updates, gangs all-or-nothing, epoch fencing, races."""

import threading

import pytest
from django.db import connection

from scheduling import lifecycle
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.models import TaskState as S
from teams.models import AuditEvent
from tests.conftest import make_spec


@pytest.fixture
def job(api) -> Job:
    body = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()
    return Job.objects.get(pk=body["id"])


def assignment(job: Job) -> dict[int, dict]:
    nodes = list(Node.objects.filter(gpu_type="H100", rack="z1-r1").order_by("name"))
    return {rank: {"node": nodes[rank], "gpu_indices": list(range(8))} for rank in range(job.task_count)}


def states(job: Job) -> set[str]:
    return set(job.tasks.values_list("state", flat=True))


def test_gang_moves_together_and_the_job_follows(job):
    moved = lifecycle.transition_gang(
        job.pk,
        from_state=S.PENDING,
        to_state=S.ASSIGNED,
        per_rank=assignment(job),
        epoch=0,
        actor_name="scheduler",
        reason="PLACED",
        message="z1-r1",
    )
    assert moved == 8
    job.refresh_from_db()
    assert job.state == S.ASSIGNED
    assert set(job.tasks.values_list("attempt", flat=True)) == {1}
    assert list(job.tasks.order_by("rank").values_list("node__name", flat=True)) == [
        f"z1-r1-h100-{i:02d}" for i in range(1, 9)
    ]
    event = job.events.get(kind="TRANSITION")
    assert (event.from_state, event.to_state, event.data) == (S.PENDING, S.ASSIGNED, {"tasks": 8})


def test_gang_with_one_task_elsewhere_does_not_move(job):
    lifecycle.transition_task(job.tasks.get(rank=3), to_state=S.CANCELLED)
    events_before = AuditEvent.objects.count()

    moved = lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank=assignment(job))

    assert moved == 0
    assert sorted(job.tasks.values_list("state", flat=True)) == [S.CANCELLED] + [S.PENDING] * 7
    assert not job.tasks.exclude(node=None).exists()
    assert AuditEvent.objects.count() == events_before


def test_a_stale_epoch_writes_nothing(job):
    SchedulerLease.objects.filter(pk=1).update(epoch=5)
    assert (
        lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, epoch=4, per_rank=assignment(job))
        == 0
    )
    assert states(job) == {S.PENDING}
    assert (
        lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, epoch=5, per_rank=assignment(job))
        == 8
    )


def test_illegal_transition_raises_before_touching_the_store(job):
    with pytest.raises(lifecycle.IllegalTransition):
        lifecycle.transition_task(job.tasks.get(rank=0), to_state=S.SUCCEEDED)
    assert states(job) == {S.PENDING}


def test_preempted_gang_requeues_as_a_new_attempt(job):
    lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank=assignment(job))
    lifecycle.transition_gang(job.pk, from_state=S.ASSIGNED, to_state=S.RUNNING)
    lifecycle.transition_gang(job.pk, from_state=S.RUNNING, to_state=S.PREEMPTED, failure_class="INFRA")
    job.refresh_from_db()
    assert job.state == S.PREEMPTED and job.started_at is not None

    lifecycle.transition_gang(job.pk, from_state=S.PREEMPTED, to_state=S.PENDING, reason="REQUEUED")
    task = job.tasks.get(rank=0)
    assert (task.state, task.node, task.gpu_indices, task.attempt) == (S.PENDING, None, [], 1)
    lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank=assignment(job))
    assert set(job.tasks.values_list("attempt", flat=True)) == {2}


def test_exit_codes_end_the_job(job):
    lifecycle.transition_gang(job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank=assignment(job))
    lifecycle.transition_gang(job.pk, from_state=S.ASSIGNED, to_state=S.RUNNING)
    for task in job.tasks.order_by("rank"):
        lifecycle.transition_task(task, to_state=S.SUCCEEDED, exit_code=0)
        job.refresh_from_db()
        assert job.state == (S.SUCCEEDED if task.rank == 7 else S.RUNNING)
    assert job.finished_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(5))
def test_two_racing_transitions_exactly_one_wins(api, round_):
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    task = Task.objects.get(job_id=job_id)
    node = Node.objects.filter(gpu_type="H100").first()
    barrier = threading.Barrier(2)
    results = {}

    def race(name, to_state, fields):
        try:
            barrier.wait()
            results[name] = lifecycle.transition_task(task, from_state=S.PENDING, to_state=to_state, **fields)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=race, args=("assign", S.ASSIGNED, {"node": node, "gpu_indices": [0]})),
        threading.Thread(target=race, args=("cancel", S.CANCELLED, {})),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(results.values()) == [False, True]
    winner = next(name for name, won in results.items() if won)
    task.refresh_from_db()
    assert task.state == {"assign": S.ASSIGNED, "cancel": S.CANCELLED}[winner]
    assert AuditEvent.objects.filter(job_id=job_id, kind="TRANSITION").count() == 1


@pytest.mark.django_db(transaction=True)
def test_racing_conditional_updates_see_zero_rows_on_postgres(api):
    """The primitive itself, without the job lock: the loser's UPDATE matches 0 rows."""
    assert connection.vendor == "postgresql"
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    task_id = Task.objects.get(job_id=job_id).pk
    barrier = threading.Barrier(2)
    rows = []

    def update(to_state):
        try:
            barrier.wait()
            rows.append(Task.objects.filter(pk=task_id, state=S.PENDING).update(state=to_state))
        finally:
            connection.close()

    threads = [threading.Thread(target=update, args=(s,)) for s in (S.ASSIGNED, S.CANCELLED)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(rows) == [0, 1]
