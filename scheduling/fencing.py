"""Fenced writes: every write of the leader runs in a transaction that first reads the lease
row FOR SHARE and aborts unless the epoch is still the leader's. A new leader's epoch bump
waits for such a transaction, and every later one from the old leader aborts."""

from contextlib import contextmanager

from django.db import connection, transaction

from scheduling.models import SchedulerLease


class Deposed(Exception):
    """This process's epoch is no longer the lease's: another scheduler leads."""

    def __init__(self, mine: int, current: int | None):
        super().__init__(f"epoch {mine} was deposed (the lease is at epoch {current})")
        self.mine, self.current = mine, current


def current_epoch(*, lock: bool) -> int | None:
    table = SchedulerLease._meta.db_table
    share = " FOR SHARE" if lock and connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT epoch FROM {table} WHERE id = 1{share}")
        row = cursor.fetchone()
    return row[0] if row else None


@contextmanager
def fenced(epoch: int):
    """A transaction that commits only if `epoch` leads throughout (raises Deposed)."""
    with transaction.atomic():
        current = current_epoch(lock=True)
        if current != epoch:
            raise Deposed(epoch, current)
        yield
