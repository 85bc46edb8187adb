"""REST endpoints for maintenance windows (docs/maintenance.md), site admins only. Thin: parse,
call scheduling/maintenance.py, serialize."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue import date_fields
from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import check_parameters
from scheduling import maintenance
from scheduling.models import MaintenanceState, MaintenanceWindow
from scheduling.spec import StrictFloatField, StrictSerializer, StrictStringField
from teams.api import TeamEventSerializer
from teams.models import AuditEvent, EventKind
from teams.selectors import is_site_admin

NOT_AN_ADMIN = "only site admins may see or schedule maintenance windows."
REASON_LENGTH = maintenance.REASON_LENGTH
SHORTEST_HOURS = maintenance.SHORTEST.total_seconds() / 3600


class WindowSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    duration_hours = serializers.SerializerMethodField()

    class Meta:
        model = MaintenanceWindow
        fields = [
            "id",
            "target",
            "nodes",
            "starts_at",
            "ends_at",
            "duration_hours",
            "reason",
            "state",
            "drained",
            "created_by",
            "created_at",
            "started_at",
            "ended_at",
        ]

    def get_duration_hours(self, window: MaintenanceWindow) -> float:
        return round((window.ends_at - window.starts_at).total_seconds() / 3600, 3)


class WindowCreateSerializer(StrictSerializer):
    """The target (one of rack, zone, names), the start, and the end or the duration. Strict:
    an unknown field, a number for a string or true for a number is refused, not coerced."""

    rack = StrictStringField(max_length=63, required=False, allow_blank=True, default="")
    zone = StrictStringField(max_length=63, required=False, allow_blank=True, default="")
    names = serializers.ListField(child=StrictStringField(max_length=253), required=False, max_length=5000)
    starts_at = date_fields.DateTimeField()
    ends_at = date_fields.DateTimeField(required=False)
    duration_hours = StrictFloatField(required=False, min_value=SHORTEST_HOURS, max_value=24 * 30)
    reason = StrictStringField(max_length=REASON_LENGTH, printable_only=True)


class WindowChangeSerializer(StrictSerializer):
    """What a scheduled window may change: its times and its reason (not its nodes: cancel it
    and schedule another)."""

    starts_at = date_fields.DateTimeField(required=False)
    ends_at = date_fields.DateTimeField(required=False)
    duration_hours = StrictFloatField(required=False, min_value=SHORTEST_HOURS, max_value=24 * 30)
    reason = StrictStringField(max_length=REASON_LENGTH, required=False, printable_only=True)


def _admin_only(request: Request) -> None:
    if not is_site_admin(request.user):
        raise exceptions.PermissionDenied(NOT_AN_ADMIN)


class WindowList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=MaintenanceState.values, description="default: open ones")],
        responses={200: WindowSerializer(many=True), 403: OpenApiResponse(description="not a site admin")},
    )
    def get(self, request: Request) -> Response:
        """Windows soonest first: the open ones (scheduled, active), or those in `?state=` (repeat it for several)."""
        _admin_only(request)
        check_parameters(request.query_params, filters=["state"], multiple=["state"], paged=False)
        states = [value for value in request.query_params.getlist("state") if value]
        if unknown := [value for value in states if value not in MaintenanceState.values]:
            raise exceptions.ValidationError(
                {"state": [f"one of {', '.join(MaintenanceState.values)}, not {unknown[0]!r}."]}
            )
        windows = MaintenanceWindow.objects.select_related("created_by").order_by("starts_at", "id")
        windows = windows.filter(state__in=states or maintenance.OPEN)  # ?state=A&state=B: either
        return Response(WindowSerializer(windows[:500], many=True).data)

    @extend_schema(
        request=WindowCreateSerializer,
        responses={201: WindowSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request) -> Response:
        _admin_only(request)
        body = WindowCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        window = maintenance.do_schedule_window(user=request.user, **body.validated_data)
        return Response(WindowSerializer(window).data, status=status.HTTP_201_CREATED)


class WindowDetail(APIView):
    def window(self, request: Request, window_id: int) -> MaintenanceWindow:
        _admin_only(request)
        return get_object_or_404(MaintenanceWindow.objects.select_related("created_by"), pk=window_id)

    @extend_schema(responses={200: WindowSerializer, 403: OpenApiResponse(description="not a site admin")})
    def get(self, request: Request, window_id: int) -> Response:
        return Response(WindowSerializer(self.window(request, window_id)).data)

    @extend_schema(
        request=WindowChangeSerializer,
        responses={200: WindowSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def patch(self, request: Request, window_id: int) -> Response:
        """Move a scheduled window or change its reason (409 once it has started)."""
        window = self.window(request, window_id)
        body = WindowChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        window = maintenance.do_change_window(window=window, user=request.user, changes=body.validated_data)
        return Response(WindowSerializer(window).data)

    @extend_schema(responses={200: WindowSerializer, 403: OpenApiResponse(description="not a site admin")})
    def delete(self, request: Request, window_id: int) -> Response:
        """Cancel: a scheduled window never starts; an active one ends now (409 if over)."""
        window = maintenance.do_cancel_window(window=self.window(request, window_id), user=request.user)
        return Response(WindowSerializer(window).data)


class WindowEvents(generics.ListAPIView):
    """A window's history, newest first: scheduled, changed, started, ended, cancelled (`kind`
    MAINTENANCE, who, and `data` with its nodes and times then). Site admins only."""

    serializer_class = TeamEventSerializer
    pagination_class = NewestFirst
    filter_backends = []

    def get_queryset(self):
        _admin_only(self.request)
        window = get_object_or_404(MaintenanceWindow, pk=self.kwargs["window_id"])
        check_parameters(self.request.query_params)
        return AuditEvent.objects.filter(kind=EventKind.MAINTENANCE, data__window=window.pk)

    @extend_schema(
        responses={200: TeamEventSerializer(many=True), 403: OpenApiResponse(description="not a site admin")}
    )
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)
