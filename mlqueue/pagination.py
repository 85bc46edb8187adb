"""Cursor pagination for every list endpoint: a cursor or a page size the server did not give
out is a 400 naming the parameter.

DRF's CursorPagination answers some bad cursors with a 404 and passes others (any text as the
position, a huge integer) straight into the query, where they fail as a 500."""

import re

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination

INVALID_CURSOR = "is not a cursor this list gave out; start again from the first page (no cursor)."
BAD_LIMIT = "must be a whole number from 1 to {max}."
MAX_CURSOR_CHARS = 1000  # ours are under 100; a longer one is not ours
PAGE_SIZE = re.compile(r"[0-9]{1,9}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


class StrictCursorPagination(CursorPagination):
    page_size_query_param = "limit"

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            cursor = super().decode_cursor(request) if len(encoded) <= MAX_CURSOR_CHARS else None
        except NotFound:
            cursor = None
        if cursor is None or not self.position_is_valid(request, cursor.position):
            raise ValidationError({self.cursor_query_param: [INVALID_CURSOR]})
        return cursor

    def position_is_valid(self, request, position: str | None) -> bool:
        """Whether the cursor's position is a value of the ordering's first column (the one
        the page's query compares it with)."""
        if position is None:
            return True
        if _CONTROL.search(position):
            return False
        model = getattr(getattr(self, "queryset_model", None), "_meta", None)
        if model is None:
            return True
        try:
            field = model.get_field(self.ordering_column())
            value = field.get_prep_value(field.to_python(position))
        except (FieldDoesNotExist, DjangoValidationError, TypeError, ValueError, OverflowError):
            return False
        return _in_column_range(field, value)

    def ordering_column(self) -> str:
        ordering = (self.ordering,) if isinstance(self.ordering, str) else self.ordering
        return ordering[0].lstrip("-")

    def paginate_queryset(self, queryset, request, view=None):
        self.queryset_model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not PAGE_SIZE.fullmatch(raw) or not 1 <= int(raw) <= self.max_page_size:
            raise ValidationError({self.page_size_query_param: [BAD_LIMIT.format(max=self.max_page_size)]})
        return int(raw)


class NewestFirst(StrictCursorPagination):
    """The usual list: newest first, 50 a page (`limit` up to 500)."""

    ordering = "-id"
    page_size = 50
    max_page_size = 500


def _in_column_range(field, value) -> bool:
    if not isinstance(value, int):
        return True
    low, high = connection.ops.integer_field_range(field.get_internal_type())
    return (low is None or value >= low) and (high is None or value <= high)
