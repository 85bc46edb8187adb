"""REST endpoints for what-if previews of a quota change (docs/what-if.md). Thin: parse,
check who may, call scheduling/whatif.py, serialize.

    POST /api/v1/what-if        {team, resource_class, guaranteed?, borrowing_limit?, weight?, from, to}
                                -> 202 the preview (QUEUED); poll it (201 DONE: run in the request)
    GET  /api/v1/what-if/{id}   -> the preview: state, progress 0-1, and once DONE its figures
"""

import re

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue import date_fields
from mlqueue.query_parameters import check_parameters
from scheduling.core.model import CPU_CLASS
from scheduling.models import PreviewState, QuotaPreview
from scheduling.whatif import LEADS_NO_TEAM, NOT_A_LEAD, do_start_preview, may_preview_any, preview_for
from teams.models import Team
from teams.resources import known_classes, unknown_class_message
from teams.selectors import can_edit_quotas
from teams.serializers import QuotaChangeSerializer

NO_SUCH_TEAM = "no team named {name!r}."
NO_SUCH_PREVIEW = "no preview {id} of yours or of a team you lead."
CPU_NOT_REPLAYED = "a preview replays GPU jobs only (docs/what-if.md): choose a GPU class such as gpu:H100."
DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


class DayOrTimeField(date_fields.DateTimeField):
    """An ISO 8601 date-time, or a date (its midnight, UTC): what a date picker sends."""

    def to_internal_value(self, value):
        if isinstance(value, str) and DATE_ONLY.fullmatch(value.strip()):
            value = f"{value.strip()}T00:00:00Z"
        return super().to_internal_value(value)


class QuotaPreviewRequestSerializer(QuotaChangeSerializer):
    """One team's quota in one class as proposed (the fields left out keep their values), and
    the window of history to replay: jobs submitted from `from` up to `to`."""

    team = serializers.CharField(max_length=63)
    resource_class = serializers.CharField(max_length=24)

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = DayOrTimeField()  # a keyword in Python: not a class attribute
        fields["to"] = DayOrTimeField()
        return fields

    def validate_team(self, name: str) -> Team:
        team = Team.objects.select_related("parent").filter(name=name).first()
        if team is None:
            raise serializers.ValidationError(NO_SUCH_TEAM.format(name=name))
        return team

    def validate_resource_class(self, rclass: str) -> str:
        known = known_classes()
        if rclass not in known:
            raise serializers.ValidationError(unknown_class_message(rclass, known))
        if rclass == CPU_CLASS:  # the replay is of GPU jobs (docs/what-if.md): it could only show no change
            raise serializers.ValidationError(CPU_NOT_REPLAYED)
        return rclass


class QuotaPreviewSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    requested_by = serializers.CharField(source="requested_by.username")

    class Meta:
        model = QuotaPreview
        fields = [
            "id",
            "team",
            "resource_class",
            "current",
            "proposed",
            "window_start",
            "window_end",
            "requested_by",
            "state",
            "progress",
            "message",
            "result",
            "created_at",
            "started_at",
            "finished_at",
        ]


def start_preview(user, data) -> QuotaPreview:
    """Who may first (a lead of the named team or above, or an admin), then the body: a member
    learns nothing about the window from the errors of a preview it may not make."""
    name = data.get("team") if hasattr(data, "get") else None  # a body that is no object: the serializer says so
    team = Team.objects.select_related("parent").filter(name=name).first() if isinstance(name, str) else None
    if team is not None and not can_edit_quotas(user, team):
        raise PermissionDenied(NOT_A_LEAD.format(team=team.name))
    if team is None and not may_preview_any(user):
        raise PermissionDenied(LEADS_NO_TEAM)
    body = QuotaPreviewRequestSerializer(data=data)
    body.is_valid(raise_exception=True)
    values = dict(body.validated_data)
    start, end = values.pop("from"), values.pop("to")
    team, rclass = values.pop("team"), values.pop("resource_class")
    return do_start_preview(user=user, team=team, rclass=rclass, changes=values, start=start, end=end)


class QuotaPreviewCreate(APIView):
    @extend_schema(
        request=QuotaPreviewRequestSerializer,
        responses={
            201: OpenApiResponse(QuotaPreviewSerializer, description="run in the request (no broker): DONE or FAILED"),
            202: QuotaPreviewSerializer,
            403: OpenApiResponse(description="not a lead of the team (or of a team above it) nor a site admin"),
        },
    )
    def post(self, request: Request) -> Response:
        preview = start_preview(request.user, request.data)
        # 201 where it ran in the request (no broker: the embedded setup), 202 while a worker has it.
        done = preview.state in (PreviewState.DONE, PreviewState.FAILED)
        return Response(QuotaPreviewSerializer(preview).data, status=201 if done else status.HTTP_202_ACCEPTED)


class QuotaPreviewDetail(APIView):
    @extend_schema(responses=QuotaPreviewSerializer)
    def get(self, request: Request, preview_id: int) -> Response:
        preview = preview_for(request.user, int(preview_id))
        if preview is None:
            raise NotFound(NO_SUCH_PREVIEW.format(id=preview_id))
        check_parameters(request.query_params, paged=False)
        return Response(QuotaPreviewSerializer(preview).data)
