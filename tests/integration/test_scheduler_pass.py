"""The leader's pass on the real store: placements, reasons, preemption grace, retries,
cancels, timeouts, dependencies, and fencing by epoch."""

from datetime import UTC, timedelta

import pytest
from django.utils import timezone

from mlqueue.celery import app as celery_app
from scheduling import lifecycle, reports
from scheduling.fencing import Deposed
from scheduling.leader.reconcile import restart_policy
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Signal, Task
from scheduling.services import do_cancel_job
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.conftest import EPOCH
from tests.nodes import cordon, uncordon


def submit(api, user="alice", **overrides):
    response = api(user).post("/api/v1/jobs", make_spec(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def run_all_ranks(job: Job, *, exit_code: int | None = None, now=None) -> None:
    """What the job's agents would report: every rank starts; with an exit code, every rank exits."""
    for task in job.tasks.order_by("rank"):
        reports.do_report_started(job_id=job.pk, rank=task.rank, attempt=task.attempt, now=now)
        if exit_code is not None:
            reports.do_report_exited(job_id=job.pk, rank=task.rank, attempt=task.attempt, exit_code=exit_code, now=now)


def test_a_pass_places_a_gang_fenced_by_the_epoch(api, leader):
    job = submit(api)
    report = run_pass(epoch=leader)

    assert report.placed == 1
    tasks = list(job.tasks.order_by("rank").select_related("node"))
    assert {t.state for t in tasks} == {"ASSIGNED"}
    assert {t.epoch for t in tasks} == {EPOCH} and {t.attempt for t in tasks} == {1}
    assert {t.node.rack for t in tasks} == {"z1-r1"}  # prefer_same_rack: one rack of 8 H100 nodes
    assert all(t.gpu_indices == list(range(8)) for t in tasks)
    placed = AuditEvent.objects.get(job=job, reason="PLACED")
    assert placed.actor_name == "scheduler" and placed.data["epoch"] == EPOCH
    lease = SchedulerLease.objects.get()
    assert lease.last_pass_ms > 0 and lease.last_pass_at is not None


def test_a_job_submitted_as_the_pass_began_is_never_placed_before_its_submit(api, leader):
    """A submit that took its time after the pass took its clock, and committed before the
    store was read, was placed "before" it was submitted: a negative queue wait, and the
    placement first on its timeline (found by QA)."""
    job = submit(api)
    later = timezone.now() + timedelta(seconds=2)
    Job.objects.filter(pk=job.pk).update(submitted_at=later)
    run_pass(epoch=leader)
    assert {t.assigned_at for t in job.tasks.all()} == {later}
    assert AuditEvent.objects.get(job=job, reason="PLACED").created_at == later


def test_a_deposed_epoch_writes_nothing(api, leader):
    job = submit(api)
    with pytest.raises(Deposed):
        run_pass(epoch=leader - 1)
    assert set(job.tasks.values_list("state", flat=True)) == {"PENDING"}
    assert not AuditEvent.objects.filter(job=job, reason="PLACED").exists()


def test_waiting_jobs_get_their_reason_saved(api, leader):
    cordon(Node.objects.filter(gpu_type="H100").exclude(name__startswith="z1-r1-h100-0"))
    job = submit(api)  # 64 H100; 9 nodes stay ready: 01..09 of z1-r1? only 01..08 exist, minus 08
    cordon("z1-r1-h100-08")
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert job.pending_reason_code == "INSUFFICIENT_CAPACITY"
    assert job.pending_reason_message == (
        "needs 64 H100; 56 of 56 free (7/36 nodes fit a task: 20 other resource class, 9 CORDONED)"
    )
    body = api("alice").get(f"/api/v1/jobs/{job.pk}").json()
    assert body["pending_reason"] == {"code": job.pending_reason_code, "message": job.pending_reason_message}


def test_the_node_histogram_is_stored_with_the_reason_only_when_it_changed(api, leader):
    cordon(Node.objects.filter(gpu_type="H100"))
    job = submit(api, resources={"gpu_count": 8})
    held = submit(api, resources={"gpu_count": 8}, client_job_id="held")
    Job.objects.filter(pk=held.pk).update(held=True)
    run_pass(epoch=leader)
    job.refresh_from_db()
    held.refresh_from_db()
    assert job.pending_reason_code == "NO_MATCHING_NODES"
    assert job.pending_histogram == {"histogram": [["other resource class", 20], ["CORDONED", 16]], "fit": "0/36"}
    assert (held.pending_reason_code, held.pending_histogram) == ("HELD", {})  # not about room: no count

    assert run_pass(epoch=leader).applied.reasons_written == 0  # unchanged: not written again
    uncordon("z1-r1-h100-01")
    assert run_pass(epoch=leader).placed == 1
    job.refresh_from_db()
    assert (job.state, job.pending_reason_code, job.pending_histogram) == ("ASSIGNED", "", {})


def test_preempted_gang_gets_term_then_kill_even_with_its_celery_message_lost(clock, api, leader):
    cordon(Node.objects.exclude(rack="z1-r1"))  # one rack of 8 nodes
    victim = submit(
        api, user="bob", team="production-ranking", priority="P3", client_job_id="victim", grace_period_seconds=60
    )
    run_pass(epoch=leader)
    run_all_ranks(victim)
    clock.shift(timedelta(hours=1))  # the victim has run long enough to be preempted
    urgent = submit(api, user="rita", priority="P0", client_job_id="urgent")

    run_pass(epoch=leader)
    stopping = list(victim.tasks.values_list("stop_reason", "stop_signal", "preempted_for", "kill_at"))
    assert {s[:3] for s in stopping} == {("PREEMPTED", Signal.TERM, urgent.pk)}
    assert {s[3] for s in stopping} == {timezone.now() + timedelta(seconds=60)}
    urgent.refresh_from_db()
    assert urgent.pending_reason_code == "PREEMPTING"

    celery_app.control.purge()  # the fast path is lost: the sweep must still kill on time
    clock.shift(timedelta(seconds=30))
    run_pass(epoch=leader)
    assert set(victim.tasks.values_list("stop_signal", flat=True)) == {Signal.TERM}
    # While it waits, its reason says when its victims' stop is forced (their kill_at).
    urgent.refresh_from_db()
    kill_at = (timezone.now() + timedelta(seconds=30)).astimezone(UTC)
    assert urgent.pending_reason_message.endswith(f"(SIGKILL at {kill_at:%H:%M:%S} UTC if not sooner)")
    clock.shift(timedelta(seconds=31))
    run_pass(epoch=leader)
    assert set(victim.tasks.values_list("stop_signal", flat=True)) == {Signal.KILL}


def test_preempted_gang_is_requeued_whole_and_resumes_with_a_new_attempt(clock, api, leader):
    cordon(Node.objects.exclude(rack="z1-r1"))
    victim = submit(api, user="bob", team="production-ranking", priority="P3", client_job_id="victim")
    run_pass(epoch=leader)
    run_all_ranks(victim)
    clock.shift(timedelta(hours=1))  # the victim has run long enough to be preempted
    urgent = submit(api, user="rita", priority="P0", client_job_id="urgent", resources={"gpu_count": 8})
    run_pass(epoch=leader)

    # One rank exits on SIGTERM: the gang is not requeued until every rank has stopped.
    first = victim.tasks.get(rank=0)
    assert reports.do_report_exited(job_id=victim.pk, rank=0, attempt=first.attempt, exit_code=143) == "PREEMPTED"
    run_pass(epoch=leader)
    assert victim.tasks.filter(state="RUNNING").count() == 7
    for task in victim.tasks.exclude(rank=0):
        reports.do_report_exited(
            job_id=victim.pk, rank=task.rank, attempt=task.attempt, exit_code=None, signal="SIGTERM"
        )
    run_pass(epoch=leader)  # requeue the gang; the urgent job takes a node

    victim.refresh_from_db()
    assert (victim.preemptions, victim.restarts_used, victim.retries_used) == (1, 0, 0)
    assert set(victim.tasks.values_list("state", flat=True)) == {"PENDING"}
    assert set(urgent.tasks.values_list("state", flat=True)) == {"ASSIGNED"}
    retry = AuditEvent.objects.get(job=victim, kind="RETRY")
    assert retry.message == (
        "preempted; requeued, resuming from its last checkpoint, if any (preemption 1; restarts and retries not spent)"
    )
    reports.do_report_exited(job_id=urgent.pk, rank=0, attempt=1, exit_code=0)  # frees the node
    run_pass(epoch=leader)
    assert set(victim.tasks.values_list("state", "attempt")) == {("ASSIGNED", 2)}


def test_app_failures_back_off_and_stop_at_max_retries(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_retries": 2})
    now = timezone.now()
    for retry in range(3):
        run_pass(epoch=leader, now=now)
        job.refresh_from_db()
        assert set(job.tasks.values_list("attempt", flat=True)) == {retry + 1}
        run_all_ranks(job, exit_code=3, now=now)
        run_pass(epoch=leader, now=now)
        job.refresh_from_db()
        if retry < 2:
            assert job.retries_used == retry + 1 and job.state == "PENDING"
            assert job.not_before == now + timedelta(seconds=restart_policy(job).backoff_s(retry))
            run_pass(epoch=leader, now=now + timedelta(seconds=1))
            assert job.tasks.get().state == "PENDING"  # still backing off
            assert Job.objects.get(pk=job.pk).pending_reason_code == "BACKOFF"
            now = job.not_before + timedelta(seconds=1)
    assert (job.state, job.failure_class, job.retries_used, job.restarts_used) == ("FAILED", "APP", 2, 0)
    assert AuditEvent.objects.filter(job=job, kind="TRANSITION", reason="APP").last().message == (
        "rank 0 failed (exit code 3); no retries left (2 allowed)"
    )


def test_a_failed_rank_stops_its_gang_and_the_gang_retries_whole(api, leader):
    job = submit(api, resources={"gpu_count": 16})
    run_pass(epoch=leader)
    run_all_ranks(job)
    reports.do_report_exited(job_id=job.pk, rank=1, attempt=1, exit_code=1)
    peer = job.tasks.get(rank=0)
    assert (peer.state, peer.stop_reason, peer.stop_signal) == ("RUNNING", "PEER_FAILED", Signal.TERM)
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=None, signal="SIGTERM")
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.retries_used, job.restarts_used) == ("PENDING", 1, 0)


def test_infra_failures_do_not_spend_retries(api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_retries": 0, "max_restarts": 3})
    run_pass(epoch=leader)
    for restart in range(4):
        run_all_ranks(job)
        task = job.tasks.get()  # its node is lost (scheduling/leader/failures.py fails its tasks so)
        lifecycle.transition_task(
            task,
            to_state="FAILED",
            attempt=task.attempt,
            actor_name="scheduler",
            reason="NODE_LOST",
            message="node lost",
            failure_class="INFRA",
        )
        run_pass(epoch=leader)  # requeued, and placed again at once on the idle cluster
        job.refresh_from_db()
        if restart < 3:
            assert (job.restarts_used, job.retries_used, job.state) == (restart + 1, 0, "ASSIGNED")
            assert job.tasks.get().attempt == restart + 2
    assert (job.state, job.failure_class, job.restarts_used) == ("FAILED", "INFRA", 3)


def test_cancel_of_a_running_job_stops_it_then_it_ends_cancelled(api, leader, user):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    run_all_ranks(job)
    do_cancel_job(job=job, user=user("alice"), reason="wrong config")
    run_pass(epoch=leader)
    task = job.tasks.get()
    assert (task.stop_reason, task.stop_signal) == ("CANCELLED", Signal.TERM)
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=None, signal="SIGTERM")
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class) == ("CANCELLED", "CANCELLED")


