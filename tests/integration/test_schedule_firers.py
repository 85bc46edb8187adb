"""Exactly once: 2 and 8 firers, each a thread with its own database connection, call fire_due
at every instant of a simulated week of `*/5 * * * *` in Europe/Berlin that spans the night
the clocks fall back (2026-10-25, 03:00 CEST -> 02:00 CET). The clock is frozen at each
instant (time-machine, for every thread); the firers start together at a barrier. Every
fire time has exactly one run, none is missed, and no firer saw an error."""

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection

from scheduling import schedules
from scheduling.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 10, 22, 0, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
SLOT = timedelta(minutes=5)
SPEC = {"name": "every-5", "team": "research-foundation-models", "command": ["true"]}


def instants() -> list[datetime]:
    """Every fire time, a second after it (a firer is never early), and now and then a second
    look within the same slot (nothing is due then)."""
    rng = random.Random(17)
    found, when = [], START + SLOT
    while when <= START + WEEK:
        found.append(when + timedelta(seconds=1))
        if rng.random() < 0.1:
            found.append(when + timedelta(seconds=rng.randint(2, 290)))
        when += SLOT
    return found


class Firers:
    """`count` threads that each call fire_due once per instant, on their own connection."""

    def __init__(self, count: int):
        self.start = threading.Barrier(count + 1)
        self.done = threading.Barrier(count + 1)
        self.now: datetime | None = None
        self.errors: list[BaseException] = []
        self.claims = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        try:
            while True:
                self.start.wait()
                if self.now is None:
                    return
                try:
                    fired = schedules.fire_due(now=self.now)
                    with self.lock:
                        self.claims += len(fired)
                except BaseException as exc:  # noqa: BLE001  reported by the test
                    self.errors.append(exc)
                self.done.wait()
        finally:
            connection.close()

    def fire(self, now: datetime) -> None:
        self.now = now
        self.start.wait()
        self.done.wait()

    def stop(self) -> None:
        self.now = None
        self.start.wait()
        for thread in self.threads:
            thread.join(timeout=10)


@pytest.mark.parametrize("count", [2, 8])
def test_concurrent_firers_make_exactly_one_run_per_fire_time_across_a_dst_change(demo, count):
    alice = get_user_model().objects.get(username="alice")
    with time_machine.travel(START, tick=False) as clock:
        data = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "concurrency": "allow", "spec": SPEC}
        team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
        schedule, _ = schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec)
        firers = Firers(count)
        try:
            for now in instants():
                clock.move_to(now)
                firers.fire(now)
        finally:
            firers.stop()
    assert firers.errors == []
    expected = [START + SLOT * n for n in range(1, WEEK // SLOT + 1)]
    got = list(Job.objects.filter(schedule=schedule).order_by("scheduled_for").values_list("scheduled_for", flat=True))
    assert len(expected) == 2016  # 7 days x 288: every 5 real minutes, the repeated hour included
    assert got == expected
    assert firers.claims == len(expected)
