"""Reads of the node inventory, in the policy core's terms."""

from scheduling.core import model as core
from scheduling.models import Node

INVENTORY_FIELDS = ("name", "zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "labels", "state")


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
    )


def inventory() -> list[core.Node]:
    """Every node the cluster knows, whatever its state: what an empty cluster could hold."""
    return [to_core_node(row) for row in Node.objects.values(*INVENTORY_FIELDS)]
