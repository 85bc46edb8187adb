"""One node through the API, for site admins: what its page shows (agents/pages.py `node_page`),
as `mlq node NAME` reads it (QA: an on-call admin at a terminal had the nodes' list and their
actions, but no node's health, tasks or history without the console)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api import NodeSerializer, with_tasks
from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import check_parameters
from scheduling import maintenance, node_health
from scheduling.models import Node, Task
from scheduling.states import ON_NODE
from teams.api import TeamEventSerializer
from teams.models import AuditEvent
from teams.selectors import is_site_admin

NOT_AN_ADMIN = "only site admins may see a node's tasks, health and history."
NOT_AN_ADMIN_RESPONSE = OpenApiResponse(description="not a site admin")


def _admin_node(request: Request, name: str, nodes=Node.objects) -> Node:
    if not is_site_admin(request.user):
        raise exceptions.PermissionDenied(NOT_AN_ADMIN)
    return get_object_or_404(nodes, name=name)


class NodeDetailSerializer(NodeSerializer):
    """The list's fields, and what the node's page adds: its address, its latest telemetry (one
    row per GPU; null when it sent none or Redis is away), the tasks on it and its open
    maintenance windows."""

    telemetry = serializers.SerializerMethodField()
    placed = serializers.SerializerMethodField(help_text="the tasks on it now, by job and rank")
    maintenance = serializers.SerializerMethodField(help_text="its scheduled and active maintenance windows")

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "address", "telemetry", "placed", "maintenance"]

    def get_telemetry(self, node: Node) -> dict | None:
        sample, age, rows = node_health.latest_of(node)
        if sample is None:
            return None
        return {
            "provider": sample.get("provider"),
            "error": sample.get("error") or "",
            "age_s": round(age, 1) if age is not None else None,
            "check": sample.get("check"),  # the health-check command's status, exit code, output
            "gpus": rows,
        }

    def get_placed(self, node: Node) -> list[dict]:
        tasks = Task.objects.filter(node=node, state__in=ON_NODE).order_by("job_id", "rank")
        rows = tasks.values(
            "job_id", "job__name", "job__team__name", "rank", "attempt", "state", "gpu_indices", "started_at"
        )
        renamed = {"job__name": "job_name", "job__team__name": "team"}
        return [{renamed.get(key, key): value for key, value in row.items()} for row in rows]

    def get_maintenance(self, node: Node) -> list[dict]:
        windows = maintenance.open_windows(node_name=node.name)
        fields = ("id", "state", "starts_at", "ends_at", "reason")
        return [{field: getattr(window, field) for field in fields} for window in windows]


class NodeDetail(APIView):
    @extend_schema(responses={200: NodeDetailSerializer, 403: NOT_AN_ADMIN_RESPONSE})
    def get(self, request: Request, name: str) -> Response:
        """One node: the list's fields, its address, latest telemetry, tasks and maintenance windows."""
        node = _admin_node(request, name, with_tasks(Node.objects.all()))
        check_parameters(request.query_params, paged=False)
        return Response(NodeDetailSerializer(node).data)


class NodeEvents(generics.ListAPIView):
    """A node's history, newest first: its registrations, state changes, cordons, drains and
    uncordons (who and why), health faults, GPUs excluded and put back, maintenance."""

    serializer_class = TeamEventSerializer
    pagination_class = NewestFirst
    filter_backends = []

    def get_queryset(self):
        node = _admin_node(self.request, self.kwargs["name"])
        check_parameters(self.request.query_params)
        return AuditEvent.objects.filter(node=node)

    @extend_schema(responses={200: TeamEventSerializer(many=True), 403: NOT_AN_ADMIN_RESPONSE})
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)
