"""The resource classes a quota may name: whatever the cluster can have, not a fixed list.

A class is `cpu`, or `gpu:<TYPE>` for each GPU type in MLQ_GPU_TYPES (what a spec may ask for)
and each one a registered node reports (what the cluster holds), so a GPU type added to the
settings or brought by a new machine can be given quotas at once."""
from collections.abc import Iterable

from django.conf import settings

from agents.models import Node
from scheduling.core.model import resource_class

UNKNOWN_CLASS = "unknown resource class {rclass!r}; known: {known}."


def known_classes(*, node_classes: Iterable[str] | None = None) -> list[str]:
    """Configured GPU classes in their configured order, then those only nodes report (by
    name), then cpu: the order the teams page lists them in. `node_classes`: the nodes'
    classes when the caller has already read them."""
    if node_classes is None:
        node_classes = map(resource_class, Node.objects.exclude(gpu_type="").values_list("gpu_type", flat=True)
                           .order_by().distinct())
    cpu = resource_class(None)
    configured = list(dict.fromkeys(resource_class(gpu_type) for gpu_type in settings.MLQ_GPU_TYPES))
    reported = sorted(set(node_classes) - set(configured) - {cpu})
    return [*configured, *reported, cpu]


def unknown_class_message(rclass: str, known: list[str]) -> str:
    """The refusal, listing the known classes by name so the right one is easy to spot."""
    return UNKNOWN_CLASS.format(rclass=rclass, known=", ".join(sorted(known)))
