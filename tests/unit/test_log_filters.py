"""runserver's access log (make demo) drops successful heartbeats and keeps everything else;
Django's request log keeps a 4xx's line without its traceback."""

import logging

import pytest

ACCESS = "HTTP %(method)s %(path)s %(status)s [%(time_taken).2f, %(client)s]"


@pytest.mark.parametrize(
    "path, status, kept",
    [
        ("/api/v1/agents/z1-r1-h100-01/heartbeat", 200, False),
        ("/api/v1/agents/z1-r1-h100-01/heartbeat/", 204, False),
        ("/api/v1/agents/z1-r1-h100-01/heartbeat", 409, True),  # a refused heartbeat is news
        ("/api/v1/agents/z1-r1-h100-01/heartbeat", 500, True),
        ("/api/v1/agents/z1-r1-h100-01/events", 200, True),
        ("/api/v1/jobs", 201, True),
        ("/api/v1/agents/heartbeat-node/logs", 200, True),
    ],
)
def test_the_access_log_drops_only_successful_heartbeats(caplog, path, status, kept):
    details = {"method": "POST", "path": path, "status": status, "time_taken": 0.01, "client": "127.0.0.1:1"}
    with caplog.at_level(logging.INFO, logger="django.channels.server"):
        logging.getLogger("django.channels.server").info(ACCESS, details)
    assert [record.getMessage() for record in caplog.records] == ([ACCESS % details] if kept else [])


def test_other_messages_on_the_logger_pass():
    from mlqueue.log_filters import QuietHeartbeats

    record = logging.LogRecord(
        "django.channels.server", logging.INFO, __file__, 1, "WebSocket CONNECT %s", ("/ws",), None
    )
    assert QuietHeartbeats().filter(record)


@pytest.mark.parametrize("status, traceback", [(403, False), (404, False), (500, True)])
def test_djangos_request_log_keeps_a_refusals_line_without_its_traceback(caplog, status, traceback):
    try:
        raise PermissionError("only site admins may see the nodes.")
    except PermissionError:
        with caplog.at_level(logging.WARNING, logger="django.request"):
            logging.getLogger("django.request").warning(
                "Forbidden: %s", "/nodes/", exc_info=True, extra={"status_code": status}
            )
    [record] = caplog.records
    assert record.getMessage() == "Forbidden: /nodes/"
    assert (record.exc_info is not None) is traceback
