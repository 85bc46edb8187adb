"""One error shape for the whole API: `{"detail": "...", "fields": {"resources.gpu_count": [...]}}`.

`fields` uses dotted paths so a client can point at the exact spec field; `detail` repeats the
first problem as one sentence for humans and logs.
"""

import re

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from mlqueue.errors import BODY_TOO_LARGE, FieldPermissionDenied, RequestTooLarge
from mlqueue.parsers import BodyParseError


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error dict/list -> {"a.b": ["message", ...]}."""
    if isinstance(detail, dict):
        out = {}
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else str(key))
            for path, messages in flatten_errors(value, name).items():
                out.setdefault(path, []).extend(messages)
        return out
    if isinstance(detail, list) and detail and all(isinstance(item, (dict, list)) for item in detail):
        out = {}
        for index, item in enumerate(detail):
            for path, messages in flatten_errors(item, f"{prefix}[{index}]").items():
                out.setdefault(path, []).extend(messages)
        return out
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or "body": [str(m) for m in messages]}


# What get_object_or_404 says: "No MaintenanceWindow matches the given query."
DJANGO_NOT_FOUND = re.compile(r"No (\w+) matches the given query\.")


def not_found(exc: Http404, context) -> str:
    """A 404 of get_object_or_404 in words a user asked in: "no such node: nope-01." (the view's
    URL arguments name what was asked for). Any other 404's message stays."""
    found = DJANGO_NOT_FOUND.fullmatch(str(exc))
    if found is None:
        return str(exc) or str(exceptions.NotFound.default_detail)
    what = re.sub(r"(?<!^)(?=[A-Z])", " ", found[1]).lower()
    asked = ", ".join(str(value) for value in getattr(context.get("view"), "kwargs", {}).values())
    return f"no such {what}: {asked}." if asked else f"no such {what}."


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge(BODY_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        first_field, first_messages = next(iter(fields.items()))
        response.data = {"detail": f"{first_field}: {first_messages[0]}", "fields": fields}
    elif isinstance(exc, FieldPermissionDenied):
        response.data = {"detail": f"{exc.field}: {exc.detail}", "fields": exc.fields}
    elif isinstance(exc, BodyParseError):
        response.data = {"detail": str(exc.detail), "fields": {exc.field: [exc.message]}}
    elif isinstance(exc, Http404):
        response.data = {"detail": not_found(exc, context)}
    return response
