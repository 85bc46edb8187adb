"""Reads of the node inventory, in the policy core's terms."""

from django.db.models import Count, Min

from mlqueue.compiled import CompiledRead
from scheduling.core import model as core
from scheduling.models import Node

INVENTORY_FIELDS = (
    "name",
    "zone",
    "rack",
    "gpu_type",
    "gpu_count",
    "cpu_count",
    "memory_gb",
    "labels",
    "state",
    "scratch_disk_gb",
    "runs_images",
)
ALIKE_FIELDS = tuple(field for field in INVENTORY_FIELDS if field != "name")
# Nodes alike in all but their name: one row each, with the first one's name and how many.
ALIKE_NODES = CompiledRead(
    lambda: Node.objects.values_list(*ALIKE_FIELDS).annotate(name=Min("name"), count=Count("id")).order_by("name")
)


def to_core_node(row: dict) -> core.Node:
    return core.Node(
        name=row["name"],
        zone=row["zone"],
        rack=row["rack"],
        gpu_type=row["gpu_type"] or None,
        gpus=row["gpu_count"],
        cpus=row["cpu_count"],
        memory_gb=row["memory_gb"],
        labels=row["labels"] or {},
        state=core.NodeState(row["state"]),
        scratch_disk_gb=row["scratch_disk_gb"],
        runs_images=row["runs_images"],
    )


def inventory() -> list[core.Node]:
    """Every node the cluster knows, whatever its state: what an empty cluster could hold (every
    submit asks). Nodes alike in all but their name come in one row, counted, and stand in the
    list that many times under the first one's name: a fleet of 2,500 machines in a few dozen
    racks is a few dozen rows to read and decode, not 2,500, and never out of date."""
    rows = [dict(zip((*ALIKE_FIELDS, "name", "count"), row, strict=True)) for row in ALIKE_NODES.rows()]
    return [node for row in rows for node in [to_core_node(row)] * row["count"]]
