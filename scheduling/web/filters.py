import re
from datetime import UTC, timedelta

import django_filters
from django import forms
from django.forms.utils import ErrorDict, ErrorList
from django.utils import timezone
from django.utils.functional import cached_property
from django_filters.fields import IsoDateTimeField

from mlqueue import date_fields
from mlqueue.query_parameters import ChoicesFilter, IdFilter, refused_parameters
from scheduling.models import Job, JobState, Priority
from scheduling.selectors import ME, NO_VISIBLE_TEAM, owner_filter_refusal, visible_team_ids

NOT_A_TIME = "enter an ISO 8601 date-time (2026-04-20T09:00:00Z) or a time ago such as 30m, 12h or 7d."
NOT_IN_UTC_YEARS = "in UTC this is outside the years 1 to 9999: give a later or earlier time."
_AGO = re.compile(r"(\d{1,5})([mhd])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class TimeOrAgoField(IsoDateTimeField):
    """An ISO 8601 date-time, or a time ago ("7d": seven days before now), for the CLI."""

    default_error_messages = {"invalid": NOT_A_TIME, "overflow": NOT_IN_UTC_YEARS}

    def to_python(self, value):
        """In UTC: Python takes offsets up to ±23:59, PostgreSQL only to ±15:59, and a time
        with -19:00 reached the query as it was (a 500, found by QA). A lowercase t or z is
        read, and an offset past ±23:59 said to be one (mlqueue/date_fields.py)."""
        try:
            moment = super().to_python(date_fields.rfc3339_case(value))
        except forms.ValidationError:
            if why := date_fields.bad_offset(value):
                raise forms.ValidationError(why, code="invalid") from None
            raise
        try:
            return moment if moment is None else moment.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+01:00, 9999-12-31T23:00-02:00
            raise forms.ValidationError(self.error_messages["overflow"], code="overflow") from None

    def strptime(self, value, format):
        ago = _AGO.fullmatch(value.strip())
        if ago:
            return timezone.now() - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
        return super().strptime(value, format)


NOT_A_BOOLEAN = "true or false, not {value!r}."


class StrictBooleanField(forms.NullBooleanField):
    """true/false (1/0); anything else a 400, not the filter silently left out. A plain text
    widget: django-filter's boolean one reads any other value as no filter before this sees it."""

    widget = forms.TextInput

    def to_python(self, value):
        if value in (None, ""):
            return None
        found = super().to_python(value)
        if found is None:
            # The value as a param: Django formats the message with `%`, and a value holding one
            # ("100%") made that a TypeError, a 500 (found by QA).
            raise forms.ValidationError(NOT_A_BOOLEAN.replace("{value!r}", "%(value)s"), params={"value": repr(value)})
        return found


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class TimeFilter(django_filters.IsoDateTimeFilter):
    field_class = TimeOrAgoField


MULTIPLE = django_filters.MultipleChoiceFilter  # ChoicesFilter's base


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(method="in_team", help_text="the team's jobs (a division's: its teams')")
    state = ChoicesFilter(choices=JobState.choices)
    priority = ChoicesFilter(choices=Priority.choices)
    owner = django_filters.CharFilter(method="owned_by", help_text='a user name, or "me"')
    submitted_after = TimeFilter(field_name="submitted_at", lookup_expr="gte", help_text="submitted at or after")
    submitted_before = TimeFilter(field_name="submitted_at", lookup_expr="lt", help_text="submitted before")
    ended_after = TimeFilter(field_name="finished_at", lookup_expr="gte", help_text="ended at or after")
    parent = IdFilter(field_name="parent_id", of="job", help_text="the children of this group")
    schedule = IdFilter(field_name="schedule_id", of="schedule", help_text="the runs of this schedule")
    top_level = StrictBooleanFilter(
        field_name="parent", lookup_expr="isnull", help_text="true: groups and single jobs, not groups' children"
    )

    class Meta:
        model = Job
        fields = [
            "team",
            "state",
            "priority",
            "owner",
            "submitted_after",
            "submitted_before",
            "ended_after",
            "parent",
            "schedule",
            "top_level",
        ]

    def is_valid(self) -> bool:
        return super().is_valid() and not self.refused

    @property
    def errors(self) -> ErrorDict:
        """The filters' errors and the parameters refused before any filter reads them, each
        a 400 naming the parameter (DjangoFilterBackend raises them)."""
        errors = ErrorDict(self.form.errors)
        for name, why in self.refused.items():
            errors[name] = ErrorList([why])
        return errors

    @cached_property
    def refused(self) -> dict[str, str]:
        """A parameter that is no filter (`?teem=`, `?since=`: every job came back), a one-value
        filter given twice, and a team the caller sees no job of: one that does not exist and
        one it may not see get the same answer, so the list tells nobody which teams exist."""
        if not self.is_bound:
            return {}
        multiple = [name for name, found in self.base_filters.items() if isinstance(found, MULTIPLE)]
        refused = refused_parameters(self.data, filters=self.base_filters, multiple=multiple)
        team = self.form.cleaned_data.get("team") if not self.form.errors.get("team") else None
        if team and "team" not in refused and not self.team_ids:
            refused["team"] = NO_VISIBLE_TEAM.format(name=team)
        owner = self.form.cleaned_data.get("owner") if not self.form.errors.get("owner") else None
        user = getattr(self.request, "user", None)
        if owner and "owner" not in refused and user is not None and (why := owner_filter_refusal(user, owner)):
            refused["owner"] = why
        return refused

    @cached_property
    def team_ids(self) -> set[int]:
        """The `team` filter's team and the teams below it that the caller may see jobs of."""
        user = getattr(self.request, "user", None)
        return set() if user is None else visible_team_ids(user, self.form.cleaned_data["team"])

    def in_team(self, jobs, name, value):
        return jobs.filter(team_id__in=self.team_ids)

    def owned_by(self, jobs, name, value):
        """ "me": the caller, as bulk cancel's filter reads it (a token alone says who that is)."""
        user = getattr(self.request, "user", None)
        if value == ME and user is not None and user.is_authenticated:
            return jobs.filter(owner=user)
        return jobs.filter(owner__username=value)
