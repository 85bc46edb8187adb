"""What QA found racing schedule writes (as alice, the demo's member): a run now or a PATCH
racing a DELETE was a 500 (Schedule.DoesNotExist), two DELETEs at once both answered 204 and
wrote two "deleted" entries, and five run nows in one second wrote five "ran ... now" entries
for one fire, each answered 201. Each race is played in the interleaving that loses it."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.http import Http404

from scheduling import schedules
from scheduling.models import Schedule
from teams.models import AuditEvent, EventKind

pytestmark = pytest.mark.django_db

TEAM = "research-foundation-models"
SPEC = {"name": "nightly-eval", "team": TEAM, "command": ["python", "eval.py"]}
NOW = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)
BODY = {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "concurrency": "allow", "spec": SPEC}


def created(api) -> dict:
    response = api("alice").post("/api/v1/schedules", BODY, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def entries(schedule: dict, action: str) -> list[str]:
    found = AuditEvent.objects.filter(kind=EventKind.SCHEDULE, data__schedule=schedule["id"], reason=action)
    return list(found.values_list("message", flat=True))


def deleted_after(check):
    """`check`, then the schedule's row deleted: a DELETE committed between the view's read and
    the service's write."""

    def checked(*, user, schedule, **kwargs):
        found = check(user=user, schedule=schedule, **kwargs)
        Schedule.objects.filter(pk=schedule.pk).delete()
        return found

    return checked


def test_a_run_now_racing_a_delete_is_a_404(clock, api, monkeypatch):
    schedule = created(api)
    monkeypatch.setattr(schedules, "check_may_change", deleted_after(schedules.check_may_change))
    response = api("alice").post(f"/api/v1/schedules/{schedule['id']}/run")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no such schedule: {schedule['id']}."}
    assert entries(schedule, "run now") == []


def test_a_patch_racing_a_delete_is_a_404_and_leaves_no_entry(clock, api, monkeypatch):
    schedule = created(api)
    monkeypatch.setattr(schedules, "check_schedule_change", deleted_after(schedules.check_schedule_change))
    response = api("alice").patch(f"/api/v1/schedules/{schedule['id']}", {"cron": "0 4 * * *"}, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no such schedule: {schedule['id']}."}
    assert entries(schedule, "changed") == []


def test_of_two_deletes_at_once_one_deletes_and_writes_the_one_entry_the_other_is_a_404(clock, api, user):
    schedule = created(api)
    first, second = (Schedule.objects.select_related("owner", "team").get(pk=schedule["id"]) for _ in range(2))
    schedules.do_delete_schedule(user=user("alice"), schedule=first)
    with pytest.raises(Http404) as raised:
        schedules.do_delete_schedule(user=user("alice"), schedule=second)
    assert str(raised.value) == schedules.GONE
    assert entries(schedule, "deleted") == [f"alice deleted schedule {schedule['id']} 'nightly'"]


def test_a_delete_of_a_schedule_just_deleted_is_a_404(clock, api, monkeypatch):
    schedule = created(api)
    monkeypatch.setattr(schedules, "check_may_change", deleted_after(schedules.check_may_change))
    response = api("alice").delete(f"/api/v1/schedules/{schedule['id']}")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no such schedule: {schedule['id']}."}
    assert entries(schedule, "deleted") == []


def test_run_now_repeated_in_one_second_answers_200_with_the_same_fire_and_one_entry(clock, api):
    schedule = created(api)
    url = f"/api/v1/schedules/{schedule['id']}/run"
    answers = [api("alice").post(url) for _ in range(5)]
    assert [answer.status_code for answer in answers] == [201, 200, 200, 200, 200]
    assert all(answer.json() == answers[0].json() for answer in answers)
    (message,) = entries(schedule, "run now")
    assert message.endswith(f": SUBMITTED (job {answers[0].json()['job']})")


# ---- the same races in parallel, on Postgres ---------------------------------------------------


def in_parallel(count: int, action) -> tuple[list, list]:
    """`action()` in `count` threads started at once: (their results, their exceptions)."""
    start, results, errors = threading.Barrier(count), [], []

    def run():
        try:
            start.wait(10)
            results.append(action())
        except BaseException as exc:  # noqa: BLE001  reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results, errors


def create_schedule(alice) -> Schedule:
    data = {**BODY, "name": "del2"}
    team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
    return schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec)[0]