def test_a_job_past_its_max_runtime_is_stopped_and_fails_as_timeout(clock, api, leader):
    job = submit(api, resources={"gpu_count": 8}, max_runtime_hours=1)
    run_pass(epoch=leader)
    run_all_ranks(job)
    clock.shift(timedelta(hours=1, minutes=1))
    run_pass(epoch=leader)
    assert job.tasks.get().stop_reason == "TIMEOUT"
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=None, signal="SIGKILL")
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class) == ("FAILED", "TIMEOUT")


def test_dependencies_wait_then_are_cancelled_with_their_reason(api, leader):
    first = submit(api, resources={"gpu_count": 8}, client_job_id="prep", restart_policy={"max_retries": 0})
    second = submit(api, resources={"gpu_count": 8}, client_job_id="train", depends_on=[first.pk])
    run_pass(epoch=leader)
    second.refresh_from_db()
    assert (second.state, second.pending_reason_code) == ("PENDING", "DEPENDENCY")
    assert second.pending_reason_message == f"waiting for job {first.pk} to succeed"
    run_all_ranks(first, exit_code=2)
    run_pass(epoch=leader)
    run_pass(epoch=leader)
    second.refresh_from_db()
    assert (second.state, second.failure_class) == ("CANCELLED", "DEPENDENCY")
    assert AuditEvent.objects.get(job=second, reason="DEPENDENCY").message == (
        f"dependency {first.pk} ended FAILED; this job ran only on its success"
    )
    ended = api("alice").get(f"/api/v1/jobs/{second.pk}/why").json()["ended"]  # what `mlq why` prints
    assert (ended["state"], ended["by"], ended["reason"], ended["message"]) == (
        "CANCELLED",
        "scheduler",
        "DEPENDENCY",
        f"dependency {first.pk} ended FAILED; this job ran only on its success",
    )


