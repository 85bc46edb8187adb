"""The scheduler worker: lead (or stand by), and while leading run passes: on every wake-up
(a submit, an exit, a node change) and at least every `tick_s`.

A pass: sweep (reconcile.py), snapshot the store, run the policy core, apply its decisions
fenced by the epoch, record the pass on the lease row."""

import gc
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone
from prometheus_client import Counter

from mlqueue.redis_client import redis_client
from scheduling import metrics
from scheduling.cluster import KeptReads
from scheduling.core.scheduler import Scheduler, schedule
from scheduling.fencing import Deposed, fenced
from scheduling.leader import failpoints
from scheduling.leader.apply import Applied, apply_decisions
from scheduling.leader.forecasting import Forecaster
from scheduling.leader.leadership import Leadership, LeaseRowLeadership
from scheduling.leader.reconcile import Swept, reconcile
from scheduling.leader.schedule_sweep import ScheduleSweep, run_due_windows
from scheduling.models import SchedulerLease
from scheduling.notify import wake_channel
from scheduling.queue_state import QUEUE_ORDER_KEY, QUEUE_ORDER_TTL_S, stored_order
from scheduling.store_view import build_view

log = logging.getLogger(__name__)
FAILED_PASSES = Counter("mlqueue_scheduler_failed_passes_total", "Passes that failed with an unexpected error")


@dataclass
class PassReport:
    epoch: int
    elapsed_ms: float
    swept: Swept
    applied: Applied
    pending: int
    placed: int
    preempted: int


def run_pass(
    *,
    epoch: int,
    now=None,
    forecaster: Forecaster | None = None,
    scheduler: Scheduler | None = None,
    schedules: ScheduleSweep | None = None,
    reads: KeptReads | None = None,
) -> PassReport:
    """One pass as the leader of `epoch`. Raises Deposed if another scheduler took over.
    `scheduler`: the policy core's state kept from the last pass (its decisions are exactly a
    fresh pass's; it only saves re-indexing the cluster); None: a fresh pass. `reads`: the
    last pass's reads of the store, so that what has not changed comes back as the objects
    `scheduler` kept (see `KeptReads`).
    The cyclic garbage collector waits until the pass is over: a pass allocates many short-
    lived objects and nothing cyclic worth collecting mid-pass (10-30% of a pass otherwise).
    `schedules`: fire the schedules due, when its interval has passed, before the snapshot (so
    the runs are in this pass)."""
    gc.disable()
    try:
        return _run_pass(
            epoch=epoch, now=now, forecaster=forecaster, scheduler=scheduler, schedules=schedules, reads=reads
        )
    finally:
        gc.enable()


def _run_pass(
    *,
    epoch: int,
    now=None,
    forecaster: Forecaster | None = None,
    scheduler: Scheduler | None = None,
    schedules: ScheduleSweep | None = None,
    reads: KeptReads | None = None,
) -> PassReport:
    started = time.perf_counter()
    given, now = now, now or timezone.now()
    swept = reconcile(epoch=epoch, now=now)
    run_due_windows(now=now)
    if schedules is not None:
        schedules.maybe_fire(now=now)
    if given is None:
        # The snapshot holds jobs submitted since the sweeps began (a schedule's runs fired
        # just now, anyone's submit meanwhile): the decisions take the clock as it is when the
        # store is read, or such a job was assigned before it was submitted (a negative wait).
        now = timezone.now()
    failpoints.hit("pass.after_sweep")
    view = build_view(now=now, kept=reads)
    decide = scheduler.schedule if scheduler is not None else schedule
    decisions = decide(view.snapshot, timer=time.perf_counter)
    if settings.MLQ_FAULT_APPLY_DELAY_S:
        log.warning(
            "fault injection: waiting %s s before applying epoch %s's decisions",
            settings.MLQ_FAULT_APPLY_DELAY_S,
            epoch,
        )
        time.sleep(settings.MLQ_FAULT_APPLY_DELAY_S)
    applied = apply_decisions(decisions, view, epoch=epoch, now=now)
    publish_queue_order(decisions.order)
    elapsed_ms = (time.perf_counter() - started) * 1000
    failpoints.hit("pass.before_record")
    with fenced(epoch):
        SchedulerLease.objects.filter(pk=1, epoch=epoch).update(last_pass_ms=elapsed_ms, last_pass_at=now)
    metrics.record_pass(decisions, applied, elapsed_ms, view.snapshot)
    if forecaster is not None:  # after the pass's own timing: start times are not on its clock
        forecaster.maybe_run(view, decisions, epoch=epoch, now=now)
    return PassReport(epoch, elapsed_ms, swept, applied, len(view.snapshot.pending), applied.placed, applied.preempted)


def publish_queue_order(order) -> None:
    """The pass's queue order (pending job ids, first first), for the queue page's positions
    (scheduling/queue_state.py reads it). Best effort: a page that finds none shows no positions."""
    try:
        cache.set(QUEUE_ORDER_KEY, stored_order(order), QUEUE_ORDER_TTL_S)
    except Exception as exc:  # the cache is down: positions are a nicety, the pass is not
        log.warning("could not publish the queue order (%s)", exc)


