import re
from datetime import timedelta

import django_filters
from django import forms
from django.utils import timezone
from django_filters.fields import IsoDateTimeField

from scheduling.models import Job, JobState, Priority
from teams.selectors import team_and_below_ids

NOT_A_TIME = "enter an ISO 8601 date-time (2026-04-20T09:00:00Z) or a time ago such as 30m, 12h or 7d."
_AGO = re.compile(r"(\d{1,5})([mhd])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class TimeOrAgoField(IsoDateTimeField):
    """An ISO 8601 date-time, or a time ago ("7d": seven days before now), for the CLI."""

    default_error_messages = {"invalid": NOT_A_TIME}

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
            raise forms.ValidationError(NOT_A_BOOLEAN.format(value=value))
        return found


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class TimeFilter(django_filters.IsoDateTimeFilter):
    field_class = TimeOrAgoField


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(method="in_team", help_text="the team's jobs (a division's: its teams')")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    priority = django_filters.MultipleChoiceFilter(choices=Priority.choices)
    owner = django_filters.CharFilter(method="owned_by", help_text='a user name, or "me"')
    submitted_after = TimeFilter(field_name="submitted_at", lookup_expr="gte", help_text="submitted at or after")
    submitted_before = TimeFilter(field_name="submitted_at", lookup_expr="lt", help_text="submitted before")
    ended_after = TimeFilter(field_name="finished_at", lookup_expr="gte", help_text="ended at or after")
    parent = django_filters.NumberFilter(field_name="parent_id", help_text="the children of this group")
    schedule = django_filters.NumberFilter(field_name="schedule_id", help_text="the runs of this schedule")
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

    def in_team(self, jobs, name, value):
        return jobs.filter(team_id__in=team_and_below_ids(value))

    def owned_by(self, jobs, name, value):
        """ "me": the caller, as bulk cancel's filter reads it (a token alone says who that is)."""
        user = getattr(self.request, "user", None)
        if value == "me" and user is not None and user.is_authenticated:
            return jobs.filter(owner=user)
        return jobs.filter(owner__username=value)
