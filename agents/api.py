"""REST endpoints for nodes: the inventory and admin actions (for people), and the agent API
(register, heartbeat, events), which authenticates with the cluster's join token or a node's
own token instead of a user's."""
import hmac

import django_filters
from django.conf import settings
from django.db.models import Q
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import heartbeats, services
from agents.models import Node, NodeState, TaskLog
from agents.protocol import EventsSerializer, HeartbeatSerializer, RegisterSerializer
from scheduling import reports
from scheduling.models import Task
from teams.models import hash_token
from teams.selectors import is_site_admin


class NodeSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField()

    class Meta:
        model = Node
        fields = ["name", "zone", "rack", "resource_class", "gpu_type", "gpu_count", "cpu_count", "memory_gb",
                  "scratch_disk_gb", "labels", "state", "state_reason", "health", "admin_state", "admin_reason",
                  "reclaim_deadline", "state_changed_at", "first_heartbeat_at"]


class NodeFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=NodeState.choices)

    class Meta:
        model = Node
        fields = ["state", "zone", "rack", "gpu_type"]


class ByName(CursorPagination):
    ordering = "name"
    page_size = 500
    page_size_query_param = "limit"
    max_page_size = 5000


class NodeList(generics.ListAPIView):
    pagination_class = ByName
    serializer_class = NodeSerializer
    filterset_class = NodeFilter
    queryset = Node.objects.all()


# --- admin actions -------------------------------------------------------------------------

class NodeActionSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300)
    wait = serializers.BooleanField(required=False, default=False, help_text="drain: let running tasks finish")


class ReclaimNoticeSerializer(serializers.Serializer):
    deadline = serializers.DateTimeField()
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


NOT_AN_ADMIN = "only site admins may cordon, drain or uncordon nodes."


class NodeAction(APIView):
    action = ""

    @extend_schema(request=NodeActionSerializer, responses=NodeSerializer)
    def post(self, request: Request, name: str) -> Response:
        if not is_site_admin(request.user):
            raise exceptions.PermissionDenied(NOT_AN_ADMIN)
        node = get_object_or_404(Node, name=name)
        body = self.body(request)
        self.act(node, request.user, body)
        node.refresh_from_db()
        return Response(NodeSerializer(node).data)

    def body(self, request: Request) -> dict:
        body = NodeActionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return body.validated_data

    def act(self, node: Node, user, body: dict) -> None:
        if self.action == "cordon":
            services.do_cordon(node=node, user=user, reason=body["reason"])
        elif self.action == "uncordon":
            services.do_uncordon(node=node, user=user, reason=body["reason"])
        else:
            services.do_drain(node=node, user=user, reason=body["reason"], wait=body["wait"])


class ReclaimNotice(NodeAction):
    @extend_schema(request=ReclaimNoticeSerializer, responses=NodeSerializer)
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)

    def body(self, request: Request) -> dict:
        body = ReclaimNoticeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if body.validated_data["deadline"] <= timezone.now():
            raise exceptions.ValidationError({"deadline": ["must be in the future."]})
        return body.validated_data

    def act(self, node: Node, user, body: dict) -> None:
        services.do_reclaim_notice(node=node, user=user, deadline=body["deadline"], reason=body["reason"])


# --- the agent API ---------------------------------------------------------------------------

def bearer(request: Request) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    kind, _, raw = header.partition(" ")
    if kind.lower() != "bearer" or not raw:
        raise exceptions.NotAuthenticated("send 'Authorization: Bearer <token>'.")
    return raw.strip()


def node_for(request: Request, name: str) -> Node:
    """The node whose token this is; it may act only for itself."""
    node = Node.objects.filter(token_digest=hash_token(bearer(request))).first()
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
        join = settings.MLQ_AGENT_JOIN_TOKEN
        if not join:
            raise exceptions.PermissionDenied("agents cannot join: MLQ_AGENT_JOIN_TOKEN is not set on the server.")
        if not hmac.compare_digest(bearer(request).encode(), join.encode()):
            raise exceptions.AuthenticationFailed("wrong join token.")
        body = RegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        inventory = dict(body.validated_data)
        node, token = services.do_register_node(name=inventory.pop("name"), inventory=inventory)
        return Response({"node": node.name, "token": token, "heartbeat_interval_s": settings.MLQ_HEARTBEAT_INTERVAL_S,
                         "lease_s": settings.MLQ_AGENT_LEASE_S}, status=201)


class AgentHeartbeat(AgentView):
    @extend_schema(request=HeartbeatSerializer, responses={200: None})
    def post(self, request: Request, name: str) -> Response:
        return Response(heartbeats.handle(name, request.META.get("HTTP_AUTHORIZATION", ""), request.data))


class AgentEvents(AgentView):
    @extend_schema(request=EventsSerializer, responses={200: None})
    def post(self, request: Request, name: str) -> Response:
        node = node_for(request, name)
        body = EventsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        events = body.validated_data["events"]
        mine = self.tasks_of(node, events)
        logs = []
        for event in events:
            if (event["job_id"], event["rank"]) in mine:
                self.apply(event, logs)
        TaskLog.objects.bulk_create(logs, ignore_conflicts=True)
        return Response({"accepted": sum((e["job_id"], e["rank"]) in mine for e in events)})

    @staticmethod
    def tasks_of(node: Node, events: list[dict]) -> set[tuple[int, int]]:
        """The events' tasks that run on this node, or ran here and were since released (late
        log chunks); a node cannot report for another node's tasks."""
        job_ids = {e["job_id"] for e in events}
        rows = Task.objects.filter(job_id__in=job_ids).filter(Q(node=node) | Q(node__isnull=True))
        return set(rows.values_list("job_id", "rank"))

    @staticmethod
    def apply(event: dict, logs: list) -> None:
        job_id, rank, attempt = event["job_id"], event["rank"], event["attempt"]
        if event["type"] == "started":
            reports.do_report_started(job_id=job_id, rank=rank, attempt=attempt)
        elif event["type"] == "exited":
            reports.do_report_exited(job_id=job_id, rank=rank, attempt=attempt, exit_code=event["exit_code"],
                                     signal=event["signal"])
        elif event["type"] == "checkpoint":
            reports.do_report_checkpoint(job_id=job_id, attempt=attempt)
        elif event["data"] and event["offset"] < settings.MLQ_MAX_LOG_CHARS:
            # Past the cap the rest of a stream is dropped: the agent keeps the whole file.
            logs.append(TaskLog(job_id=job_id, rank=rank, attempt=attempt, stream=event["stream"],
                                offset=event["offset"], text=event["data"]))
