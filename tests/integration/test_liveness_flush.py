"""The web processes' liveness writes (scheduling/liveness.py) ride on heartbeat batches, so a
write is bounded: at most FLUSH_CHUNK nodes a statement, the rest with the next batches, the
oldest heard first; processes started together do not write together; and the node table
keeps room on its pages so the writes are HOT updates (migration 0034)."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import liveness
from scheduling.models import Node

INVENTORY = {"zone": "z1", "rack": "z1-r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 192, "memory_gb": 2048}
T0 = 1_790_000_000.0


@pytest.fixture(autouse=True)
def chunk_of_three(monkeypatch, fresh_liveness):
    monkeypatch.setattr(liveness, "FLUSH_CHUNK", 3)
    monkeypatch.setattr(liveness, "_pending", liveness.Pending(next_flush=float("inf")))


def nodes(count: int) -> list[str]:
    names = [f"n{i:02d}" for i in range(count)]
    Node.objects.bulk_create([Node(name=name, **INVENTORY) for name in names])
    return names


def written() -> dict[str, float]:
    return {
        name: at.timestamp()
        for name, at in Node.objects.filter(last_heartbeat_at__isnull=False).values_list("name", "last_heartbeat_at")
    }


def updates(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]


def due() -> None:
    liveness._pending.next_flush = time.monotonic() - 1


def test_a_due_batch_writes_at_most_a_chunk_and_the_next_batches_the_rest_oldest_first(db):
    names = nodes(7)
    liveness.record_many({name: T0 + i for i, name in enumerate(names)})
    assert written() == {}  # not due yet
    due()
    with CaptureQueriesContext(connection) as queries:
        liveness.record_many({"n00": T0 + 10})  # heard again: still the oldest, written with its latest time
    assert len(updates(queries)) == 1
    assert written() == {"n00": T0 + 10, "n01": T0 + 1, "n02": T0 + 2}
    assert liveness._pending.next_flush <= time.monotonic()  # the rest is due with the next batch
    liveness.record_many({"n01": T0 + 20})  # heard again after its write: queued behind the rest
    assert set(written()) == {"n00", "n01", "n02", "n03", "n04", "n05"}
    liveness.record_many({})  # an empty batch records and writes nothing
    liveness.record_many({"n00": T0 + 30})
    assert written() == {
        "n00": T0 + 30,
        "n01": T0 + 20,
        "n02": T0 + 2,
        "n03": T0 + 3,
        "n04": T0 + 4,
        "n05": T0 + 5,
        "n06": T0 + 6,
    }
    assert liveness._pending.heard == {}
    interval = liveness.settings.MLQ_LIVENESS_FLUSH_S
    assert time.monotonic() + interval - 1 < liveness._pending.next_flush <= time.monotonic() + interval


def test_a_flush_without_a_limit_writes_everything_in_one_statement(db):
    names = nodes(7)
    liveness.record_many({name: T0 for name in names})
    with CaptureQueriesContext(connection) as queries:
        assert liveness.flush() == 7
    assert len(updates(queries)) == 1 and len(written()) == 7


def test_a_chunk_the_database_refused_is_kept_and_not_retried_by_the_very_next_batch(db, monkeypatch):
    names = nodes(5)
    liveness.record_many({name: T0 for name in names})
    due()
    with monkeypatch.context() as broken:
        broken.setattr(liveness, "FLUSH_SQL", "UPDATE no_such_table SET x = 1 WHERE {rows} IS NOT NULL")
        with connection.cursor() as cursor:
            cursor.execute("SAVEPOINT before_refusal")
        liveness.record_many({"n00": T0 + 1})
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK TO SAVEPOINT before_refusal")
    assert set(liveness._pending.heard) == set(names)  # nothing lost
    assert liveness._pending.next_flush > time.monotonic() + 0.5  # a failing database is not asked again at once
    assert liveness.flush() == 5 and written()["n00"] == T0 + 1


def test_processes_started_together_first_write_at_different_moments(settings):
    settings.MLQ_LIVENESS_FLUSH_S = 10.0
    now = time.monotonic()
    firsts = [liveness.Pending().next_flush - now for _ in range(200)]
    assert all(4.9 <= first <= 10.1 for first in firsts)
    assert max(firsts) - min(firsts) > 3  # spread over the second half of the interval


def test_the_node_table_keeps_room_for_liveness_writes_on_its_pages(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [Node._meta.db_table])
        (options,) = cursor.fetchone()
    assert "fillfactor=50" in options


def test_liveness_writes_to_the_node_table_are_hot_updates(db):
    """HOT: the new row versions stay on their pages and no index of the table is written,
    which makes a write of 1,250 nodes ~8 ms of Postgres instead of ~30 (BENCHMARKS.md, "the
    liveness flush"). Counted by Postgres for this transaction, where the old versions cannot be
    pruned yet, so a page's last rows may not fit: at the default fillfactor 1 of these 60 was
    HOT, at 50 58 of them."""
    names = nodes(60)
    before = _updates()
    liveness.record_many({name: T0 for name in names})
    assert liveness.flush() == 60
    updated, hot = (after - first for after, first in zip(_updates(), before, strict=True))
    assert updated == 60 and hot >= 54
    assert written() == {name: T0 for name in names}


def _updates() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s", [Node._meta.db_table]
        )
        return cursor.fetchone()
