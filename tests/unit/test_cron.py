"""Fire times (scheduling/core/cron.py): across daylight-saving changes in Europe/Berlin, both
ways, and the exact refusals of bad cron expressions and time zones."""

from datetime import UTC, datetime

import pytest

from scheduling.core.cron import cron_error, fires, latest_fire, next_fire, timezone_error

BERLIN = "Europe/Berlin"


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def times(expr: str, after: datetime, count: int) -> list[str]:
    found = []
    for fire in fires(expr, BERLIN, after):
        found.append(f"{fire:%m-%d %H:%M}")
        if len(found) == count:
            return found
    return found


def test_spring_forward_a_fixed_hour_in_the_gap_fires_at_the_first_instant_after_it():
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC). 02:30 does not exist that night.
    assert times("30 2 * * *", utc(2026, 3, 27, 12), 3) == ["03-28 01:30", "03-29 01:00", "03-30 00:30"]


def test_spring_forward_an_every_5_minutes_cron_has_no_fire_time_in_the_gap():
    # Local 01:55 CET is 00:55 UTC; the next local time, 03:00 CEST, is 01:00 UTC: 5 real minutes.
    assert times("*/5 * * * *", utc(2026, 3, 29, 0, 50), 3) == ["03-29 00:55", "03-29 01:00", "03-29 01:05"]


def test_fall_back_a_fixed_hour_in_the_repeated_hour_fires_once():
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC); 02:30 happens twice.
    assert times("30 2 * * *", utc(2026, 10, 23, 12), 3) == ["10-24 00:30", "10-25 00:30", "10-26 01:30"]


def test_fall_back_started_inside_the_repeated_hour_does_not_go_back_to_its_first_pass():
    # 01:10 UTC is 02:10 CET, the second 02:10: the 02:30 of today is past (00:30 UTC).
    assert next_fire("30 2 * * *", BERLIN, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_fall_back_an_every_30_minutes_cron_runs_on_real_time_through_both_hours():
    assert times("*/30 * * * *", utc(2026, 10, 24, 23, 45), 5) == [
        "10-25 00:00",
        "10-25 00:30",
        "10-25 01:00",
        "10-25 01:30",
        "10-25 02:00",
    ]


def test_next_fire_is_strictly_after_the_instant_asked_about():
    assert next_fire("0 3 * * *", "UTC", utc(2026, 4, 20, 3)) == utc(2026, 4, 21, 3)


def test_latest_fire_is_the_last_missed_fire_time():
    assert latest_fire("*/5 * * * *", "UTC", first=utc(2026, 4, 1), until=utc(2026, 4, 20, 9, 7)) == utc(
        2026, 4, 20, 9, 5
    )
    assert latest_fire("0 3 1 * *", "UTC", first=utc(2026, 2, 1, 3), until=utc(2026, 4, 20)) == utc(2026, 4, 1, 3)
    assert latest_fire("0 3 * * *", "UTC", first=utc(2026, 4, 20, 3), until=utc(2026, 4, 20, 4)) == utc(2026, 4, 20, 3)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "* * *",
            "'* * *' has 3 fields; a cron expression has five (minute hour day-of-month month day-of-week), "
            "e.g. '0 3 * * *' for 03:00 every day, or one of @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly.",
        ),
        ("61 * * * *", "'61 * * * *': the minute field '61' is not valid (0-59, lists, ranges and steps such as */5)."),
        ("0 24 * * *", "'0 24 * * *': the hour field '24' is not valid (0-23, lists, ranges and steps)."),
        (
            "0 0 31 2 *",
            "'0 0 31 2 *': the day-of-month field '31' is not valid "
            "(1-31, L, lists, ranges and steps, and the month must have that day).",
        ),
        ("0 0 * 13 *", "'0 0 * 13 *': the month field '13' is not valid (1-12 or JAN-DEC, lists, ranges and steps)."),
        (
            "0 0 * * 8",
            "'0 0 * * 8': the day-of-week field '8' is not valid "
            "(0-7 or SUN-SAT (0 and 7 are Sunday), L and #, lists, ranges and steps).",
        ),
    ],
)
def test_a_bad_cron_expression_is_refused_naming_its_field(expr, message):
    assert cron_error(expr) == message


@pytest.mark.parametrize("expr", ["0 3 * * *", "*/5 * * * *", "@daily", "  0  3 * * MON-FRI ", "0 0 L * *"])
def test_good_cron_expressions_pass(expr):
    assert cron_error(expr) is None


@pytest.mark.parametrize("name", ["Mars/Olympus", "../etc/passwd", "", "CEST+2"])
def test_an_unknown_time_zone_is_refused(name):
    assert timezone_error(name) == (
        f"{name!r} is not an IANA time zone name such as Europe/Berlin, America/New_York or UTC."
    )


def test_known_time_zones_pass():
    assert timezone_error("Europe/Berlin") is None
    assert timezone_error("UTC") is None
