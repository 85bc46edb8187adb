"""Filters for the logs: the development server's access log, and Django's request log.

`manage.py runserver` (daphne's) logs one line per request on `django.channels.server`. On
`make demo` 36 agents heartbeat every 2 s: 18 lines a second of `HTTP POST
/api/v1/agents/NAME/heartbeat 200` drowned everything else in the terminal. Successful
heartbeats are dropped; a refused or failed one (4xx, 5xx) is still logged, as is every other
request."""

import logging
import re

HEARTBEAT = re.compile(r"/api/v1/agents/[^/]+/heartbeat/?")


class QuietHeartbeats(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        details = record.args
        if not isinstance(details, dict):
            return True
        status, path = details.get("status"), str(details.get("path", ""))
        return not (isinstance(status, int) and 200 <= status < 300 and HEARTBEAT.fullmatch(path))


class RefusalsWithoutTracebacks(logging.Filter):
    """`django.request` logs a view's PermissionDenied as a warning with the exception's
    traceback: a member opening `/nodes/` wrote twenty lines of stack for a normal refusal. The
    one line stays (who was refused what is worth a line); the traceback goes, for 4xx only."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info, record.exc_text = None, None
        return True
