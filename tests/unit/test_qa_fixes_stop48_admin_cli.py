"""QA stop 48, `mlq maintenance`: a time from now past the calendar's end (`--at +99999999d`)
was an OverflowError's traceback and exit 1; it is a usage error naming the option (exit 2),
as `-1h` is. No Django, no database."""

import pytest

from mlqueue.cli.maintenance import TOO_FAR_AHEAD
from tests.unit.test_cli import FakeServer, clean_environment, run  # noqa: F401 (an autouse fixture)

WINDOW = ("maintenance", "create", "--rack", "z2-r3", "--reason", "x")


@pytest.mark.parametrize(
    ("args", "option", "typed"),
    [
        ((*WINDOW, "--at", "+99999999d", "--hours", "1"), "--at", "+99999999d"),
        ((*WINDOW, "--at", "+1h", "--until", "+9999999999h"), "--until", "+9999999999h"),
        ((*WINDOW, "--at", "+9999999999999999999m", "--hours", "1"), "--at", "+9999999999999999999m"),
        ((*WINDOW, "--at", "+" + "9" * 400 + "d", "--hours", "1"), "--at", "+" + "9" * 400 + "d"),  # an infinite float
        (("maintenance", "change", "2", "--at", "+99999999d"), "--at", "+99999999d"),
    ],
)
def test_a_time_from_now_past_the_calendar_is_a_usage_error_naming_the_option(args, option, typed):
    server = FakeServer({})
    result = run(server, *args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"Invalid value for '{option}': {TOO_FAR_AHEAD.format(value=typed)}" in result.stderr
    assert not server.requests
