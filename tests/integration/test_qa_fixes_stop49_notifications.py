"""QA stop 49, notifications and how a job's end is told: a job whose restart policy fails it on
a preemption was told `preempted` ("it goes back to the queue"), then `failed`; a trial stopped
early was told only "rank 0 ended (signal SIGTERM)", the rule's words kept in its timeline (the
notification and `why` alike); a group's cancel said "5 elements: 5 cancelled", not who cancelled
it or why; a slow receiver that had the request read "could not reach" (tests/unit/
test_webhook_send_safety.py)."""

import pytest
from django.utils import timezone

from notifications.models import Delivery
from scheduling import reports
from scheduling.leader.reconcile import do_settle
from scheduling.leader.worker import run_pass
from scheduling.models import Job
from tests.integration.test_early_stopping import (
    WHY,
    children,
    sweep,  # noqa: F401 (the fixture)
)
from tests.integration.test_notifications import (  # noqa: F401 (receiver and webhooks_to_localhost: fixtures)
    _drain,
    _requeue,
    receiver,
    start,
    submit,
    webhooks_to_localhost,
)

pytestmark = pytest.mark.django_db


def told(job: Job) -> list[tuple[str, str, str]]:
    return [
        (d.event, d.payload["reason"]["code"], d.payload["reason"]["message"])
        for d in Delivery.objects.filter(job_ref=job.pk).order_by("id")
    ]


def test_a_preemption_that_fails_the_job_is_told_as_failed_alone(api, leader, receiver):  # noqa: F811
    job = submit(
        api, notify={"on": ["preempted", "failed"], "webhook": receiver.url}, restart_policy={"on_preemption": "fail"}
    )
    start(job)
    _drain(job, job, epoch=leader)
    task = job.tasks.get()
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=task.attempt, exit_code=None, signal="SIGTERM")
    assert told(job) == []  # PREEMPTED for now, but it does not go back to the queue
    do_settle(job.pk, epoch=leader, now=timezone.now())
    assert Job.objects.get(pk=job.pk).state == "FAILED"
    assert told(job) == [("failed", "INFRA", "drained off its node, and its restart policy says fail")]


def test_the_owners_requeue_of_such_a_job_is_told_it_goes_back_to_the_queue(api, leader, receiver):  # noqa: F811
    job = submit(api, notify={"on": ["preempted"], "webhook": receiver.url}, restart_policy={"on_preemption": "fail"})
    start(job)
    _requeue(job, job, epoch=leader)
    task = job.tasks.get()
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=task.attempt, exit_code=None, signal="SIGTERM")
    assert [event for event, _, _ in told(job)] == ["preempted"]  # a user's requeue requeues whatever the policy


def test_a_trial_stopped_early_is_told_in_its_rules_words(api, leader, sweep, receiver):  # noqa: F811
    notify = {"on": ["early_stopped"], "webhook": receiver.url, "email": False}
    Job.objects.filter(pk=sweep.pk).update(notify=notify)
    run_pass(epoch=leader)
    worse = children(sweep)[1]
    task = worse.tasks.get()
    assert reports.do_report_exited(job_id=worse.pk, rank=0, attempt=task.attempt, exit_code=143)
    ((event, code, message),) = told(sweep)
    assert (event, code) == ("early_stopped", "EARLY_STOPPED")
    assert message.startswith(WHY + "; rank 0 ended"), message
    ended = api("alice").get(f"/api/v1/jobs/{worse.pk}/why").json()["ended"]
    assert (ended["state"], ended["reason"], ended["message"], ended["by"]) == (
        "EARLY_STOPPED",
        "EARLY_STOPPED",
        WHY,
        "scheduler",
    )


def test_a_groups_cancel_says_who_cancelled_it_and_why(api, receiver):  # noqa: F811
    parent = submit(api, array={"count": 3}, notify={"on": ["cancelled"], "webhook": receiver.url})
    cancel = api("alice").post(f"/api/v1/jobs/{parent.pk}/cancel", {"reason": "array bye"}, format="json")
    assert cancel.status_code in (200, 202), cancel.json()
    ((event, code, message),) = told(parent)
    assert (event, code) == ("cancelled", "CANCELLED")
    assert message.startswith("array bye; 3 elements: ") and "3 cancelled" in message, message


def test_a_job_cancelled_while_a_drain_stops_it_is_told_cancelled_alone(api, leader, receiver):  # noqa: F811
    """A review: settle's first rule (the user's cancel) beats the requeue of a stop to make room."""
    job = submit(api, notify={"on": ["preempted", "cancelled"], "webhook": receiver.url})
    start(job)
    _drain(job, job, epoch=leader)
    assert api("alice").post(f"/api/v1/jobs/{job.pk}/cancel", {"reason": "enough"}, format="json").status_code in (
        200,
        202,
    )
    task = job.tasks.get()
    reports.do_report_exited(job_id=job.pk, rank=0, attempt=task.attempt, exit_code=None, signal="SIGTERM")
    do_settle(job.pk, epoch=leader, now=timezone.now())
    assert Job.objects.get(pk=job.pk).state == "CANCELLED"
    assert told(job) == [("cancelled", "CANCELLED", "enough")]