def test_a_dependency_that_succeeds_releases_the_job(api, leader):
    first = submit(api, resources={"gpu_count": 8}, client_job_id="prep")
    second = submit(api, resources={"gpu_count": 8}, client_job_id="train", depends_on=[first.pk])
    run_pass(epoch=leader)
    run_all_ranks(first, exit_code=0)
    run_pass(epoch=leader)
    assert set(second.tasks.values_list("state", flat=True)) == {"ASSIGNED"}


def test_reports_about_an_old_attempt_change_nothing(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=99, exit_code=0) is None
    assert job.tasks.get().state == "ASSIGNED"


def test_scheduler_endpoint_shows_the_leader(api, leader):
    run_pass(epoch=leader)
    body = api("victor").get("/api/v1/scheduler").json()
    assert (body["leader"], body["epoch"], body["leading"]) == ("test:1", EPOCH, True)
    assert body["last_pass_ms"] > 0


def test_a_late_report_about_an_old_attempt_cannot_end_the_new_one(clock, api, leader):
    job = submit(api, resources={"gpu_count": 8}, restart_policy={"max_retries": 1})
    run_pass(epoch=leader)
    run_all_ranks(job, exit_code=1)
    run_pass(epoch=leader)  # requeued with a back-off
    clock.shift(timedelta(minutes=5))
    run_pass(epoch=leader)  # placed after it
    run_all_ranks(job)
    task = job.tasks.get()
    assert (task.state, task.attempt) == ("RUNNING", 2)
    # A duplicate of attempt 1's exit report, read before the retry and applied after it:
    assert lifecycle.transition_task(task, to_state="FAILED", attempt=1, failure_class="APP") is False
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=1) is None
    assert job.tasks.get().state == "RUNNING"


