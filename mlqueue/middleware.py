"""Refuses, with a 400, requests whose path or query carries control characters (or more
parameters than Django will parse), and browser forms that carry NUL.

No name, id or filter in mlqueue holds one, and Postgres cannot store NUL at all: left alone,
`?team=%00` reaches a query and fails as a 500. Form fields (the browser pages) may hold tabs
and line breaks but not NUL. The heartbeat lane (mlqueue/fastlane.py) applies the same check.

A body sent chunked, without Content-Length, is refused with a 411: Django reads CONTENT_LENGTH
bytes of a body, so DRF and request.POST took it as empty and the answer misled ("team: This
field is required."). daphne de-chunks such a body but passes no length on; a request with both
headers it refuses itself.

Also answers 503 with Retry-After, never a 500, while Postgres cannot be reached
(DatabaseOutages); the heartbeat lane does the same. And answers an /api/ path that matches no
route in JSON with DEBUG on, as handler404 (mlqueue/urls.py) does with it off (ApiNotFound)."""

import logging
import re
import sys
import time
from urllib.parse import parse_qsl, unquote

import psycopg
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.http.request import split_domain_port, validate_host
from django.template.loader import render_to_string

from mlqueue.parsers import NUL_IN_TEXT

log = logging.getLogger(__name__)

CONTROL_CHARACTER = "contains a control character ({code}), which no mlqueue path, name or filter accepts."
TOO_MANY_PARAMETERS = "has more than {limit} parameters."
MALFORMED_FORM = "is not a readable form body ({problem})."
FORM_TOO_LARGE = "Request too large: a form body is at most {limit} bytes (MLQ_MAX_BODY_BYTES); nothing was saved.\n"
API_PREFIX = "/api/"
NO_SUCH_API_PATH = "no such API path: {path}"
LENGTH_REQUIRED = "send the body with a Content-Length header; chunked request bodies are not read."
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"


def check_path_and_query(path: str, query_string: str) -> tuple[str, str] | None:
    """(field, message) for the first control character in the decoded path or query (the
    query parameter's name as the field, "path" or "query" otherwise) or for too many
    parameters; None if all is well."""
    found = _CONTROL.search(path)
    if found:
        return "path", CONTROL_CHARACTER.format(code=_code(found[0]))
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    if limit is not None and query_string and query_string.count("&") + 1 > limit:
        return "query", TOO_MANY_PARAMETERS.format(limit=limit)  # Django's own 400 would be an HTML page
    if not _CONTROL.search(unquote(query_string)):
        return None  # the common case: nothing to locate
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        if found := _CONTROL.search(name):
            return "query", CONTROL_CHARACTER.format(code=_code(found[0]))
        if found := _CONTROL.search(value):
            return name, CONTROL_CHARACTER.format(code=_code(found[0]))
    return "query", CONTROL_CHARACTER.format(code=_code(_CONTROL.search(unquote(query_string))[0]))


def check_form(request) -> tuple[str, str] | None:
    if request.method != "POST" or request.content_type not in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        return None
    try:
        fields = request.POST.lists()
    except MultiPartParserError as exc:
        return "form", MALFORMED_FORM.format(problem=exc)
    for name, values in fields:
        if "\x00" in name or any("\x00" in value for value in values):
            return ("form" if "\x00" in name else name), NUL_IN_TEXT
    return None


def refusal(path: str, field: str, message: str):
    if path.startswith(API_PREFIX):
        return JsonResponse({"detail": f"{field}: {message}", "fields": {field: [message]}}, status=400)
    return HttpResponseBadRequest(f"Bad request: {field} {message}\n", content_type="text/plain; charset=utf-8")


def api_not_found(path: str) -> JsonResponse:
    return JsonResponse({"detail": NO_SUCH_API_PATH.format(path=path[:200])}, status=404)


def length_required(path: str) -> HttpResponse:
    if path.startswith(API_PREFIX):
        return JsonResponse({"detail": LENGTH_REQUIRED}, status=411)
    return HttpResponse(f"{LENGTH_REQUIRED}\n", status=411, content_type="text/plain; charset=utf-8")


def is_chunked_without_length(meta: dict) -> bool:
    return "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower() and not meta.get("CONTENT_LENGTH")


