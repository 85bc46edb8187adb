"""The fleet a submit is checked against: nodes alike in all but their name read as one counted
row, yet the same nodes, labels and states as reading every row."""

from scheduling.inventory import INVENTORY_FIELDS, inventory, to_core_node
from scheduling.models import Node


def alike(node) -> tuple:
    return (
        node.zone,
        node.rack,
        node.gpu_type,
        node.gpus,
        node.cpus,
        node.memory_gb,
        sorted(node.labels.items()),
        node.state,
    )


def test_the_inventory_is_every_node_once_whatever_labels_and_states_set_them_apart(demo):
    names = list(Node.objects.order_by("name").values_list("name", flat=True))
    Node.objects.filter(name__in=names[:5]).update(labels={"ib": "hdr"})
    Node.objects.filter(name__in=names[3:7]).update(state="CORDONED")
    every_row = [to_core_node(row) for row in Node.objects.values(*INVENTORY_FIELDS)]
    grouped = inventory()
    assert len(grouped) == len(every_row) == len(names)
    assert sorted(map(alike, grouped)) == sorted(map(alike, every_row))
    assert {node.name for node in grouped} <= set(names)  # each stands under a real node's name
