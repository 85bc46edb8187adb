"""Refuses, with a 400, requests whose path or query carries control characters (or more
parameters than Django will parse), and browser forms that carry NUL.

No name, id or filter in mlqueue holds one, and Postgres cannot store NUL at all: left alone,
`?team=%00` reaches a query and fails as a 500. Form fields (the browser pages) may hold tabs
and line breaks but not NUL. The heartbeat lane (mlqueue/fastlane.py) applies the same check."""
import re
from urllib.parse import parse_qsl, unquote

from django.conf import settings
from django.http import HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.http.request import split_domain_port, validate_host

from mlqueue.parsers import NUL_IN_TEXT

CONTROL_CHARACTER = "contains a control character ({code}), which no mlqueue path, name or filter accepts."
TOO_MANY_PARAMETERS = "has more than {limit} parameters."
MALFORMED_FORM = "is not a readable form body ({problem})."
API_PREFIX = "/api/"
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
    if request.method != "POST" or request.content_type not in ("application/x-www-form-urlencoded",
                                                                  "multipart/form-data"):
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


class RefuseControlCharacters:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = check_path_and_query(request.path_info, request.META.get("QUERY_STRING", ""))
        if problem is None and not request.path_info.startswith(API_PREFIX):
            problem = check_form(request)  # the API takes JSON only; its parser checks bodies
        if problem is not None:
            return refusal(request.path_info, *problem)
        return self.get_response(request)


DEBUG_HOSTS = [".localhost", "127.0.0.1", "[::1]"]  # what Django allows with DEBUG and no ALLOWED_HOSTS


def host_is_allowed(host: str) -> bool:
    """Django's ALLOWED_HOSTS check, for the ASGI paths that do not go through Django's request
    (the heartbeat lane, browser WebSockets)."""
    allowed = settings.ALLOWED_HOSTS or (DEBUG_HOSTS if settings.DEBUG else [])
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)
