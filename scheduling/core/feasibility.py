"""Can a job ever run? Asked at submit against an empty cluster, so a job that no amount of
waiting would start is refused with a 400 instead of pending forever."""

from collections import defaultdict
from collections.abc import Iterable

from scheduling.core.model import JobShape, Node, Topology, Verdict, labels_match, tasks_per_node

NO_NODE_OF_TYPE = "no node in the cluster has gpu_type={kind}"
NO_CPU_NODES = "the cluster has no CPU nodes"
MORE_THAN_THE_CLUSTER = "asks {asked} {kind}; the cluster has {total}"
# what: "GPUs per task", "CPUs per task", "GB of memory per task" or "GB of scratch disk";
# unit: "", " CPUs" or " GB".
LARGER_THAN_ANY_NODE = "asks {asked} {what}; the largest {kind} node has {largest}{unit}"
NO_NODE_WITH_LABELS = "no {kind} node carries the labels {wanted} ({count} {kind} nodes)"
MORE_THAN_THE_MATCHING_NODES = "needs {what}; the matching {kind} nodes hold {count} at most"
MORE_THAN_ONE_ZONE = "needs {what} in one zone (a gang never spans zones); the largest zone, {zone}, holds {count}"
MORE_THAN_ONE_RACK = "require_same_rack needs {what} in one rack; the largest rack, {rack}, holds {count}"


def can_ever_run(shape: JobShape, nodes: Iterable[Node]) -> Verdict:
    """Checks, in order: the resource class exists, the totals, one task on the largest node,
    the node selector, one zone per gang, and one rack when the hint requires it."""
    kind = shape.gpu_type or "CPU"
    same_class = [n for n in nodes if n.gpu_type == shape.gpu_type]
    if not same_class:
        field = "resources.gpu_type" if shape.gpu_type else "resources.gpu_count"
        return Verdict(False, field, NO_NODE_OF_TYPE.format(kind=kind) if shape.gpu_type else NO_CPU_NODES)
    for check in (_check_totals, _check_largest_node, _check_selector):
        verdict = check(shape, same_class, kind)
        if not verdict.ok:
            return verdict
    matching = [n for n in same_class if labels_match(shape.node_selector, n.labels)]
    return _check_groups(shape, matching, kind)


def _check_totals(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    if shape.gpu_type:
        total = sum(n.gpus for n in nodes)
        if shape.gpu_count > total:
            return Verdict(
                False,
                "resources.gpu_count",
                MORE_THAN_THE_CLUSTER.format(asked=shape.gpu_count, kind=kind, total=total),
            )
    return Verdict(True)


def _check_largest_node(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    checks = (
        ("resources.gpus_per_task", shape.gpus_per_task, max(n.gpus for n in nodes), "GPUs per task", ""),
        ("resources.cpu_per_rank", shape.cpus_per_task, max(n.cpus for n in nodes), "CPUs per task", " CPUs"),
        (
            "resources.memory_per_rank_gb",
            shape.memory_gb_per_task,
            max(n.memory_gb for n in nodes),
            "GB of memory per task",
            " GB",
        ),
    )
    if all(n.scratch_disk_gb for n in nodes):  # 0: not known (see `Node.scratch_disk_gb`)
        checks += (
            (
                "resources.scratch_disk_gb",
                shape.scratch_disk_gb,
                max(n.scratch_disk_gb for n in nodes),
                "GB of scratch disk",
                " GB",
            ),
        )
    for field, asked, largest, what, unit in checks:
        if asked > largest:
            return Verdict(
                False, field, LARGER_THAN_ANY_NODE.format(asked=asked, what=what, kind=kind, largest=largest, unit=unit)
            )
    return Verdict(True)


def _check_selector(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    if any(labels_match(shape.node_selector, n.labels) for n in nodes):
        return Verdict(True)
    wanted = ", ".join(f"{k}={v}" for k, v in sorted(shape.node_selector.items()))
    return Verdict(False, "node_selector", NO_NODE_WITH_LABELS.format(kind=kind, wanted=wanted, count=len(nodes)))


def _check_groups(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    """A gang never spans zones; `require_same_rack` keeps it in one rack."""
    by_zone, by_rack = defaultdict(int), defaultdict(int)
    for n in nodes:
        fit = tasks_per_node(shape, gpus=n.gpus, cpus=n.cpus, memory_gb=n.memory_gb)
        if n.lacks_scratch(shape.scratch_disk_gb):
            fit = 0
        by_zone[n.zone] += fit
        by_rack[n.rack] += fit
    what = f"{shape.tasks} tasks of {shape.describe().split(' x ', 1)[1]}"
    zone, zone_fit = max(sorted(by_zone.items()), key=lambda kv: kv[1])
    if zone_fit < shape.tasks:
        if sum(by_zone.values()) < shape.tasks:
            return Verdict(
                False,
                "resources.gpu_count" if shape.gpu_type else "resources.tasks",
                MORE_THAN_THE_MATCHING_NODES.format(what=what, kind=kind, count=sum(by_zone.values())),
            )
        return Verdict(
            False,
            "resources.gpu_count" if shape.gpu_type else "resources.tasks",
            MORE_THAN_ONE_ZONE.format(what=what, zone=zone, count=zone_fit),
        )
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        rack, rack_fit = max(sorted(by_rack.items()), key=lambda kv: kv[1])
        if rack_fit < shape.tasks:
            return Verdict(False, "topology_hint", MORE_THAN_ONE_RACK.format(what=what, rack=rack, count=rack_fit))
    return Verdict(True)
