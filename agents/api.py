"""REST endpoints for nodes: the inventory and admin actions (for people), and the agent API
(register, heartbeat, events), which authenticates with a join token (to register a free node
name) or a node's own token instead of a user's."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import heartbeats, ingest, services, tokens
from agents.node_filters import ConsoleFilter, misused
from agents.protocol import MAX_GPUS, DocumentedHeartbeatSerializer, EventsSerializer, RegisterSerializer
from mlqueue import date_fields
from mlqueue.pagination import StrictCursorPagination as CursorPagination
from mlqueue.parsers import AgentEventsJSONParser
from mlqueue.serializer_fields import ChoiceField
from scheduling import node_health, nodes
from scheduling.models import AdminState, Node
from scheduling.spec import StrictBooleanField, StrictIntegerField, StrictSerializer, StrictStringField
from scheduling.states import ON_NODE
from teams.selectors import is_site_admin


def with_tasks(nodes):
    """Nodes with their tasks counted (NodeSerializer's `tasks`, `tasks_stopping`, `drained`)."""
    on_node = Q(tasks__state__in=ON_NODE)
    return nodes.annotate(
        active_tasks=Count("tasks", filter=on_node),
        stopping_tasks=Count("tasks", filter=on_node & ~Q(tasks__stop_reason="")),
    )


class NodeSerializer(serializers.ModelSerializer):
    """A node as an admin sees it. `tasks`, `tasks_stopping` and `drained` tell a drain that is
    done from one still going (QA: a drained, empty node read as a busy one): read from
    `with_tasks`' counts."""

    resource_class = serializers.CharField()
    tasks = serializers.IntegerField(source="active_tasks", help_text="tasks placed on it now (assigned or running)")
    tasks_stopping = serializers.IntegerField(
        source="stopping_tasks", help_text="of those, tasks asked to stop (a drain, a preemption, a cancel)"
    )
    drained = serializers.SerializerMethodField(
        help_text="DRAINING with no task left on it: the drain is done (Slurm's DRAINED), the node is free for work"
    )

    def get_drained(self, node: Node) -> bool:
        return node.admin_state == AdminState.DRAINING and node.active_tasks == 0

    class Meta:
        model = Node
        fields = [
            "name",
            "zone",
            "rack",
            "resource_class",
            "gpu_type",
            "gpu_count",
            "cpu_count",
            "memory_gb",
            "scratch_disk_gb",
            "labels",
            "state",
            "state_reason",
            "health",
            "admin_state",
            "admin_reason",
            "reclaim_deadline",
            "state_changed_at",
            "first_heartbeat_at",
            "task_isolation",
            "runs_images",
            "excluded_gpus",
            "tasks",
            "tasks_stopping",
            "drained",
        ]


class ByName(CursorPagination):
    ordering = "name"
    page_size = 500
    page_size_query_param = "limit"
    max_page_size = 5000


class NodeList(generics.ListAPIView):
    pagination_class = ByName
    serializer_class = NodeSerializer
    filterset_class = ConsoleFilter  # the console's filters: gpu_type=cpu, label, name too
    queryset = with_tasks(Node.objects.all())

    def list(self, request: Request, *args, **kwargs) -> Response:
        """As the console: a parameter that is no filter, or a repeated one-value filter, is a
        400 naming it (`?rack=a&rack=b` read the last rack alone)."""
        pages = {ByName.cursor_query_param, ByName.page_size_query_param, "format"}  # format: DRF's ?format=json
        if errors := misused(request.query_params, also=pages, empty_refused=True):
            raise serializers.ValidationError({name: [why] for name, why in errors.items()})
        return super().list(request, *args, **kwargs)


# --- admin actions -------------------------------------------------------------------------


def reason_field(**kwargs) -> StrictStringField:
    """An admin's reason, read in the audit log and on consoles: text without invisible or
    control characters (a zero-width space is not a reason)."""
    return StrictStringField(max_length=300, printable_only=True, **kwargs)


class NodeActionSerializer(StrictSerializer):
    reason = reason_field()
    wait = StrictBooleanField(required=False, default=False, help_text="drain: let running tasks finish")


class ReclaimNoticeSerializer(StrictSerializer):
    deadline = date_fields.DateTimeField()
    reason = reason_field(required=False, allow_blank=True, default="")

    def validate_deadline(self, value):
        """A spot notice comes minutes ahead (30 s to 2 min on the big clouds): a deadline past a
        day is a mistake, and work planned days ahead is a maintenance window's."""
        if value - timezone.now() > RECLAIM_NOTICE_AHEAD:
            raise serializers.ValidationError(RECLAIM_TOO_FAR)
        return value


RECLAIM_NOTICE_AHEAD = timedelta(hours=24)
RECLAIM_TOO_FAR = "must be within 24 hours from now (for work planned later, schedule a maintenance window)."


NOT_AN_ADMIN = "only site admins may cordon, drain, uncordon or reset nodes."
WAIT_IS_DRAINS = "only drain takes wait (let running tasks finish); {action} does not."


class NodeActionResultSerializer(NodeSerializer):
    changed = serializers.BooleanField(
        help_text="false: the node was already so (an uncordon of a node in service, a cordon or a drain again for "
        "the reason it has, nothing excluded to put back): nothing changed and nothing was recorded"
    )

    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="an uncordon: the faults that would cordon it that its latest health sample still reports",
    )

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "changed", "warnings"]


