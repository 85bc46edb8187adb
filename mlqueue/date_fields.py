"""Date and time fields for input: DRF's, but a value in the right format that names a day or a
time that does not exist (2026-02-30, 25:00) says so. DRF answers both that and a value in no
known format with "wrong format. Use one of these formats instead: ...", which sends a user who
typed a real format looking for a mistake they did not make."""

from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import serializers

NO_SUCH_DAY = "{value!r} is in the right format but is not a real {what}: {why}."


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


class DateTimeField(serializers.DateTimeField):
    def to_internal_value(self, value):
        try:
            return super().to_internal_value(value)
        except serializers.ValidationError:
            if why := _impossible(value, (parse_datetime, parse_date)):
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