def test_a_cancel_that_lands_before_the_requeue_wins(api, leader, user):
    job = submit(api, resources={"gpu_count": 16})
    run_pass(epoch=leader)
    run_all_ranks(job)
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=0)
    Task.objects.filter(job=job, rank=1).update(stop_reason="PREEMPTED")
    reports.do_report_exited(job_id=job.pk, rank=1, attempt=1, exit_code=143)
    response = api("alice").post(f"/api/v1/jobs/{job.pk}/cancel", {"reason": "not needed"}, format="json")
    assert response.status_code == 200
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class) == ("CANCELLED", "CANCELLED")
    assert not job.tasks.filter(state="PENDING").exists()


def test_a_failed_attempt_awaiting_its_retry_can_be_cancelled(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    run_all_ranks(job, exit_code=1)
    job.refresh_from_db()
    assert (job.state, job.failure_class) == ("FAILED", "")
    assert api("alice").post(f"/api/v1/jobs/{job.pk}/cancel", format="json").status_code == 200
    run_pass(epoch=leader)
    job.refresh_from_db()
    assert (job.state, job.failure_class, job.retries_used) == ("CANCELLED", "CANCELLED", 0)


def test_max_runtime_counts_from_the_current_attempt(api, leader):
    job = submit(api, resources={"gpu_count": 8}, max_runtime_hours=1)
    start = timezone.now()
    run_pass(epoch=leader, now=start)
    run_all_ranks(job, now=start)
    Task.objects.filter(job=job).update(stop_reason="PREEMPTED")
    later = start + timedelta(minutes=50)
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=1, exit_code=143, now=later)
    run_pass(epoch=leader, now=later)  # requeued and placed again: attempt 2
    run_all_ranks(job, now=later)
    run_pass(epoch=leader, now=later + timedelta(minutes=30))  # 80 min after the first start
    assert job.tasks.get().stop_reason == ""
    run_pass(epoch=leader, now=later + timedelta(minutes=61))
    assert job.tasks.get().stop_reason == "TIMEOUT"


