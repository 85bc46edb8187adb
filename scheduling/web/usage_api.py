"""REST endpoints for usage and prices: `GET /api/v1/usage` (JSON or CSV) and
`GET/POST /api/v1/prices`, `DELETE /api/v1/prices/{id}`. Thin: parse, call a selector or a
service, serialize."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue import date_fields
from mlqueue.query_parameters import check_parameters
from mlqueue.serializer_fields import ChoiceField, NoUnknownFields
from scheduling import accounting, pricing
from scheduling.accounting import BUCKETS, GROUPS, MAX_BUCKETS, UsageQuery, UsageReport, UsageRow
from scheduling.ledger import OUTCOMES
from scheduling.models import LostCause, Price, Priority, UsageRecord
from scheduling.selectors import ME, NO_SUCH_OWNER
from teams.models import Team
from teams.resources import canonical_class, known_classes, unknown_class_message
from teams.selectors import is_site_admin, may_name_owner, team_ids_of

DEFAULT_WINDOW = timedelta(days=30)
NO_SUCH_TEAM = "no team named {name!r}."
NOT_YOUR_TEAM = "only members of {team}, its leads and site admins may read its usage."
BAD_GROUP = "group by one or two of {choices} (at most one of day, week); got {value!r}."
TO_BEFORE_FROM = "must be later than from ({start})."
FROM_AFTER_NOW = "must be before to, which defaults to now ({now}): give a to later than from."
TOO_MANY_BUCKETS = "a report by {bucket} covers at most {limit} {bucket}s; this one covers {count}."
USAGE_PARAMETERS = ("from", "to", "team", "owner", "resource_class", "priority", "group_by", "format")  # json, csv
NO_PRICE = "give gpu_hour, cpu_hour or both: a price with neither makes the class free."


class UsageParams(serializers.Serializer):
    """The query string. `from` is a Python keyword, hence the field added in `get_fields`."""

    to = date_fields.DateTimeField(required=False, help_text="end of the window (exclusive); default now")
    team = serializers.CharField(required=False, max_length=63)
    owner = serializers.CharField(required=False, max_length=150)
    resource_class = serializers.CharField(required=False, max_length=24)
    priority = ChoiceField(choices=Priority.choices, required=False)
    group_by = serializers.CharField(required=False, default="team", max_length=40)

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = date_fields.DateTimeField(required=False, help_text="window start; default to - 30 days")
        return fields

    def validate_group_by(self, value: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in value.split(","))
        if not 1 <= len(names) <= 2 or any(n not in GROUPS for n in names) or len(set(names)) < len(names):
            raise ValidationError(BAD_GROUP.format(choices=", ".join(GROUPS), value=value))
        if sum(name in BUCKETS for name in names) > 1:
            raise ValidationError(BAD_GROUP.format(choices=", ".join(GROUPS), value=value))
        return names

    def validate_team(self, value: str) -> str:
        team = Team.objects.filter(name=value).first()
        if team is None:
            raise ValidationError(NO_SUCH_TEAM.format(name=value))
        user = self.context["user"]
        if not is_site_admin(user) and team.pk not in team_ids_of(user):
            raise PermissionDenied(NOT_YOUR_TEAM.format(team=value))
        return value

    def validate_owner(self, value: str) -> str:
        """Among the users the caller may see (all, for an admin; else the members of the
        caller's teams and those below): a name outside them is answered as one that does not
        exist, so the answer tells no one which user names exist. "me": the caller, as the jobs
        list's `owner=me` (`mlq usage --mine`)."""
        user = self.context["user"]
        if value == ME:
            return user.get_username()
        # A former member: their rows in the caller's teams still count.
        if not may_name_owner(user, value, UsageRecord.objects.filter(accounting.visible_to(user), owner_name=value)):
            raise ValidationError(NO_SUCH_OWNER.format(name=value))
        return value

    def validate_resource_class(self, value: str) -> str:
        """A known class in any case, as its canonical name ("gpu:h100" -> "gpu:H100", as
        MLQ_GPU_TYPES spells it): the ledger's rows keep that one."""
        return known_class(value)

    def validate(self, data: dict) -> dict:
        end = data.get("to") or self.context["now"]
        start = data.get("from") or accounting.window_start(end, DEFAULT_WINDOW)
        for name, moment in (("to", end), ("from", start)):  # a default from follows to: to's fault
            if moment >= accounting.LATEST:
                raise ValidationError({name: [accounting.TOO_LATE]})
            if moment < accounting.EARLIEST:
                raise ValidationError({name: [accounting.TOO_EARLY]})
        if end <= start:  # the field the caller gave: a from in the future with no to is from's fault
            if data.get("to"):
                raise ValidationError({"to": [TO_BEFORE_FROM.format(start=start.isoformat())]})
            raise ValidationError({"from": [FROM_AFTER_NOW.format(now=end.isoformat())]})
        bucket = next((name for name in data["group_by"] if name in BUCKETS), None)
        if bucket:
            count = len(accounting.stretches(start, end, bucket=bucket, cuts=()))
            if count > MAX_BUCKETS[bucket]:
                limit = MAX_BUCKETS[bucket]
                raise ValidationError({"from": [TOO_MANY_BUCKETS.format(bucket=bucket, limit=limit, count=count)]})
        return {**data, "from": start, "to": end}


def usage_query(request: Request, *, now) -> UsageQuery:
    """The report a request asks for, from its query string (400 naming the field), scoped to
    what its user may see. `group_by` given twice is the two of them, as `group_by=team,day`;
    any other parameter given twice, given empty, or not one of these is a 400 naming it."""
    check_parameters(request.query_params, filters=USAGE_PARAMETERS, multiple=["group_by"], paged=False)
    data = request.query_params.dict()
    if len(grouped := request.query_params.getlist("group_by")) > 1:  # ?group_by=team&group_by=day: team,day
        data["group_by"] = ",".join(grouped)
    params = UsageParams(data=data, context={"user": request.user, "now": now})
    params.is_valid(raise_exception=True)
    data = params.validated_data
    return UsageQuery(
        start=data["from"],
        end=data["to"],
        now=now,
        group_by=data["group_by"],
        visible=accounting.visible_to(request.user),
        team=data.get("team"),
        owner=data.get("owner"),
        resource_class=data.get("resource_class"),
        priority=data.get("priority"),
    )


def row_figures(row: UsageRow) -> dict:
    return {
        "gpu_hours": round(row.gpu_hours, 4),
        "cpu_hours": round(row.cpu_hours, 4),
        "cost": round(row.cost, 2),
        "lost_gpu_hours": row.lost_total,
        "lost_gpu_hours_by_cause": row.lost_gpu_hours,
        "jobs_by_outcome": row.job_outcomes,
        "attempts_by_outcome": row.outcomes,
        "attempts_started": row.started,
        "queue_wait_p50_s": _seconds(row.wait_p50_s),
        "queue_wait_p95_s": _seconds(row.wait_p95_s),
    }


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def report_json(report: UsageReport) -> dict:
    query = report.query
    return {
        "from": query.start,
        "to": query.end,
        "group_by": list(query.group_by),
        "currency": settings.MLQ_CURRENCY,
        "rows": [{**dict(zip(query.group_by, row.key, strict=True)), **row_figures(row)} for row in report.rows],
        "total": row_figures(report.total),
    }


CSV_FIGURES = (
    "gpu_hours",
    "cpu_hours",
    "cost",
    "lost_gpu_hours",
    *(f"lost_{cause}" for cause in LostCause.values),
    *(f"jobs_{outcome.lower()}" for outcome in OUTCOMES),
    *(f"attempts_{outcome.lower()}" for outcome in OUTCOMES),
    "attempts_started",
    "queue_wait_p50_s",
    "queue_wait_p95_s",
)


def report_csv(report: UsageReport) -> str:
    """One line per group, fixed columns (every cause and outcome, zero where none)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*report.query.group_by, *CSV_FIGURES])
    for row in report.rows:
        figures = row_figures(row)
        figures.update({f"lost_{cause}": row.lost_gpu_hours.get(cause, 0.0) for cause in LostCause.values})
        figures.update({f"jobs_{o.lower()}": row.job_outcomes.get(o, 0) for o in OUTCOMES})
        figures.update({f"attempts_{o.lower()}": row.outcomes.get(o, 0) for o in OUTCOMES})
        writer.writerow([*row.key, *("" if figures[name] is None else figures[name] for name in CSV_FIGURES)])
    return out.getvalue()


class UsageFiguresSerializer(serializers.Serializer):
    """A group's figures (row_figures), or the total's."""

    gpu_hours = serializers.FloatField()
    cpu_hours = serializers.FloatField()
    cost = serializers.FloatField(help_text="in `currency`, at the prices in force")
    lost_gpu_hours = serializers.FloatField(help_text="GPU-hours of work lost, all causes")
    lost_gpu_hours_by_cause = serializers.DictField(child=serializers.FloatField(), help_text="cause -> GPU-hours")
    jobs_by_outcome = serializers.DictField(child=serializers.IntegerField(), help_text="outcome -> jobs")
    attempts_by_outcome = serializers.DictField(child=serializers.IntegerField(), help_text="outcome -> attempts")
    attempts_started = serializers.IntegerField()
    queue_wait_p50_s = serializers.FloatField(allow_null=True, help_text="null: no wait to measure")
    queue_wait_p95_s = serializers.FloatField(allow_null=True, help_text="null: no wait to measure")


class UsageRowSerializer(UsageFiguresSerializer):
    """One group: its value of each `group_by` (only those), then its figures."""

    team = serializers.CharField(required=False)
    owner = serializers.CharField(required=False)
    resource_class = serializers.CharField(required=False)
    priority = serializers.CharField(required=False)
    day = serializers.DateField(required=False, help_text="the UTC day")
    week = serializers.DateField(required=False, help_text="the Monday (UTC) the week starts on")


class UsageReportSerializer(serializers.Serializer):
    """The usage report in JSON (report_json): the window, the grouping, a row per group and the total."""

    group_by = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField()
    rows = UsageRowSerializer(many=True)
    total = UsageFiguresSerializer()

    def get_fields(self):
        # "from" and "to" are keywords in Python: not class attributes
        bounds = {"from": serializers.DateTimeField(), "to": serializers.DateTimeField(help_text="exclusive")}
        return {**bounds, **super().get_fields()}


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, str) else JSONRenderer().render(data)


class Usage(APIView):
    renderer_classes = [JSONRenderer, CSVRenderer]

    def handle_exception(self, exc):
        """An error is JSON, said to be JSON, whatever format was asked for: a spreadsheet or a
        script reading `?format=csv` must not take `{"detail": ...}` for data."""
        response = super().handle_exception(exc)
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return response

    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="ISO date or time; default: to - 30 days"),
            OpenApiParameter("to", str, description="ISO date or time (exclusive); default: now"),
            OpenApiParameter("team", str),
            OpenApiParameter("owner", str, description='user name, or "me"'),
            OpenApiParameter("resource_class", str, description='"gpu:H100" (any case), or "cpu"'),
            OpenApiParameter("priority", str),
            OpenApiParameter("group_by", str, description="one or two of " + ", ".join(GROUPS)),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses={(200, "application/json"): UsageReportSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request) -> Response:
        """GPU-hours, CPU-hours, cost, lost GPU-hours by cause, jobs and attempts by outcome and
        queue wait p50/p95 from the usage ledger, grouped (docs/usage.md)."""
        report = accounting.usage_report(usage_query(request, now=timezone.now()))
        if request.accepted_renderer.format == "csv":
            name = f"usage-{report.query.start:%Y%m%d}-{report.query.end:%Y%m%d}.csv"
            headers = {"Content-Disposition": f'attachment; filename="{name}"'}
            return Response(report_csv(report), headers=headers)
        return Response(report_json(report))


class PriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Price
        fields = ["id", "resource_class", "gpu_hour", "cpu_hour", "effective_from", "set_by_name", "created_at"]
        read_only_fields = fields  # the answer's; a new price's body is NewPriceSerializer


def known_class(name: str) -> str:
    """The known class `name` spells in any case (teams.resources.canonical_class), or a 400
    saying which it may have meant: none matches, or nodes report both "h100" and "H100"."""
    known = known_classes()
    if (rclass := canonical_class(name, known)) is None:
        raise ValidationError(unknown_class_message(name, known))
    return rclass


class NewPriceSerializer(NoUnknownFields, serializers.Serializer):
    """A new price's body: a field it does not take (a typo, `effective_form`, or an answer's
    `id`) is refused, not a default silently taken, and so is a body with no price at all (a
    typo'd `gpu_hours` made the class free from now on)."""

    resource_class = serializers.CharField(max_length=24, help_text='"gpu:H100", or "cpu"')
    gpu_hour = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0, required=False)
    cpu_hour = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0, required=False)
    effective_from = date_fields.DateTimeField(required=False, help_text="default: now")

    def validate_resource_class(self, value: str) -> str:
        """In any case, stored by its canonical name ("gpu:h100" -> "gpu:H100"), as usage reads it."""
        return known_class(value)

    def validate_effective_from(self, value):
        """Within the years the usage report reads (scheduling/accounting.py)."""
        if value >= accounting.LATEST:
            raise ValidationError(accounting.TOO_LATE)
        if value < accounting.EARLIEST:
            raise ValidationError(accounting.TOO_EARLY)
        return value

    def validate(self, data: dict) -> dict:
        if "gpu_hour" not in data and "cpu_hour" not in data:
            raise ValidationError({"gpu_hour": [NO_PRICE], "cpu_hour": [NO_PRICE]})
        return data


