"""What a `Scheduler` keeps of the queue order between passes (`queue_order.KeptOrder`: each
team's jobs sorted and split by class, made again only for a team whose jobs changed or one
of whose jobs crossed a time that moves it) and of the pruning (`TeamQueue.least`, the
running minima, made again only from the first job that changed) gives what a fresh
pass gives, over queues that change and clocks that cross the aging and wait-bound times
exactly, just before and just after."""

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core.fairshare import Ledger
from scheduling.core.model import ClusterSnapshot, JobShape, PendingJob, PolicyConfig, Quota, Team
from scheduling.core.pruning import running_least
from scheduling.core.queue_order import KeptOrder, QueueOrder, TeamSplit
from scheduling.core.scheduler import Scheduler
from tests.unit.core.test_schedule_equivalence import acts_as_every_job_tried, next_snapshot, snapshots

NOW = 1_794_000_000.0
TEAMS = ("vision", "ranking", "speech")
KEPT_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Steps of the clock: a second, just short of, at and just past 10 minutes (the smallest
# aging interval and wait bound drawn below), and hours.
STEPS = (1.0, 600.0 - 1e-4, 600.0, 600.0 + 1e-4, 3600.0, 7200.0, 14_400.0)


@st.composite
def configs(draw) -> PolicyConfig:
    return PolicyConfig(
        aging_interval_s=draw(st.sampled_from([600.0, 3600.0, 14_400.0])),
        reservation_wait_bound_s=draw(st.sampled_from([0.0, 600.0, 7200.0])),
        overdue_first=draw(st.sampled_from([None, 0, 1, 2])),
        order=draw(st.sampled_from(["fair_share", "weighted_shortest"])),
        shortest_first_within_team=draw(st.booleans()),
        overdue_since_requeue=draw(st.booleans()),
    )


def a_job(rng: random.Random, job_id: int, now: float) -> PendingJob:
    """Submitted a whole number of 10-minute steps ago, or a hair either side: the clock's
    steps land on the times that move it."""
    per_task = rng.choice([1, 2, 8])
    submitted = now - rng.randint(0, 30) * 600.0 + rng.choice([0.0, 0.0, 1e-4, -1e-4])
    requeued = rng.random() < 0.3  # it ran and waits again: since a later step, or a hair off one
    return PendingJob(
        job_id,
        rng.choice(TEAMS),
        rng.choice(["P0", "P1", "P2", "P3"]),
        JobShape("H100", rng.randint(1, 3), per_task, 1, 8),
        submitted,
        rng.choice([600.0, 3600.0, 40_000.0]),
        queued_at=min(now, submitted + rng.randint(0, 12) * 600.0 + rng.choice([0.0, 1e-4])) if requeued else None,
    )


def next_queue(rng: random.Random, queue: list[PendingJob], now: float, first_id: int) -> list[PendingJob]:
    """Some jobs leave, one may be edited (a new object under its id), some arrive."""
    kept = [j for j in queue if rng.random() > 0.2]
    if kept and rng.random() < 0.3:
        index = rng.randrange(len(kept))
        kept[index] = replace(kept[index], priority=rng.choice(["P1", "P2", "P3"]))
    return kept + [a_job(rng, first_id + i, now) for i in range(rng.randint(0, 3))]


def order_of(jobs, ledger: Ledger, snapshot: ClusterSnapshot, kept: KeptOrder | None) -> list[int]:
    return [job.job_id for job in QueueOrder(jobs, ledger, snapshot, kept=kept)]


@KEPT_SETTINGS
@given(configs(), st.randoms(use_true_random=False))
def test_a_kept_order_gives_the_order_of_a_fresh_one_as_jobs_come_go_and_age(config, rng):
    teams = tuple(Team(name, None, {"gpu:H100": Quota(8, 64)}) for name in TEAMS)
    now, kept = NOW, KeptOrder()
    queue = [a_job(rng, i, now) for i in range(rng.randint(0, 25))]
    for step in range(8):
        snapshot = ClusterSnapshot((), (), tuple(queue), teams, now, config)
        ledger = Ledger.build(teams, (), {"gpu:H100": 64})
        for team in TEAMS[: step % 3]:  # teams with usage: shares differ
            ledger.add(team, "gpu:H100", 8 * step)
        assert order_of(queue, ledger, snapshot, kept) == order_of(queue, ledger, snapshot, None)
        now += rng.choice(STEPS)
        queue = next_queue(rng, queue, now, 1000 * (step + 1))


def test_a_job_moves_up_a_class_at_the_aging_time_and_not_before():
    config = PolicyConfig(aging_interval_s=600.0, reservation_wait_bound_s=10**9, overdue_first=None)
    teams = (Team("vision", None, {}),)
    shape = JobShape("H100", 1, 1, 1, 8)
    old = PendingJob(1, "vision", "P3", shape, NOW - 600.0, 600.0)  # P2 from now on
    new = PendingJob(2, "vision", "P2", shape, NOW - 1.0, 600.0)  # jumps the P3 no earlier
    kept = KeptOrder()
    for now, expected in ((NOW - 1e-4, [2, 1]), (NOW, [1, 2]), (NOW + 600.0, [1, 2])):
        snapshot = ClusterSnapshot((), (), (old, new), teams, now, config)
        assert order_of([old, new], Ledger.build(teams, (), {}), snapshot, kept) == expected


@KEPT_SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_a_kept_pruning_scheduler_acts_as_a_fresh_pass_while_the_clock_crosses_the_bounds(snapshot, rng):
    """The kept order and running minima (`Scheduler(actions_only=True)`) over snapshots a
    worker would see next, the clock stepping across aging and wait bounds."""
    scheduler = Scheduler(actions_only=True)
    for _ in range(5):
        snapshot = next_snapshot(snapshot, acts_as_every_job_tried(scheduler, snapshot), rng)
        snapshot = replace(snapshot, now=snapshot.now + rng.choice(STEPS))


@KEPT_SETTINGS
@given(st.randoms(use_true_random=False))
def test_kept_running_minima_are_those_of_the_queue_as_it_is_now(rng):
    """A team's queue changed job by job: the minima it keeps, made
    again from the first place that changed, are the minima made afresh; and the CPU jobs
    among GPU ones (a change of class) end them there."""
    split, now = None, NOW
    queue = [a_job(rng, i, now) for i in range(rng.randint(1, 20))]
    config = PolicyConfig(overdue_first=rng.choice([None, 2]), overdue_since_requeue=rng.random() < 0.5)
    for step in range(8):
        queue = [j for j in queue if j.team == "vision"] or [replace(a_job(rng, 100_000 + step, now), team="vision")]
        if split is None or not split.update(queue, now):
            split = TeamSplit(queue, now, config)  # as KeptOrder does when most of the jobs are new
        for kept in split.queues.values():
            assert kept.least() == running_least(kept.jobs)
        fresh = TeamSplit(queue, now, config)
        assert {k: q.jobs for k, q in split.queues.items() if q.jobs} == {k: q.jobs for k, q in fresh.queues.items()}
        assert {k: line.jobs for k, line in split.late.items() if line.jobs} == {
            k: line.jobs for k, line in fresh.late.items()
        }
        now += rng.choice(STEPS)
        queue = next_queue(rng, queue, now, 1000 * (step + 1))
        if rng.random() < 0.3:  # a CPU job joins
            cpu = JobShape(None, 1, 0, rng.choice([1, 8]), 8)
            queue.append(replace(a_job(rng, 900 + step, now), team="vision", shape=cpu))
