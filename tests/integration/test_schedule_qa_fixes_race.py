"""Each fire time handled leaves one history row (found by QA: three concurrent "run now"s in
one second made one job, right, but three SUBMITTED rows, all for it). The callers hold the
schedule's row lock, so the second handler of a fire time finds the first's row."""

import threading
from datetime import UTC, datetime

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection

from scheduling import schedules
from scheduling.models import FireOutcome, Job, ScheduleFire

TEAM = "research-foundation-models"
SPEC = {"name": "nightly-eval", "team": TEAM, "command": ["python", "eval.py"]}
NOW = datetime(2026, 4, 20, 9, 0, tzinfo=UTC)


def create(concurrency: str, cron: str = "0 3 * * *"):
    alice = get_user_model().objects.get(username="alice")
    data = {"cron": cron, "timezone": "UTC", "concurrency": concurrency, "spec": SPEC}
    team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
    schedule, _ = schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec)
    return alice, schedule


@pytest.mark.django_db
@pytest.mark.parametrize("concurrency", ["allow", "forbid", "replace"])
def test_run_now_twice_in_one_second_leaves_one_row_and_one_run(clock, demo, concurrency):
    alice, schedule = create(concurrency)
    first, _ = schedules.do_run_now(user=alice, schedule=schedule)
    again, _ = schedules.do_run_now(user=alice, schedule=schedule)
    assert again.pk == first.pk and first.outcome == FireOutcome.SUBMITTED
    assert list(ScheduleFire.objects.filter(schedule=schedule).values_list("job_id", flat=True)) == [first.job_id]
    assert list(Job.objects.filter(schedule=schedule).values_list("state", flat=True)) == ["PENDING"]  # not replaced


@pytest.mark.django_db
def test_a_cron_fire_time_run_now_already_handled_leaves_one_row(demo):
    with time_machine.travel(datetime(2026, 4, 20, 8, 0, tzinfo=UTC), tick=False):
        alice, schedule = create("allow", cron="0 9 * * *")
    first, _ = schedules.do_run_now(user=alice, schedule=schedule, now=NOW)  # 09:00:00, its fire time
    assert schedules.fire_due(now=NOW) == [first]
    assert ScheduleFire.objects.filter(schedule=schedule).count() == 1


@pytest.mark.django_db(transaction=True)
def test_three_concurrent_run_nows_in_one_second_leave_one_row(demo):
    alice, schedule = create("allow")
    start, errors, fires = threading.Barrier(3), [], []

    def run_now():
        try:
            start.wait(10)
            fires.append(schedules.do_run_now(user=alice, schedule=schedule, now=NOW)[0])
        except BaseException as exc:  # noqa: BLE001  reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_now, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len({fire.pk for fire in fires}) == 1 and len(fires) == 3
    (job,) = Job.objects.filter(schedule=schedule)
    assert list(ScheduleFire.objects.filter(schedule=schedule).values_list("job_id", "outcome")) == [
        (job.pk, FireOutcome.SUBMITTED)
    ]
