"""A list's query parameters checked before any is read: one the list does not take is a 400
naming it, not ignored (`?teem=x`, a typo, and `?since=7d`, another list's filter, answered
with every row, as if no filter had been asked for), and a one-value filter given several
times is a 400 too (all but the last were dropped), and so is one given empty (`?team=`, a
script's unset variable, answered with every row as well). The nodes list refuses the first two
the same way (agents/node_filters.py)."""

from collections.abc import Iterable

import django_filters
from django import forms
from rest_framework.exceptions import ValidationError

from mlqueue.pagination import StrictCursorPagination

UNKNOWN_PARAMETER = "not a parameter of this list: filter by {filters}; page with {pages}."
UNKNOWN_PARAMETER_NO_FILTERS = "not a parameter of this list: it takes none but {pages}."
UNKNOWN_PARAMETER_UNPAGED = "not a parameter here: it takes {filters}."  # a list unpaged, a log, a report
ONE_VALUE = "give {name} once: it takes one value."
ONE_VALUE_BUT = "give {name} once: it takes one value (only {multiple} may repeat)."
EMPTY_VALUE = "empty: give {name} a value, or leave it out."
NOT_AN_ID = "must be a {what} id (a whole number)."
# The largest id a row can have (a bigint's): a larger one is no id, not a query's overflow.
MAX_ID = 2**63 - 1
# Every cursor-paginated list's own (DRF's `format=json` too).
PAGE_PARAMETERS = (StrictCursorPagination.cursor_query_param, StrictCursorPagination.page_size_query_param, "format")


def refused_parameters(
    query, *, filters: Iterable[str] = (), multiple: Iterable[str] = (), paged: bool = True
) -> dict[str, str]:
    """Parameter -> why it is refused, for a QueryDict `query`: `filters` the list's filters,
    `multiple` those of them that may repeat (`?state=A&state=B`); `paged`: whether the list is
    cursor-paginated (else `cursor` and `limit` are refused too, as any parameter it ignores).
    A known parameter given empty is refused too."""
    filters, multiple = list(filters), set(multiple)
    allowed = PAGE_PARAMETERS if paged else PAGE_PARAMETERS[2:]
    pages = ", ".join(PAGE_PARAMETERS[:2])
    if not paged:
        unknown = UNKNOWN_PARAMETER_UNPAGED.format(filters=", ".join(filters) or "nothing")
    elif filters:
        unknown = UNKNOWN_PARAMETER.format(filters=", ".join(filters), pages=pages)
    else:
        unknown = UNKNOWN_PARAMETER_NO_FILTERS.format(pages=pages)
    errors = {}
    for name in query:
        if name not in filters and name not in allowed:
            errors[name] = unknown
        elif name not in multiple and len(query.getlist(name)) > 1:
            errors[name] = (ONE_VALUE_BUT if multiple else ONE_VALUE).format(
                name=name, multiple=", ".join(sorted(multiple))
            )
        elif "" in query.getlist(name):
            errors[name] = EMPTY_VALUE.format(name=name)
    return errors


def check_parameters(query, **asked) -> None:
    """`refused_parameters(query, **asked)` as a 400 naming each refused parameter."""
    if refused := refused_parameters(query, **asked):
        raise ValidationError({name: [why] for name, why in refused.items()})


SUBMIT_TAKES_NO_PARAMETER = (
    "not a parameter of a submit: it takes none (the spec is the body); a dry run is POST /api/v1/jobs/dry-run."
)


def check_submit_parameters(query) -> None:
    """A submit's query parameters, refused before anything is written (but DRF's `format`):
    `POST /api/v1/jobs?dry_run=1` was ignored and the job submitted (QA stop 49)."""
    if refused := [name for name in query if name != "format"]:
        raise ValidationError({name: [SUBMIT_TAKES_NO_PARAMETER] for name in refused})


class _ChoicesNamedField(forms.MultipleChoiceField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        named = ", ".join(str(value) for value, _label in self.choices)
        self.error_messages = {**self.error_messages, "invalid_choice": f"%(value)s is not one of {named}."}


class ChoicesFilter(django_filters.MultipleChoiceFilter):
    """A filter of one or more choices (`?state=PENDING&state=RUNNING`) whose refusal names the
    choices, where Django's says "not one of the available choices" and no more."""

    field_class = _ChoicesNamedField


def is_id(text: str) -> bool:
    """Whether a parameter's text is a row's id: ASCII digits ("²" and "1.5" are not, nor
    "1e30"), no larger than a bigint (a larger one was a 500: SQLite's OverflowError)."""
    return text.isascii() and text.isdecimal() and len(text) <= len(str(MAX_ID)) and int(text) <= MAX_ID


class IdField(forms.CharField):
    default_error_messages = {"invalid": NOT_AN_ID.format(what="row")}

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        if not is_id(value):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return int(value)


class IdFilter(django_filters.NumberFilter):
    """A filter by a row's id (`?parent=7`): anything else is a 400 naming the parameter,
    "must be a job id (a whole number)." where a NumberFilter took 1.5 and 1e30."""

    field_class = IdField

    def __init__(self, *args, of: str, **kwargs):
        super().__init__(*args, error_messages={"invalid": NOT_AN_ID.format(what=of)}, **kwargs)
