"""REST endpoints for the node inventory (the agent API joins this module later)."""
import django_filters
from rest_framework import generics, serializers
from rest_framework.pagination import CursorPagination

from agents.models import Node, NodeState


class NodeSerializer(serializers.ModelSerializer):
    resource_class = serializers.CharField()

    class Meta:
        model = Node
        fields = ["name", "zone", "rack", "resource_class", "gpu_type", "gpu_count", "cpu_count", "memory_gb",
                  "scratch_disk_gb", "labels", "state", "state_reason", "state_changed_at", "first_heartbeat_at"]


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
