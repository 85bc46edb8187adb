"""Exactly once: up to 8 firers, each a thread with its own database connection, call fire_due
at every instant of a simulated week of `*/5 * * * *` in Europe/Berlin that spans the night
the clocks fall back (2026-10-25, 03:00 CEST -> 02:00 CET). At each instant a seeded-random
2 to 8 of them fire, released together at a barrier; the night of the change is also run with
all 8 at every instant. The clock is frozen at each instant (time-machine, for every thread).
Every fire time has exactly one run, none is missed, and no firer saw an error."""

import random
import threading
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from scheduling import lifecycle, schedules
from scheduling.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 10, 22, 0, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
SLOT = timedelta(minutes=5)
# The night of the change: 03:00 CEST (01:00 UTC) becomes 02:00 CET, an hour lived twice.
NIGHT_START = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)
NIGHT = timedelta(hours=3)
THREADS = 8
SPEC = {"name": "every-5", "team": "research-foundation-models", "command": ["true"]}


def instants(start: datetime, span: timedelta) -> list[datetime]:
    """Every fire time after `start` up to `start + span`, a second after it (a firer is never
    early), and now and then a second look within the same slot (nothing is due then)."""
    rng = random.Random(17)
    found, when = [], start + SLOT
    while when <= start + span:
        found.append(when + timedelta(seconds=1))
        if rng.random() < 0.1:
            found.append(when + timedelta(seconds=rng.randint(2, 290)))
        when += SLOT
    return found


def fire_times(start: datetime, span: timedelta) -> list[datetime]:
    return [start + SLOT * n for n in range(1, span // SLOT + 1)]


class Firers:
    """THREADS threads, each on its own connection; at each instant the ones chosen call
    fire_due, released together by a barrier, while the others sit that instant out."""

    def __init__(self):
        self.start = threading.Barrier(THREADS + 1)
        self.done = threading.Barrier(THREADS + 1)
        self.now: datetime | None = None
        self.chosen: frozenset[int] = frozenset()
        self.errors: list[BaseException] = []
        self.claims = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(THREADS)]
        for thread in self.threads:
            thread.start()

    def _run(self, number: int) -> None:
        try:
            while True:
                self.start.wait()
                if self.now is None:
                    return
                if number in self.chosen:
                    self._fire()
                self.done.wait()
        finally:
            connection.close()

    def _fire(self) -> None:
        try:
            fired = schedules.fire_due(now=self.now)
            with self.lock:
                self.claims += len(fired)
        except BaseException as exc:  # noqa: BLE001  reported by the test
            self.errors.append(exc)

    def fire(self, now: datetime, chosen: frozenset[int]) -> None:
        self.now, self.chosen = now, chosen
        self.start.wait()
        self.done.wait()

    def stop(self) -> None:
        self.now = None
        self.start.wait()
        for thread in self.threads:
            thread.join(timeout=10)


def fire_through(start: datetime, span: timedelta, how_many) -> tuple[list[datetime], Firers, list[int]]:
    """A new schedule fired at every instant of the span by `how_many()` of the threads;
    returns its runs' fire times, the firers and how many fired at each instant."""
    alice = get_user_model().objects.get(username="alice")
    rng, counts = random.Random(5), []
    with time_machine.travel(start, tick=False) as clock:
        data = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "concurrency": "allow", "spec": SPEC}
        team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
        schedule, _ = schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec)
        firers = Firers()
        try:
            for now in instants(start, span):
                clock.move_to(now)
                counts.append(how_many(rng))
                firers.fire(now, frozenset(rng.sample(range(THREADS), counts[-1])))
        finally:
            firers.stop()
    runs = Job.objects.filter(schedule=schedule).order_by("scheduled_for").values_list("scheduled_for", flat=True)
    return list(runs), firers, counts


def test_2_to_8_concurrent_firers_make_exactly_one_run_per_fire_time_through_a_week_with_a_dst_change(demo):
    got, firers, counts = fire_through(START, WEEK, lambda rng: rng.randint(2, THREADS))
    assert firers.errors == []
    expected = fire_times(START, WEEK)
    assert len(expected) == 2016  # 7 days x 288: every 5 real minutes, the repeated hour included
    assert got == expected
    assert firers.claims == len(expected)
    assert set(counts) == set(range(2, THREADS + 1))  # both ends and every count between


def test_8_concurrent_firers_make_exactly_one_run_per_fire_time_through_the_night_the_clocks_fall_back(demo):
    got, firers, _ = fire_through(NIGHT_START, NIGHT, lambda rng: THREADS)
    assert firers.errors == []
    expected = fire_times(NIGHT_START, NIGHT)
    assert len(expected) == 36  # 3 real hours, 2 of them wall-clock 02:00-03:00
    assert got == expected
    assert firers.claims == len(expected)


def holding(hold, *args) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """`hold(locked, release, *args)` in a thread of its own connection: it sets `locked` once its
    transaction holds what it locks and keeps it until `release` is set."""
    locked, release = threading.Event(), threading.Event()

    def run():
        try:
            hold(locked, release, *args)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert locked.wait(10)
    return thread, locked, release


def key_share_now(table: str, pk: int) -> None:
    """What a foreign-key check at commit takes on the row a new row points at; NOWAIT: raises
    if another transaction's lock on it would make that commit wait."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR KEY SHARE NOWAIT", [pk])


def test_a_run_now_locks_only_its_schedule_and_a_transition_lets_rows_point_at_its_job(demo, monkeypatch):
    """A run now locked its owner's and team's rows too, and a transition locked its job FOR
    UPDATE: a pass placing the schedule's last run (the job locked, an event naming the owner to
    write) and a run now (the owner locked, a fire naming that job to write) deadlocked at
    commit, and the API answered 500. Each now holds only what it serializes on."""
    alice = get_user_model().objects.get(username="alice")
    data = {"cron": "0 3 * * *", "timezone": "UTC", "concurrency": "allow", "spec": SPEC}
    team, timing, spec = schedules.check_schedule_create(user=alice, data=data)
    schedule, _ = schedules.do_create_schedule(user=alice, team=team, timing=timing, spec=spec)
    fire = schedules._fire

    def run_now(locked, release):
        def paused(*args, **kwargs):
            locked.set()
            release.wait(10)
            return fire(*args, **kwargs)

        monkeypatch.setattr(schedules, "_fire", paused)
        schedules.do_run_now(user=alice, schedule=schedule)

    thread, _, release = holding(run_now)
    try:
        key_share_now("auth_user", alice.pk)
        key_share_now("teams_team", team.pk)
    finally:
        release.set()
        thread.join(10)
    job_id = Job.objects.get(schedule=schedule).pk

    def transition(locked, release):
        with transaction.atomic():
            lifecycle._lock_job(job_id)
            locked.set()
            release.wait(10)

    thread, _, release = holding(transition)
    try:
        key_share_now("scheduling_job", job_id)
    finally:
        release.set()
        thread.join(10)
