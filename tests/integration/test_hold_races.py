"""What a walkthrough found racing hold, release, requeue and cancel (stop 48):
- a cancel and a requeue at once both answered 200, and the job's stop said REQUEUED while it
  was being cancelled (a requeue then a cancel said so too);
- an array held with one element held by itself: releasing that element's own hold let it run
  while its array said "held"; releasing the array released an element's own hold when its
  holder and reason were the group's;
- a hold racing a release answered "only a PENDING job can be held" for a PENDING job, and the
  hold was lost."""

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from mlqueue.errors import Conflict
from scheduling import job_control, lifecycle
from scheduling.job_control import REQUEUE_CANCELLING
from scheduling.leader.worker import run_pass
from scheduling.models import Job, StopReason, Task
from scheduling.services import do_cancel_job
from teams.models import AuditEvent, EventKind
from tests.integration.test_scheduler_pass import submit as submit_spec


def submit(api, **overrides) -> Job:
    return submit_spec(api, "alice", client_job_id=None, **overrides)


def post(api, job_id: int, verb: str, body: dict | None = None):
    return api("alice").post(f"/api/v1/jobs/{job_id}/{verb}", body or {}, format="json")


def alice():
    return get_user_model().objects.get(username="alice")


def stops(job: Job) -> set[str]:
    return set(Task.objects.filter(job=job).values_list("stop_reason", flat=True))


# --- cancel and requeue --------------------------------------------------------------------


def test_a_requeue_on_a_read_made_before_a_cancel_is_refused(api, leader):
    job = submit(api)
    run_pass(epoch=leader)
    stale = Job.objects.select_related("owner", "team").get(pk=job.pk)
    do_cancel_job(job=Job.objects.select_related("owner", "team").get(pk=job.pk), user=alice())
    with pytest.raises(Conflict) as refused:
        job_control.do_requeue_job(user=alice(), job=stale)
    assert str(refused.value.detail) == REQUEUE_CANCELLING.format(job_id=job.pk)
    assert stops(job) <= {"", StopReason.CANCELLED}


def test_a_cancel_after_a_requeue_turns_its_stop_into_a_cancel(api, leader):
    job = submit(api)
    run_pass(epoch=leader)
    assert post(api, job.pk, "requeue").status_code == 200
    assert stops(job) == {StopReason.REQUEUED}
    assert post(api, job.pk, "cancel").status_code == 200
    assert stops(job) == {StopReason.CANCELLED}
    assert api("alice").get(f"/api/v1/jobs/{job.pk}").json()["stopping"]["cause"] == StopReason.CANCELLED


# --- a group's hold and its children's own ---------------------------------------------------


def children(parent: Job) -> list[Job]:
    return list(Job.objects.filter(parent=parent).order_by("group_index"))


def held(parent: Job) -> list[tuple[bool, str]]:
    return [(kid.held, kid.held_reason) for kid in children(parent)]


