"""A warning the agent would say every 2 s is said once a minute, with how often it came."""

import logging

from agents.node import quiet_log
from agents.node.quiet_log import OncePerMinute


def test_a_warning_said_again_and_again_is_logged_once_a_minute(monkeypatch, caplog):
    clock = iter([0.0, 2.0, 4.0, 30.0, 61.0, 62.0, 62.5])
    monkeypatch.setattr(quiet_log.time, "monotonic", lambda: next(clock))
    quiet = OncePerMinute(logging.getLogger("test-agent"))
    with caplog.at_level(logging.WARNING, logger="test-agent"):
        for _ in range(5):  # 0, 2, 4, 30, 61 s
            quiet.warning("%s: heartbeat refused (%s)", "n1", "HTTP 401")
        quiet.warning("%s: cannot join yet (%s)", "n1", "refused")  # another warning: said at once
        quiet.warning("%s: heartbeat refused (%s)", "n1", "HTTP 401")
    assert [record.getMessage() for record in caplog.records] == [
        "n1: heartbeat refused (HTTP 401)",
        "n1: heartbeat refused (HTTP 401) (and 3 more times in the last 61 s)",
        "n1: cannot join yet (refused)",
    ]