class RefuseControlCharacters:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if is_chunked_without_length(request.META):
            return length_required(request.path_info)
        problem = check_path_and_query(request.path_info, request.META.get("QUERY_STRING", ""))
        if problem is None and not request.path_info.startswith(API_PREFIX):
            try:
                problem = check_form(request)  # the API takes JSON only; its parser checks bodies
            except RequestDataTooBig:  # a 400 page naming nothing, and a traceback in the log
                return HttpResponse(
                    FORM_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
                    status=413,
                    content_type="text/plain; charset=utf-8",
                )
        if problem is not None:
            return refusal(request.path_info, *problem)
        return self.get_response(request)


class ApiNotFound:
    """An /api/ path that matches no route answers in JSON with DEBUG on too: Django then skips
    handler404 (mlqueue/urls.py) for its HTML page of URL patterns, which no API client reads."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        unmatched = response.status_code == 404 and request.resolver_match is None
        if settings.DEBUG and unmatched and request.path_info.startswith(API_PREFIX):
            return api_not_found(request.path)
        return response


DEBUG_HOSTS = [".localhost", "127.0.0.1", "[::1]"]  # what Django allows with DEBUG and no ALLOWED_HOSTS


def host_is_allowed(host: str) -> bool:
    """Django's ALLOWED_HOSTS check, for the ASGI paths that do not go through Django's request
    (the heartbeat lane, browser WebSockets)."""
    allowed = settings.ALLOWED_HOSTS or (DEBUG_HOSTS if settings.DEBUG else [])
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


RETRY_AFTER_S = 5
DATABASE_UNAVAILABLE = "the database is unavailable; retry in {seconds} s"
# SQLSTATEs of a server that cannot be reached or is going away, rather than of a statement that
# failed: class 08 (connection exception), 57P01-57P03 (shutting down, crashed, starting up).
# Errors raised before the server said anything (refused, cut, the pool's timeout) have none.
CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")
OUTAGE_LOG_EVERY_S = 30


def is_database_unavailable(exc: BaseException) -> bool:
    """True when `exc` says Postgres cannot be reached: refused, restarting, a connection cut,
    the pool waiting in vain for a connection. A statement that failed (a deadlock, a cancelled
    query, a constraint) is not an outage and stays an error."""
    if isinstance(exc, (InterfaceError, psycopg.InterfaceError)):
        return True
    error = exc.__cause__ if isinstance(exc, OperationalError) else exc
    if not isinstance(error, psycopg.OperationalError):
        return False
    return error.sqlstate is None or error.sqlstate.startswith(CONNECTION_LOST)


class OutageLog:
    """A warning at most every OUTAGE_LOG_EVERY_S: during an outage every request fails, and a
    line (or a traceback) per request would bury the one that matters."""

    def __init__(self):
        self.next_at = 0.0

    def note(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + OUTAGE_LOG_EVERY_S
            log.warning(
                "the database is unavailable (%s): answering 503, Retry-After %d s",
                str(exc).strip() or type(exc).__name__,
                RETRY_AFTER_S,
            )


database_outages = OutageLog()


def database_unavailable(path: str) -> HttpResponse:
    """503 with Retry-After: the API's error shape under /api/, a page elsewhere. The page is
    rendered without the request, so that no context processor (the navigation reads the
    user's teams) asks the database again."""
    message = DATABASE_UNAVAILABLE.format(seconds=RETRY_AFTER_S)
    if path.startswith(API_PREFIX):
        response = JsonResponse({"detail": message}, status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"message": message}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def note_database_failure(sender, request=None, **kwargs) -> None:
    """got_request_exception: marks the request whose 500 came from an unreachable database."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and is_database_unavailable(exc):
        database_outages.note(exc)
        request.database_unavailable = True


class DatabaseOutages:
    """503 with Retry-After instead of a 500 when Postgres cannot be reached, with DEBUG on or
    off. A view's error (the common case: DRF's authentication, login_required) comes to
    process_exception. One raised in a middleware inside this one (a session read or saved)
    is a 500 response by the time it gets here, since Django turns each middleware's exception
    into a response: got_request_exception marks that request, and this replaces the 500."""

    def __init__(self, get_response):
        self.get_response = get_response
        got_request_exception.connect(note_database_failure, dispatch_uid="mlqueue.database_outages")

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, "database_unavailable", False):
            return database_unavailable(request.path_info)
        return response

    def process_exception(self, request, exception):
        if not is_database_unavailable(exception):
            return None
        database_outages.note(exception)
        return database_unavailable(request.path_info)