def test_a_new_leader_adopts_unstarted_assignments(api, leader):
    job = submit(api, resources={"gpu_count": 8})
    run_pass(epoch=leader)
    SchedulerLease.objects.filter(pk=1).update(epoch=leader + 1)
    run_pass(epoch=leader + 1)
    assert job.tasks.get().epoch == leader + 1


def test_the_node_a_preemptor_freed_is_kept_for_it_once_its_victim_has_stopped(clock, api, leader):
    """Its nomination is stored with its reason. In the pass after its victim stopped, a job
    ahead of it in the queue (here one waiting past the bound) does not take the freed node,
    so it need not evict again; once placed, its nomination is gone."""
    node = Node.objects.filter(rack="z1-r1").order_by("name").first()
    cordon(Node.objects.exclude(pk=node.pk))
    victim = submit(
        api, user="bob", team="production-ranking", priority="P3", client_job_id="victim", resources={"gpu_count": 8}
    )
    run_pass(epoch=leader)
    run_all_ranks(victim)
    clock.shift(timedelta(hours=1))  # the victim has run long enough to be preempted
    urgent = submit(api, user="rita", priority="P0", client_job_id="urgent", resources={"gpu_count": 8})
    run_pass(epoch=leader)
    urgent.refresh_from_db()
    assert (urgent.pending_reason_code, urgent.nominated_nodes) == ("PREEMPTING", [node.name])

    overdue = submit(api, user="rita", priority="P0", client_job_id="overdue", resources={"gpu_count": 8})
    Job.objects.filter(pk=overdue.pk).update(submitted_at=timezone.now() - timedelta(hours=3))
    task = victim.tasks.get()
    reports.do_report_exited(job_id=victim.pk, rank=0, attempt=task.attempt, exit_code=143)
    run_pass(epoch=leader)

    assert set(urgent.tasks.values_list("state", "node__name")) == {("ASSIGNED", node.name)}
    urgent.refresh_from_db()
    overdue.refresh_from_db()
    assert urgent.nominated_nodes == [] and overdue.nominated_nodes == []
    assert overdue.state == "PENDING" and not Task.objects.filter(job=victim, state="ASSIGNED").exists()
