"""Date and time fields for input: DRF's, but a value in the right format that names a day or a
time that does not exist (2026-02-30, 25:00) says so. DRF answers both that and a value in no
known format with "wrong format. Use one of these formats instead: ...", which sends a user who
typed a real format looking for a mistake they did not make."""

import re

from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import serializers

NO_SUCH_DAY = "{value!r} is in the right format but is not a real {what}: {why}."
BAD_OFFSET = "{value!r} has a UTC offset of {offset}: an offset is from -23:59 to +23:59 (Z is UTC)."
# What an ISO 8601 date or time is written with; RFC 3339 allows its T and Z in lowercase.
_ISO_CHARACTERS = re.compile(r"[0-9:+\-.,tz ]+", re.IGNORECASE)
_OFFSET = re.compile(r"[+-](\d{2}):?(\d{2})$")


def rfc3339_case(value):
    """`value` with a lowercase t or z (2026-12-05t09:40:00z, which RFC 3339 allows) in
    uppercase, as Django's parser reads it; anything else as it was. Shared by the API's time
    fields and the list filters' (scheduling/web/filters.py)."""
    if isinstance(value, str) and _ISO_CHARACTERS.fullmatch(value.strip()):
        return value.strip().upper()
    return value


def bad_offset(value) -> str:
    """The refusal of a time whose UTC offset is out of range (+24:00, -99:00): Python's own
    message names its timedelta ("... not datetime.timedelta(days=1)"). "" if it is not that."""
    found = _OFFSET.search(value.strip()) if isinstance(value, str) else None
    if found is None or (int(found[1]) < 24 and int(found[2]) < 60):
        return ""
    return BAD_OFFSET.format(value=value, offset=found[0])


def no_such_day(value, error: Exception, what: str = "date and time") -> str:
    return NO_SUCH_DAY.format(value=value, what=what, why=str(error).rstrip("."))


def _impossible(value, parsers) -> str:
    """Why `value`, in ISO 8601's shape, names no real day or moment ("" if it does not say)."""
    if not isinstance(value, str):
        return ""
    for parse in parsers:
        try:
            parse(value.strip())
        except ValueError as exc:
            return str(exc)
    return ""


# DRF's words, with the date alone it takes too (QA: `?from=abc` was told date-times only).
DATE_TIME_FORMATS = (
    "Datetime has wrong format. Use one of these formats instead: {format}, or a date alone (YYYY-MM-DD: its "
    "midnight UTC)."
)


class DateTimeField(serializers.DateTimeField):
    default_error_messages = {"invalid": DATE_TIME_FORMATS}

    def to_internal_value(self, value):
        try:
            return super().to_internal_value(rfc3339_case(value))
        except serializers.ValidationError:
            if why := bad_offset(value):
                raise serializers.ValidationError(why) from None
            if why := _impossible(rfc3339_case(value), (parse_datetime, parse_date)):
                raise serializers.ValidationError(no_such_day(value, why)) from None
            raise


class DateField(serializers.DateField):
    def to_internal_value(self, value):
        try:
            return super().to_internal_value(value)
        except serializers.ValidationError:
            if why := _impossible(value, (parse_date,)):
                raise serializers.ValidationError(no_such_day(value, why, "date")) from None
            raise
