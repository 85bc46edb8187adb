"""Who leads the scheduler.

On Postgres: a session advisory lock held on a dedicated connection (never Django's, never
behind a pooler), plus the lease row with the epoch, the holder, the database's clock and the
lease's duration (by which the web tells whether a leader is alive: scheduling/selectors.py).
The holder renews every `renew_s`; it stops calling itself leader once `renew_deadline_s`
passes without a successful renewal, which is before the lease (`lease_s`) can lapse. A
standby that finds the lease lapsed terminates the holder's backend (an advisory lock alone
never fails over from a paused process whose socket stays open) and takes over with epoch+1.

Embedded (SQLite): the lease row alone, compared on the process clock.
"""

import logging
import os
import socket
import threading
import time
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scheduling.models import SchedulerLease
from teams.models import AuditEvent

log = logging.getLogger(__name__)

LOCK_KEY = 0x6D6C71_0001  # "mlq" + 1: the advisory lock every scheduler competes for
LEASE_TABLE = SchedulerLease._meta.db_table
# The epoch bump and its audit row in one statement: the LEADER event's id is allocated after
# every fenced transaction of the old epoch has committed (the bump waits for their FOR SHARE
# locks), so no event of epoch N may have a higher id than the LEADER event of epoch N+1.
TAKE_LEASE = f"""
WITH bumped AS (
    UPDATE {LEASE_TABLE} SET epoch = epoch + 1, holder = %(holder)s, backend_pid = pg_backend_pid(),
           acquired_at = now(), renewed_at = now(), lease_seconds = %(lease_s)s
    WHERE id = 1 RETURNING epoch
)
INSERT INTO {AuditEvent._meta.db_table} (kind, actor_name, from_state, to_state, reason, message, data, created_at)
SELECT 'LEADER', 'scheduler', '', '', 'LEADER', %(holder)s || ' took the lead with epoch ' || epoch,
       jsonb_build_object('epoch', epoch, 'holder', %(holder)s), now()
FROM bumped RETURNING (data->>'epoch')::bigint
"""


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """The common shape: `try_acquire()` -> epoch or None; `leading` says whether this process
    may still act as leader right now; `step_down()` gives it up."""

    def __init__(self, *, lease_s: float = 10.0, renew_s: float = 2.0, renew_deadline_s: float = 7.0):
        assert renew_s < renew_deadline_s < lease_s
        self.lease_s, self.renew_s, self.renew_deadline_s = lease_s, renew_s, renew_deadline_s
        self.holder = holder_name()
        self.epoch: int | None = None
        self.renewed_at = 0.0  # time.monotonic() of the last successful renewal

    @property
    def leading(self) -> bool:
        return self.epoch is not None and time.monotonic() - self.renewed_at < self.renew_deadline_s

    def try_acquire(self) -> int | None:
        raise NotImplementedError

    def step_down(self) -> None:
        raise NotImplementedError


