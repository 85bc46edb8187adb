"""A schedule's time zone is an IANA name, not any file ZoneInfo() opens on the server's host
(QA: `localtime`, the host's own zone, was accepted, and fired at the host's times)."""

import pytest

from scheduling.core import cron
from scheduling.core.cron import UNKNOWN_TIMEZONE, timezone_error


@pytest.mark.parametrize("name", ["localtime", "posixrules", "Factory", "posix/Europe/Berlin", "right/UTC", "utc"])
def test_names_that_are_no_iana_zone_are_refused(name):
    assert timezone_error(name) == UNKNOWN_TIMEZONE.format(name=name)


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_iana_names_pass(name):
    assert timezone_error(name) is None


@pytest.fixture
def fresh_names():
    cron.zone_names.cache_clear()
    yield
    cron.zone_names.cache_clear()  # no test after this one sees its stand-in names


def test_the_names_are_read_once(monkeypatch, fresh_names):
    calls = []
    monkeypatch.setattr(cron, "available_timezones", lambda: calls.append(1) or {"UTC", "localtime"})
    assert [timezone_error("UTC"), timezone_error("Europe/Berlin")] == [
        None,
        UNKNOWN_TIMEZONE.format(name="Europe/Berlin"),
    ]
    assert timezone_error("localtime") == UNKNOWN_TIMEZONE.format(name="localtime")
    assert calls == [1]