@pytest.mark.django_db(transaction=True)
def test_two_parallel_deletes_delete_once_and_write_one_entry(demo):
    alice = get_user_model().objects.get(username="alice")
    schedule = create_schedule(alice)
    read = [Schedule.objects.select_related("owner", "team").get(pk=schedule.pk) for _ in range(2)]
    _, errors = in_parallel(2, lambda: schedules.do_delete_schedule(user=alice, schedule=read.pop()))
    assert [type(error) for error in errors] == [Http404]
    assert entries({"id": schedule.pk}, "deleted") == [f"alice deleted schedule {schedule.pk} 'del2'"]


@pytest.mark.django_db(transaction=True)
def test_five_parallel_run_nows_make_one_fire_and_one_entry(demo):
    alice = get_user_model().objects.get(username="alice")
    schedule = create_schedule(alice)
    results, errors = in_parallel(5, lambda: schedules.do_run_now(user=alice, schedule=schedule, now=NOW))
    assert errors == []
    assert len({fire.pk for fire, _ in results}) == 1 and sorted(made for _, made in results) == [False] * 4 + [True]
    assert len(entries({"id": schedule.pk}, "run now")) == 1


# ---- PATCHes read under the row's lock (a review: two at once each wrote and each audited the
# "before" it had read) -----------------------------------------------------------------------


def read_twice(schedule: dict) -> tuple[Schedule, Schedule]:
    return tuple(Schedule.objects.select_related("owner", "team").get(pk=schedule["id"]) for _ in range(2))


def patched(user, schedule: Schedule, data: dict) -> Schedule:
    changes = schedules.check_schedule_change(user=user, schedule=schedule, data=data)
    return schedules.do_change_schedule(user=user, schedule=schedule, changes=changes)


def test_a_patch_on_a_stale_read_audits_what_it_replaced(clock, api, user):
    schedule = created(api)
    first, second = read_twice(schedule)
    patched(user("alice"), first, {"cron": "0 4 * * *"})
    assert patched(user("rita"), second, {"cron": "0 5 * * *"}).cron == "0 5 * * *"
    assert [message.split(" (")[-1] for message in entries(schedule, "changed")] == [
        "cron '0 3 * * *' -> '0 4 * * *')",
        "cron '0 4 * * *' -> '0 5 * * *')",
    ]


def test_the_same_patch_twice_on_one_read_writes_once_and_audits_once(clock, api, user):
    schedule = created(api)
    first, second = read_twice(schedule)
    patched(user("alice"), first, {"cron": "0 4 * * *", "reason": "later"})
    updated_at = Schedule.objects.get(pk=schedule["id"]).updated_at
    clock.shift(timedelta(seconds=5))
    assert patched(user("alice"), second, {"cron": "0 4 * * *", "reason": "later"}).updated_at == updated_at
    assert len(entries(schedule, "changed")) == 1


def test_a_suspend_on_a_read_made_before_a_resume_still_suspends(clock, api, user):
    schedule = created(api)
    api("alice").patch(f"/api/v1/schedules/{schedule['id']}", {"suspended": True}, format="json")
    stale, _ = read_twice(schedule)  # suspended, as read
    api("alice").patch(f"/api/v1/schedules/{schedule['id']}", {"suspended": False}, format="json")
    assert patched(user("rita"), stale, {"suspended": True, "reason": "quota review"}).suspended is True
    assert entries(schedule, "suspended")[-1].startswith(f"rita suspended schedule {schedule['id']}")


@pytest.mark.django_db(transaction=True)
def test_four_parallel_patches_of_the_same_change_write_one_entry(demo):
    alice = get_user_model().objects.get(username="alice")
    schedule = create_schedule(alice)
    read = [Schedule.objects.select_related("owner", "team").get(pk=schedule.pk) for _ in range(4)]
    results, errors = in_parallel(4, lambda: patched(alice, read.pop(), {"cron": "15 3 * * *"}))
    assert errors == [] and {found.cron for found in results} == {"15 3 * * *"}
    assert len(entries({"id": schedule.pk}, "changed")) == 1