def test_releasing_an_elements_own_hold_leaves_it_held_with_its_held_array(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    own = children(parent)[2]
    assert post(api, own.pk, "hold", {"reason": "own"}).status_code == 200
    assert post(api, parent.pk, "hold", {"reason": "freeze"}).status_code == 200
    assert held(parent) == [(True, "freeze"), (True, "freeze"), (True, "own")]
    released = post(api, own.pk, "release")
    assert released.status_code == 200
    assert (released.json()["held"], released.json()["held_reason"]) == (True, "freeze")
    run_pass(epoch=leader)
    assert [kid.state for kid in children(parent)] == ["PENDING"] * 3  # nothing runs while the array is held
    assert post(api, parent.pk, "release").status_code == 200
    assert held(parent) == [(False, "")] * 3


def test_releasing_an_array_leaves_an_elements_own_hold_even_with_the_same_holder_and_reason(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    own = children(parent)[1]
    assert post(api, own.pk, "hold").status_code == 200
    assert post(api, parent.pk, "hold").status_code == 200
    answer = post(api, parent.pk, "release")
    assert answer.status_code == 200
    assert [kid.held for kid in children(parent)] == [False, True, False]


def test_a_hold_of_its_own_on_an_element_held_with_its_array_outlasts_the_arrays_release(api, leader):
    parent = submit(api, array={"count": 2, "parallelism": 1})
    assert post(api, parent.pk, "hold", {"reason": "freeze"}).status_code == 200
    first = children(parent)[0]
    assert post(api, first.pk, "hold", {"reason": "bad shard"}).json()["held_reason"] == "bad shard"
    assert post(api, parent.pk, "release").status_code == 200
    assert held(parent) == [(True, "bad shard"), (False, "")]


def test_an_element_held_only_with_its_array_may_be_released_alone(api, leader):
    parent = submit(api, array={"count": 2, "parallelism": 1})
    assert post(api, parent.pk, "hold", {"reason": "freeze"}).status_code == 200
    assert post(api, children(parent)[0].pk, "release").json()["held"] is False
    assert held(parent) == [(False, ""), (True, "freeze")]


# --- a hold racing a release, on Postgres ------------------------------------------------------


def at_once(start: threading.Barrier, action, job_id: int, refusals: list) -> None:
    try:
        start.wait(10)
        action(user=alice(), job=Job.objects.select_related("owner", "team").get(pk=job_id))
    except Conflict as exc:
        refusals.append(str(exc.detail))
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_hold_racing_a_release_is_never_refused_for_a_pending_job(api, leader):
    job = submit(api)
    user = alice()
    refusals = []  # the hold's; the release may find nothing to release (a 409), which is right
    for _ in range(15):
        job_control.do_hold_job(user=user, job=Job.objects.select_related("owner", "team").get(pk=job.pk))
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=at_once, args=(start, job_control.do_hold_job, job.pk, refusals)),
            threading.Thread(target=at_once, args=(start, job_control.do_release_job, job.pk, [])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        Job.objects.filter(pk=job.pk).update(held=False)
    assert refusals == []


# --- what a review of the above found -----------------------------------------------------------


def test_the_page_and_the_record_say_a_child_released_from_its_own_hold_stays_held(api, client):
    parent = submit(api, array={"count": 2, "parallelism": 1})
    child = children(parent)[0]
    assert post(api, child.pk, "hold", {"reason": "own"}).status_code == 200
    assert post(api, parent.pk, "hold", {"reason": "freeze"}).status_code == 200
    assert client.login(username="alice", password="demo")
    page = client.post(f"/jobs/{child.pk}/release/", follow=True).content.decode()
    assert f"Job {child.pk} is released from its own hold, and stays held with its group, job {parent.pk}" in page
    event = AuditEvent.objects.filter(job_id=child.pk, kind=EventKind.JOB_CHANGED).order_by("-id").first()
    assert (event.data["before"], event.data["after"]) == (True, True)
    assert event.message == f"released by alice; still held with its group, job {parent.pk}"


def fresh(job_id: int) -> Job:
    return Job.objects.select_related("owner", "team").get(pk=job_id)


def paused_in(monkeypatch, module, name: str, thread: str):
    """`module.name` made to wait, in the thread named `thread`, until the returned `go` is set;
    `paused` is set when it gets there (after the call for job_control._event, before for the rest)."""
    paused, go, original = threading.Event(), threading.Event(), getattr(module, name)

    def waiting(*args, **kwargs):
        after = name == "_event"
        result = original(*args, **kwargs) if after else None
        if threading.current_thread().name == thread:
            paused.set()
            go.wait(10)
        return result if after else original(*args, **kwargs)

    monkeypatch.setattr(module, name, waiting)
    return paused, go


def started(name: str, action, errors: list) -> threading.Thread:
    def run():
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_group_held_while_a_childs_own_hold_is_released_holds_the_child(api, leader, monkeypatch):
    """The release's look at its group locked the group only where it was held already, so a
    group hold not yet committed was passed over, and the child was left free to run."""
    parent = submit(api, array={"count": 2, "parallelism": 1})
    child = children(parent)[0]
    assert post(api, child.pk, "hold", {"reason": "own"}).status_code == 200
    paused, go = paused_in(monkeypatch, job_control, "_event", thread="release")
    errors = []
    release = started("release", lambda: job_control.do_release_job(user=alice(), job=fresh(child.pk)), errors)
    assert paused.wait(10)
    hold = started("hold", lambda: job_control.do_hold_job(user=alice(), job=fresh(parent.pk)), errors)
    hold.join(2)
    go.set()
    release.join(20)
    hold.join(20)
    assert errors == []
    assert fresh(parent.pk).held and fresh(child.pk).held


@pytest.mark.django_db(transaction=True)
def test_a_group_held_while_a_child_is_cancelled_does_not_deadlock(api, leader, monkeypatch):
    """A child's transition locks the child, then its group (sync_group_state); the group's hold
    locked the group, then its children, and Postgres ended one of them: a 500."""
    parent = submit(api, array={"count": 2, "parallelism": 1})
    child = children(parent)[0]
    paused, go = paused_in(monkeypatch, lifecycle, "sync_group_state", thread="cancel")
    errors = []
    cancel = started("cancel", lambda: do_cancel_job(job=fresh(child.pk), user=alice()), errors)
    assert paused.wait(10)
    hold = started("hold", lambda: job_control.do_hold_job(user=alice(), job=fresh(parent.pk)), errors)
    hold.join(2)
    go.set()
    cancel.join(20)
    hold.join(20)
    assert errors == []
    assert fresh(parent.pk).held and fresh(child.pk).state == "CANCELLED"