class Waker:
    """Wake-ups from Redis pub/sub; without Redis (embedded), or while Redis is down, a plain
    tick: a wake-up only saves the wait until the next one."""

    def __init__(self):
        self.pubsub = None
        self.down = False

    def _subscribed(self):
        if self.pubsub is None and settings.REDIS_URL:
            client = redis_client()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(wake_channel())
            self.pubsub = pubsub
        return self.pubsub

    def wait(self, timeout: float) -> bool:
        """Sleep until a wake-up or `timeout`; True if woken. Drains queued wake-ups."""
        try:
            pubsub = self._subscribed()
            if pubsub is None:
                time.sleep(timeout)
                return False
            woken = pubsub.get_message(timeout=timeout) is not None
            while pubsub.get_message(timeout=0) is not None:
                pass
        except redis.RedisError as exc:
            if not self.down:
                log.warning("wake-ups unavailable (%s); ticking every %s s until Redis is back", exc, timeout)
            self.down, self.pubsub = True, None
            time.sleep(timeout)
            return False
        if self.down:
            log.warning("wake-ups from Redis again")
            self.down = False
        return woken


class SchedulerWorker:
    def __init__(
        self,
        leadership: Leadership,
        *,
        tick_s: float = 1.0,
        standby_poll_s: float = 1.0,
        health_file: Path | None = None,
    ):
        self.leadership, self.tick_s, self.standby_poll_s = leadership, tick_s, standby_poll_s
        self.health_file = health_file
        self.waker = Waker()
        self.forecaster = Forecaster()
        self.scheduler = Scheduler()
        self.reads = KeptReads()
        self.schedules = ScheduleSweep()
        self.stopping = False

    def run(self, *, passes: int | None = None) -> int:
        """Lead or stand by until stopped (or until `passes` passes ran). Returns passes run."""
        done = 0
        while not self.stopping and (passes is None or done < passes):
            self._alive()
            try:
                close_old_connections()
                leading = self._ensure_leading()
            except DatabaseError as exc:  # embedded mode's lease row: the store is away
                log.error("cannot reach the database to lead (%s); retrying", exc)
                leading = False
            if not leading:
                time.sleep(self.standby_poll_s)
                continue
            if self._one_pass() is not None:
                done += 1
            if passes is None or done < passes:
                self.waker.wait(self.tick_s)
        return done

    def _alive(self) -> None:
        """Touch the health file once per loop, leading or standing by (a liveness probe reads
        its age: deploy/entrypoint.sh check scheduler). A loop stuck anywhere stops touching it."""
        if self.health_file is not None:
            try:
                self.health_file.touch()
            except OSError as exc:
                log.warning("cannot touch the health file %s (%s)", self.health_file, exc)

    def _ensure_leading(self) -> bool:
        if isinstance(self.leadership, LeaseRowLeadership):
            self.leadership.maybe_renew()
        if self.leadership.leading:
            return True
        if self.leadership.epoch is not None:
            log.warning("renew deadline missed: stepping down from epoch %s", self.leadership.epoch)
            self.leadership.step_down()
        # However the lead was lost (here, or by a renewal that stepped down by itself): a
        # standby forecasts nothing (QA: the workers outlived a lead lost by the renewal).
        self.forecaster.stop()
        if self.leadership.try_acquire() is None:
            return False
        # A new term starts from the store alone: what this process kept from an earlier term
        # (where the backlog gate held, above all) may be stale by now.
        self.scheduler = Scheduler()
        self.reads = KeptReads()
        return True

    def _step_down(self) -> None:
        """Give up the lead, and the forecast under way with its kept workers: a standby
        forecasts nothing (the next term spawns them again on its first forecast)."""
        self.leadership.step_down()
        self.forecaster.stop()

    def run_once(self) -> PassReport | None:
        """Lead if possible and run one pass; None if another scheduler leads."""
        close_old_connections()
        if not self._ensure_leading():
            return None
        return self._one_pass()

    def _one_pass(self) -> PassReport | None:
        epoch = self.leadership.epoch
        try:
            report = run_pass(
                epoch=epoch,
                forecaster=self.forecaster,
                scheduler=self.scheduler,
                schedules=self.schedules,
                reads=self.reads,
            )
        except Deposed as exc:
            log.warning("%s: stepping down", exc)
            metrics.DEPOSED.inc()
            self._step_down()
            return None
        except DatabaseError as exc:
            # The store went away mid-pass: nothing half-written survives a rolled-back
            # transaction; give up the lead and compete again once it is back.
            log.error("database error during a pass (%s): stepping down", exc)
            self._step_down()
            connections.close_all()
            return None
        except Exception:  # a bug or a dependency's outage must not end the scheduler process
            log.exception("the pass of epoch %s failed; the next one runs on the next tick", epoch)
            FAILED_PASSES.inc()
            return None
        if report.placed or report.preempted or report.swept.retried or report.swept.requeued:
            log.info(
                "pass epoch=%s %.0f ms: %s pending, %s placed, %s preempted, %s retried, %s requeued",
                epoch,
                report.elapsed_ms,
                report.pending,
                report.placed,
                report.preempted,
                report.swept.retried,
                report.swept.requeued,
            )
        return report

    def stop(self, *_args) -> None:
        self.stopping = True
        self.forecaster.stop()