def _as_seen(node: Node) -> tuple:
    """What a node action can change: its admin state and reason, its excluded GPUs, its token,
    and how many of its tasks are asked to stop (a drain after a drain that let them run)."""
    return node.admin_state, node.admin_reason, node.excluded_gpus, node.token_digest, node.stopping_tasks


class NodeAction(APIView):
    action = ""
    body_serializer = NodeActionSerializer

    @extend_schema(
        request=NodeActionSerializer,
        responses={200: NodeActionResultSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request, name: str) -> Response:
        if not is_site_admin(request.user):
            raise exceptions.PermissionDenied(NOT_AN_ADMIN)
        get_object_or_404(Node, name=name)
        body = self.body(request)
        with transaction.atomic():
            # What an admin sees change (QA: `mlq uncordon` of a node in service said nothing of
            # it), read under the row's lock: of two cordons at once, the second changed nothing
            # (QA: four at once each answered `changed`).
            node = get_object_or_404(Node.objects.select_for_update(no_key=True), name=name)  # gone meanwhile: 404
            was = _as_seen(with_tasks(Node.objects).get(pk=node.pk))
            self.act(node, request.user, body)
            after = with_tasks(Node.objects).get(pk=node.pk)
            after.changed = was != _as_seen(after)
        after.warnings = node_health.faults_reported(after) if self.action == "uncordon" and after.changed else []
        return Response(NodeActionResultSerializer(after).data)

    def body(self, request: Request) -> dict:
        body = self.body_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        if self.action not in ("", "drain") and isinstance(request.data, dict) and "wait" in request.data:
            raise exceptions.ValidationError({"wait": [WAIT_IS_DRAINS.format(action=self.action)]})
        return body.validated_data

    def act(self, node: Node, user, body: dict) -> None:
        name = "drain_wait" if self.action == "drain" and body["wait"] else self.action.replace("-", "_")
        services.NODE_ACTIONS[name](node, user, body["reason"])


class ReclaimNotice(NodeAction):
    @extend_schema(
        request=ReclaimNoticeSerializer,
        responses={200: NodeActionResultSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)

    body_serializer = ReclaimNoticeSerializer

    def body(self, request: Request) -> dict:
        body = super().body(request)
        if body["deadline"] <= timezone.now():
            raise exceptions.ValidationError({"deadline": ["must be in the future."]})
        return body

    def act(self, node: Node, user, body: dict) -> None:
        nodes.do_reclaim_notice(node=node, user=user, deadline=body["deadline"], reason=body["reason"])


class IncludeGpusSerializer(StrictSerializer):
    reason = reason_field()
    gpus = serializers.ListField(
        child=StrictIntegerField(min_value=0, max_value=MAX_GPUS - 1),
        required=False,
        default=list,
        max_length=MAX_GPUS,
        help_text="the GPU indices to put back; empty or absent: every excluded GPU",
    )


class IncludeGpus(NodeAction):
    """Put GPUs excluded for a fault back into placement (the node page's button too)."""

    body_serializer = IncludeGpusSerializer

    @extend_schema(
        request=IncludeGpusSerializer,
        responses={200: NodeActionResultSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)

    def act(self, node: Node, user, body: dict) -> None:
        excluded = sorted(int(index) for index in node.excluded_gpus)
        if unknown := sorted(set(body["gpus"]) - set(excluded)):
            listed = ", ".join(map(str, excluded)) or "none"
            raise exceptions.ValidationError(
                {"gpus": [f"GPU {', '.join(map(str, unknown))} of {node.name} is not excluded (excluded: {listed})."]}
            )
        nodes.do_include_gpus(node=node, user=user, gpus=body["gpus"], reason=body["reason"])


NO_TARGETS = "select nodes (names) or a rack."


class BulkActionSerializer(StrictSerializer):
    """A bulk action's targets: `names`, a `rack` (or `racks`), or both (their union)."""

    action = ChoiceField(choices=services.BULK_ACTIONS)
    reason = reason_field()
    names = serializers.ListField(child=StrictStringField(max_length=253), required=False, max_length=5000)
    rack = StrictStringField(max_length=63, required=False)
    racks = serializers.ListField(child=StrictStringField(max_length=63), required=False, max_length=500)

    def validate(self, data: dict) -> dict:
        names = sorted(set(data.get("names", [])))
        racks = sorted(set(data.get("racks", [])) | ({data["rack"]} if data.get("rack") else set()))
        if not names and not racks:
            raise serializers.ValidationError({"names": [NO_TARGETS]})
        found = {node.name: node for node in Node.objects.filter(name__in=names)}
        if unknown := [name for name in names if name not in found]:
            raise serializers.ValidationError({"names": [f"no such node: {', '.join(unknown[:20])}."]})
        in_racks = list(Node.objects.filter(rack__in=racks))
        if empty := sorted(set(racks) - {node.rack for node in in_racks}):
            # Named as sent: an empty rack of `racks` was reported under `rack` (QA).
            field = "racks" if set(empty) & set(data.get("racks", [])) else "rack"
            raise serializers.ValidationError({field: [f"no node is in rack {', '.join(empty)}."]})
        targets = {**found, **{node.name: node for node in in_racks}}
        return {**data, "nodes": [targets[name] for name in sorted(targets)]}


class BulkResultSerializer(serializers.Serializer):
    action = serializers.CharField()
    count = serializers.IntegerField(help_text="how many nodes it changed")
    nodes = NodeSerializer(many=True, help_text="the nodes it changed")
    unchanged = serializers.ListField(child=serializers.CharField(), help_text="nodes it left as they were, by name")


class NodeBulkAction(APIView):
    """Cordon, drain or uncordon many nodes (a rack, or a list) with one reason: all or none,
    one audit entry per node."""

    @extend_schema(
        request=BulkActionSerializer,
        responses={200: BulkResultSerializer, 403: OpenApiResponse(description="not a site admin")},
    )
    def post(self, request: Request) -> Response:
        if not is_site_admin(request.user):
            raise exceptions.PermissionDenied(NOT_AN_ADMIN)
        body = BulkActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        action, done, unchanged = bulk_act(body.validated_data, request.user)
        done = list(with_tasks(Node.objects).filter(pk__in=[node.pk for node in done]).order_by("name"))
        return Response(
            {
                "action": action,
                "count": len(done),
                "nodes": NodeSerializer(done, many=True).data,
                "unchanged": [node.name for node in unchanged],
            }
        )


def bulk_act(body: dict, user) -> tuple[str, list[Node], list[Node]]:
    """The API's and the console's bulk action, from a validated BulkActionSerializer: the
    action, the nodes it changed and those it left as they were."""
    done, unchanged = services.do_bulk_node_action(
        nodes=body["nodes"], action=body["action"], user=user, reason=body["reason"]
    )
    return body["action"], done, unchanged


# --- the agent API ---------------------------------------------------------------------------


def bearer(request: Request) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    kind, _, raw = header.partition(" ")
    if kind.lower() != "bearer" or not raw:
        raise exceptions.NotAuthenticated("send 'Authorization: Bearer <token>'.")
    return raw.strip()


def node_for(request: Request, name: str) -> Node:
    """The node whose token this is; it may act only for itself."""
    node = tokens.node_by_token(bearer(request))
    if node is None:
        raise exceptions.AuthenticationFailed("invalid node token: register again.")
    if node.name != name:
        raise exceptions.PermissionDenied(f"this token belongs to node {node.name}; it cannot act for {name}.")
    return node


class AgentView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def get_authenticate_header(self, request):
        return "Bearer"  # so a missing or wrong token is a 401, not a 403


class AgentRegister(AgentView):
    @extend_schema(request=RegisterSerializer, responses={201: None})
    def post(self, request: Request) -> Response:
        raw = bearer(request)
        credential = services.check_registration_credential(raw)
        body = RegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        inventory = dict(body.validated_data)
        node, token = services.do_agent_register(
            name=inventory.pop("name"), inventory=inventory, credential=credential, raw=raw
        )
        return Response(
            {
                "node": node.name,
                "token": token,
                "heartbeat_interval_s": settings.MLQ_HEARTBEAT_INTERVAL_S,
                "lease_s": settings.MLQ_OUTAGE_BOUND_S,
            },
            status=201,
        )


class AgentHeartbeat(AgentView):
    @extend_schema(request=DocumentedHeartbeatSerializer, responses={200: None})
    def post(self, request: Request, name: str) -> Response:
        return Response(heartbeats.handle(name, request.META.get("HTTP_AUTHORIZATION", ""), request.data))


class AgentEvents(AgentView):
    parser_classes = [AgentEventsJSONParser]

    @extend_schema(request=EventsSerializer, responses={200: None})
    def post(self, request: Request, name: str) -> Response:
        node = node_for(request, name)
        body = EventsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(ingest.do_ingest_events(node=node, events=body.validated_data["events"]))