PRICE_PARAMETERS = ("resource_class",)


class PriceList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("resource_class", str, description='one class\'s prices: "gpu:H100", or "cpu"')],
        responses=PriceSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Every price, by class and date (the costs' history); `resource_class`: one class's.
        Any other parameter, a repeated or an empty one, or a class that is neither known nor
        priced is a 400 naming it."""
        query = request.query_params
        check_parameters(query, filters=PRICE_PARAMETERS, paged=False)
        prices = Price.objects.all()
        if (rclass := query.get("resource_class")) is not None:
            known = known_classes()
            rclass = canonical_class(rclass, known) or rclass  # any case; a retired class as given
            prices = prices.filter(resource_class=rclass)
            # A retired class keeps its history; a typo, known to nothing, is said to be one.
            if rclass not in known and not prices.exists():
                raise ValidationError({"resource_class": [unknown_class_message(rclass, known)]})
        return Response(PriceSerializer(prices, many=True).data)

    @extend_schema(
        request=NewPriceSerializer,
        responses={201: PriceSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request) -> Response:
        """A new price for a class from `effective_from` (admins only): `gpu_hour`, `cpu_hour`
        or both (the other is 0)."""
        pricing.check_admin(request.user)  # 403 before any complaint about the body
        body = NewPriceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        now = timezone.now()
        price = pricing.do_set_price(
            user=request.user,
            resource_class=body.validated_data["resource_class"],
            gpu_hour=body.validated_data.get("gpu_hour", Decimal(0)),
            cpu_hour=body.validated_data.get("cpu_hour", Decimal(0)),
            effective_from=body.validated_data.get("effective_from") or now,
            now=now,
        )
        return Response(PriceSerializer(price).data, status=status.HTTP_201_CREATED)


class PriceDetail(APIView):
    @extend_schema(responses={204: None, 403: OpenApiResponse(description="not a site admin")})
    def delete(self, request: Request, price_id: int) -> Response:
        pricing.check_admin(request.user)
        pricing.do_remove_price(user=request.user, price=get_object_or_404(Price, pk=price_id), now=timezone.now())
        return Response(status=status.HTTP_204_NO_CONTENT)
