"""REST endpoints for one's own notifications: the defaults (GET/PUT/PATCH
/api/v1/notifications/settings), the signing secret's rotation, and the delivery log
(GET /api/v1/notifications/deliveries?job=&status=&event=). Everyone sees only their own."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import NOT_AN_ID, is_id, refused_parameters
from notifications.models import Delivery, DeliveryStatus, Event
from notifications.selectors import deliveries_of
from notifications.services import do_rotate_secret, do_update_settings, settings_of
from notifications.spec import NotificationSettingsSerializer

NOT_A_JOB_ID = NOT_AN_ID.format(what="job")
CHOOSE_FROM = "must be one of {choices}."


class SettingsSerializer(serializers.Serializer):
    on = serializers.ListField(child=serializers.CharField())
    webhook = serializers.CharField()
    email = serializers.BooleanField()
    secret = serializers.CharField(help_text="signs every webhook: X-MLQ-Signature (docs/notifications.md)")
    secret_rotated_at = serializers.DateTimeField()


class DeliverySerializer(serializers.ModelSerializer):
    id = serializers.UUIDField(source="uuid")
    job = serializers.IntegerField(source="job_ref")

    class Meta:
        model = Delivery
        fields = [
            "id",
            "job",
            "event",
            "channel",
            "target",
            "status",
            "attempts",
            "last_status_code",
            "last_error",
            "next_try_at",
            "created_at",
            "delivered_at",
            "payload",
        ]


class NotificationSettingsView(APIView):
    @extend_schema(responses=SettingsSerializer)
    def get(self, request: Request) -> Response:
        """Your default subscription (for jobs without `notify`) and your webhook secret."""
        return Response(SettingsSerializer(settings_of(request.user)).data)

    @extend_schema(request=NotificationSettingsSerializer, responses=SettingsSerializer)
    def put(self, request: Request) -> Response:
        return self._change(request, partial=False)

    @extend_schema(request=NotificationSettingsSerializer, responses=SettingsSerializer)
    def patch(self, request: Request) -> Response:
        return self._change(request, partial=True)

    def _change(self, request: Request, *, partial: bool) -> Response:
        current = settings_of(request.user) if partial else None
        body = NotificationSettingsSerializer(current, data=request.data, context={"user": request.user})
        body.is_valid(raise_exception=True)
        changed = do_update_settings(user=request.user, **body.validated_data)
        return Response(SettingsSerializer(changed).data)


class RotateSecret(APIView):
    @extend_schema(request=None, responses=SettingsSerializer)
    def post(self, request: Request) -> Response:
        """A new webhook secret, in force at once; the old one signs nothing more."""
        return Response(SettingsSerializer(do_rotate_secret(user=request.user)).data)


class DeliveryList(generics.ListAPIView):
    serializer_class = DeliverySerializer
    pagination_class = NewestFirst
    queryset = Delivery.objects.none()  # for the schema; the real one is the caller's

    @extend_schema(
        parameters=[
            OpenApiParameter("job", int, description="one job's deliveries"),
            OpenApiParameter("status", str, enum=DeliveryStatus.values),
            OpenApiParameter("event", str, enum=Event.values),
        ]
    )
    def get(self, request, *args, **kwargs):
        """Your deliveries, newest first: each attempt's count, the last status code and error,
        and when the next attempt is due."""
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return self.queryset
        params = self.request.query_params
        if refused := refused_parameters(params, filters=["job", "status", "event"]):
            raise ValidationError({name: [why] for name, why in refused.items()})
        job = params.get("job")
        if job is not None and not is_id(job):
            raise ValidationError({"job": [NOT_A_JOB_ID]})
        for name, choices in (("status", DeliveryStatus.values), ("event", Event.values)):
            if params.get(name) is not None and params[name] not in choices:
                raise ValidationError({name: [CHOOSE_FROM.format(choices=", ".join(choices))]})
        return deliveries_of(
            self.request.user, job=int(job) if job else None, status=params.get("status"), event=params.get("event")
        )