class PostgresLeadership(Leadership):
    def __init__(self, **timing):
        super().__init__(**timing)
        self.conn: psycopg.Connection | None = None
        self.renewer: threading.Thread | None = None
        self.stop_renewing = threading.Event()

    def _connect(self) -> psycopg.Connection:
        db = settings.DATABASES["default"]
        return psycopg.connect(
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            dbname=db["NAME"],
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            autocommit=True,
            application_name=f"mlqueue-leader {self.holder}",
            connect_timeout=5,
        )

    def try_acquire(self) -> int | None:
        try:
            if self.conn is None or self.conn.closed:
                self.conn = self._connect()
            self.conn.execute(f"INSERT INTO {LEASE_TABLE} (id, epoch, holder) VALUES (1, 0, '') ON CONFLICT DO NOTHING")
            if self.conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]:
                return self._take_lease()
            self._evict_stale_holder()
        except psycopg.Error as exc:
            log.warning("leadership: cannot take the lead now (%s)", exc)
            self._close()
        return None

    def _take_lease(self) -> int:
        # The bump waits for the old leader's open fenced transaction, but not forever: a paused
        # one is ended by its idle_in_transaction_session_timeout; meanwhile, try again later.
        self.conn.execute("SET lock_timeout = '3s'")
        try:
            epoch = self.conn.execute(TAKE_LEASE, {"holder": self.holder, "lease_s": self.lease_s}).fetchone()[0]
        except psycopg.errors.LockNotAvailable:
            log.warning("leadership: the lease row is still locked by the old leader; will retry")
            self._close()
            raise
        self.epoch, self.renewed_at = epoch, time.monotonic()
        self.stop_renewing.clear()
        self.renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        self.renewer.start()
        log.info("leadership: %s leads with epoch %s", self.holder, epoch)
        return epoch

    def _evict_stale_holder(self) -> None:
        """If the lease lapsed, end the session that still holds the lock (it may be paused)."""
        row = self.conn.execute(
            f"SELECT holder, now() - renewed_at > make_interval(secs => %s) FROM {LEASE_TABLE} WHERE id = 1",
            (self.lease_s,),
        ).fetchone()
        if not row or not row[1]:
            return
        for (pid,) in self.conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (LOCK_KEY,),
        ).fetchall():
            log.warning("leadership: lease of %s lapsed; terminating its backend %s", row[0], pid)
            self.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def _renew_loop(self) -> None:
        """Renew every renew_s; after a failure keep trying (a blip must not cost an epoch)
        until the renew deadline has passed or the lease is provably someone else's."""
        while not self.stop_renewing.wait(self.renew_s):
            outcome = self.renew()
            if outcome is False or not self.leading:
                return

    def renew(self) -> bool | None:
        """True: renewed. False: the lease is not ours any more. None: could not tell (error)."""
        sent_at = time.monotonic()  # the lease counts from before the request, not its reply
        try:
            renewed = (
                self.conn.execute(
                    f"UPDATE {LEASE_TABLE} SET renewed_at = now(), lease_seconds = %s WHERE id = 1 AND epoch = %s "
                    "AND backend_pid = pg_backend_pid()",
                    (self.lease_s, self.epoch),
                ).rowcount
                == 1
            )
        except psycopg.OperationalError as exc:
            log.warning("leadership: renewal failed (%s); retrying until the deadline", exc)
            return None
        except (psycopg.Error, AttributeError) as exc:
            log.warning("leadership: renewal failed (%s)", exc)
            renewed = False
        if renewed:
            self.renewed_at = sent_at
        else:
            log.warning("leadership: epoch %s lost the lease", self.epoch)
        return renewed

    def step_down(self) -> None:
        if self.epoch is not None:
            log.info("leadership: epoch %s steps down", self.epoch)
        self.epoch = None
        self.stop_renewing.set()
        self._release_lock()
        self._close()

    def _release_lock(self) -> None:
        """Unlock before closing: a closed connection's backend drops the lock only once it has
        exited, a moment after close() returns, and a standby asking meanwhile is refused."""
        if self.conn is None or self.conn.closed:
            return
        try:
            self.conn.execute("SELECT pg_advisory_unlock_all()")
        except psycopg.Error:
            pass  # the session's end releases it all the same, a moment later

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()  # ends the session: the advisory lock goes with it
            except psycopg.Error:
                pass


class LeaseRowLeadership(Leadership):
    """Embedded mode: one scheduler process on SQLite; the lease row alone decides."""

    def try_acquire(self) -> int | None:
        now = timezone.now()
        with transaction.atomic():
            SchedulerLease.objects.get_or_create(pk=1)
            lease = SchedulerLease.objects.select_for_update().get(pk=1)
            lapsed = lease.renewed_at is None or now - lease.renewed_at > timedelta(seconds=self.lease_s)
            if not (lapsed or lease.holder == self.holder):
                return None
            lease.epoch += 1
            lease.holder, lease.backend_pid, lease.acquired_at, lease.renewed_at = self.holder, None, now, now
            lease.lease_seconds = self.lease_s
            lease.save()
        self.epoch, self.renewed_at = lease.epoch, time.monotonic()
        return lease.epoch

    def renew(self) -> bool:
        renewed = (
            SchedulerLease.objects.filter(pk=1, epoch=self.epoch, holder=self.holder).update(
                renewed_at=timezone.now(), lease_seconds=self.lease_s
            )
            == 1
        )
        if renewed:
            self.renewed_at = time.monotonic()
        return renewed

    def maybe_renew(self) -> None:
        """Called between passes: one process, no thread needed."""
        if self.epoch is not None and time.monotonic() - self.renewed_at >= self.renew_s and not self.renew():
            self.step_down()

    def step_down(self) -> None:
        if self.epoch is not None:
            SchedulerLease.objects.filter(pk=1, epoch=self.epoch, holder=self.holder).update(renewed_at=None)
        self.epoch = None


def leadership_for_this_database(**timing) -> Leadership:
    return PostgresLeadership(**timing) if connection.vendor == "postgresql" else LeaseRowLeadership(**timing)
