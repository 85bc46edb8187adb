"""Filters for the development server's access log.

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
