"""`GET /api/v1/forecast-accuracy?from=&to=&team=`: the start forecast's accuracy per week
(scheduling/forecast_accuracy.py), for site admins (every team, or `team`) and team leads (the
teams they lead and those below them, or one of them)."""

from datetime import UTC, datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue import date_fields
from mlqueue.query_parameters import refused_parameters
from scheduling.accounting import EARLIEST, LATEST, TOO_EARLY, TOO_LATE, window_start
from scheduling.forecast_accuracy import forecast_accuracy_by_week
from teams.models import Membership, Role, Team
from teams.selectors import descendant_ids, is_site_admin

DEFAULT_SPAN = timedelta(weeks=12)
LONGEST_SPAN = timedelta(weeks=53)
NOT_A_TIME = "enter an ISO 8601 date (2026-11-02) or date-time (2026-11-02T09:00:00Z)."
NOT_BEFORE_TO = "must be before `to` ({to})."
TOO_LONG = "at most 53 weeks at a time: from {start} to {end} is {days} days."
UNKNOWN_TEAM = "no team named {name!r}."
ONLY_LEADS = "only team leads and site admins may read the forecast's accuracy."
NOT_YOUR_TEAM = "you lead neither {name} nor a team above it."
PARAMETERS = ("from", "to", "team")


class WeekAccuracySerializer(serializers.Serializer):
    week = serializers.DateField(help_text="the Monday (UTC) the ISO week starts on")
    jobs = serializers.IntegerField(help_text="jobs that first started that week and had a forecast")
    first_median_error_s = serializers.FloatField(allow_null=True, help_text="of the first forecast, in seconds")
    last_median_error_s = serializers.FloatField(allow_null=True, help_text="of the last forecast before the start")
    first_within_bound = serializers.FloatField(
        allow_null=True, help_text='share started at or before the first forecast\'s "at the latest" start'
    )
    last_within_bound = serializers.FloatField(allow_null=True, help_text="the same for the last forecast")


class ForecastAccuracySerializer(serializers.Serializer):
    start = serializers.DateTimeField(source="from")
    end = serializers.DateTimeField(source="to")
    teams = serializers.ListField(child=serializers.CharField(), allow_null=True, help_text="null: every team")
    weeks = WeekAccuracySerializer(many=True)


def parse_moment(raw: str, field: str) -> datetime:
    """A date (its midnight, UTC) or a date-time (UTC when it names no zone), in UTC: Python
    takes offsets up to ±23:59, PostgreSQL only to ±15:59 (-19:00 was a 500)."""
    try:
        moment = parse_datetime(raw)
        if moment is None and (day := parse_date(raw)) is not None:
            moment = datetime.combine(day, time.min)
    except ValueError as exc:  # the shape of one, but no such day or time
        raise ValidationError({field: [date_fields.no_such_day(raw, exc)]}) from None
    if moment is None:
        raise ValidationError({field: [NOT_A_TIME]})
    moment = moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)
    if moment >= LATEST:
        raise ValidationError({field: [TOO_LATE]})
    if moment < EARLIEST:
        raise ValidationError({field: [TOO_EARLY]})
    return moment.astimezone(UTC)  # within the bounds: no overflow near the years 1 and 9999


def period_of(params) -> tuple[datetime, datetime]:
    end = parse_moment(params["to"], "to") if params.get("to") else timezone.now()
    start = parse_moment(params["from"], "from") if params.get("from") else window_start(end, DEFAULT_SPAN)
    if start >= end:
        raise ValidationError({"from": [NOT_BEFORE_TO.format(to=end.isoformat())]})
    if end - start > LONGEST_SPAN:
        raise ValidationError({"to": [TOO_LONG.format(start=start.date(), end=end.date(), days=(end - start).days)]})
    return start, end


def teams_for(user, name: str | None) -> list[str] | None:
    """The teams the answer covers, by name: None for every team (an admin asking for all)."""
    named = Team.objects.filter(name=name).values_list("pk", flat=True).first() if name is not None else None
    if name is not None and named is None:
        raise ValidationError({"team": [UNKNOWN_TEAM.format(name=name)]})
    # A division's jobs run in the teams below it: the answer for a team covers its subtree.
    subtree = [] if named is None else _names({named} | descendant_ids({named}))
    if is_site_admin(user):
        return None if name is None else subtree
    led = set(Membership.objects.filter(user=user, role=Role.LEAD).values_list("team_id", flat=True))
    if not led:
        raise PermissionDenied(ONLY_LEADS)
    names = _names(led | descendant_ids(led))
    if name is None:
        return names
    if name not in names:
        raise PermissionDenied(NOT_YOUR_TEAM.format(name=name))
    return subtree


def _names(team_ids: set[int]) -> list[str]:
    return sorted(Team.objects.filter(pk__in=team_ids).values_list("name", flat=True))


class ForecastAccuracy(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="ISO 8601 date or date-time; default: 12 weeks before `to`"),
            OpenApiParameter("to", str, description="ISO 8601 date or date-time, exclusive; default: now"),
            OpenApiParameter("team", str, description="one team (default: all you may read)"),
        ],
        responses=ForecastAccuracySerializer,
    )
    def get(self, request: Request) -> Response:
        """Takes `from`, `to` and `team`, each once: any other parameter, a repeated or an
        empty one is a 400 naming it (after who may ask: a member who leads nothing gets 403)."""
        query = request.query_params
        refused = refused_parameters(query, filters=PARAMETERS, paged=False)
        # Who may ask, before what: a refused team is not looked up.
        teams = teams_for(request.user, None if "team" in refused else query.get("team"))
        if refused:
            raise ValidationError({name: [why] for name, why in refused.items()})
        start, end = period_of(query)
        weeks = forecast_accuracy_by_week(start, end, teams)
        answer = {"from": start, "to": end, "teams": teams, "weeks": weeks}
        return Response(ForecastAccuracySerializer(answer).data)
