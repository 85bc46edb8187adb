"""The resource classes a quota may name: whatever the cluster can have, not a fixed list.

A class is `cpu`, or `gpu:<TYPE>` for each GPU type in MLQ_GPU_TYPES (what a spec may ask for)
and each one a registered node has reported (`ReportedGpuType`, recorded when a node registers),
so a GPU type added to the settings or brought by a new machine can be given quotas at once."""

from collections.abc import Iterable

from django.apps import apps
from django.conf import settings
from django.db.models import Sum

from scheduling.core.model import CPU_CLASS, gpu_type_of, resource_class
from teams.models import ReportedGpuType

UNKNOWN_CLASS = "unknown resource class {rclass!r}; known: {known}."
DID_YOU_MEAN = "unknown resource class {rclass!r}: did you mean {canonical!r}?"


def known_classes(*, node_classes: Iterable[str] = ()) -> list[str]:
    """Configured GPU classes in their configured order, then those only nodes report (by
    name), then cpu: the order the teams page lists them in. `node_classes`: classes the
    caller holds nodes of, added to those recorded."""
    reported = map(resource_class, ReportedGpuType.objects.values_list("name", flat=True))
    configured = list(dict.fromkeys(resource_class(gpu_type) for gpu_type in settings.MLQ_GPU_TYPES))
    others = sorted({*reported, *node_classes} - set(configured) - {CPU_CLASS})
    return [*configured, *others, CPU_CLASS]


def unknown_class_message(rclass: str, known: list[str]) -> str:
    """The refusal, listing the known classes by name so the right one is easy to spot, or
    naming it where only the case is wrong ("gpu:h100")."""
    canonical = canonical_class(rclass, known)
    if canonical is not None:
        return DID_YOU_MEAN.format(rclass=rclass, canonical=canonical)
    return UNKNOWN_CLASS.format(rclass=rclass, known=", ".join(sorted(known)))


def canonical_class(name: str, known: list[str]) -> str | None:
    """The known class `name` spells in any case ("GPU:h100" -> "gpu:H100", "CPU" -> "cpu"),
    a GPU type alone too ("h100" -> "gpu:H100", as `mlq quota --set` and docs/quotas.md take
    it), or None: none matches, or (nodes reporting both "h100" and "H100") several do."""
    if name in known:
        return name
    spelled = {name.casefold(), f"gpu:{name}".casefold()}
    matches = [rclass for rclass in known if rclass.casefold() in spelled]
    return matches[0] if len(matches) == 1 else None


def class_capacity(rclass: str) -> int:
    """The cluster's size in `rclass`: the GPUs of every registered node of its type (CPU
    cores of the nodes without GPUs for `cpu`), whatever the node's state, as a scheduler pass
    counts it. 0 while no node of the class has joined."""
    # By name, not imported: the nodes live in the layer above (as AuditEvent's foreign keys).
    nodes = apps.get_model("scheduling", "Node").objects.order_by()
    if rclass == CPU_CLASS:
        return nodes.filter(gpu_type="").aggregate(units=Sum("cpu_count"))["units"] or 0
    return nodes.filter(gpu_type=gpu_type_of(rclass)).aggregate(units=Sum("gpu_count"))["units"] or 0
