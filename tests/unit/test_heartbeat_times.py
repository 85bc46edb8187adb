"""A time the heartbeat reads by raw SQL is aware whatever the store: SQLite's came back naive."""

from datetime import UTC, datetime, timedelta, timezone

from agents.heartbeats import in_utc


def test_a_naive_time_from_sqlite_is_read_as_utc_and_an_aware_one_is_kept():
    assert in_utc(datetime(2026, 12, 5, 11, 7, 51)) == datetime(2026, 12, 5, 11, 7, 51, tzinfo=UTC)
    berlin = datetime(2026, 12, 5, 12, 7, 51, tzinfo=timezone(timedelta(hours=1)))
    assert in_utc(berlin) is berlin
    assert in_utc(None) is None
    assert (in_utc(datetime(2026, 12, 5, 11, 8)) - datetime(2026, 12, 5, 11, 7, tzinfo=UTC)).total_seconds() == 60
