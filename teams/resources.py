"""The resource classes a quota may name: whatever the cluster can have, not a fixed list.

A class is `cpu`, or `gpu:<TYPE>` for each GPU type in MLQ_GPU_TYPES (what a spec may ask for)
and each one a registered node has reported (`ReportedGpuType`, recorded when a node registers),
so a GPU type added to the settings or brought by a new machine can be given quotas at once."""

from collections.abc import Iterable

from django.conf import settings

from scheduling.core.model import CPU_CLASS, resource_class
from teams.models import ReportedGpuType

UNKNOWN_CLASS = "unknown resource class {rclass!r}; known: {known}."


def known_classes(*, node_classes: Iterable[str] = ()) -> list[str]:
    """Configured GPU classes in their configured order, then those only nodes report (by
    name), then cpu: the order the teams page lists them in. `node_classes`: classes the
    caller holds nodes of, added to those recorded."""
    reported = map(resource_class, ReportedGpuType.objects.values_list("name", flat=True))
    configured = list(dict.fromkeys(resource_class(gpu_type) for gpu_type in settings.MLQ_GPU_TYPES))
    others = sorted({*reported, *node_classes} - set(configured) - {CPU_CLASS})
    return [*configured, *others, CPU_CLASS]


def unknown_class_message(rclass: str, known: list[str]) -> str:
    """The refusal, listing the known classes by name so the right one is easy to spot."""
    return UNKNOWN_CLASS.format(rclass=rclass, known=", ".join(sorted(known)))
