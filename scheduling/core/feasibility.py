"""Can a job ever run? Asked at submit against an empty cluster, so a job that no amount of
waiting would start is refused with a 400 instead of pending forever."""
from collections import defaultdict
from typing import Iterable

from scheduling.core.model import JobShape, Node, Topology, Verdict, labels_match, tasks_per_node


def can_ever_run(shape: JobShape, nodes: Iterable[Node]) -> Verdict:
    """Checks, in order: the resource class exists, the totals, one task on the largest node,
    the node selector, one zone per gang, and one rack when the hint requires it."""
    kind = shape.gpu_type or "CPU"
    same_class = [n for n in nodes if n.gpu_type == shape.gpu_type]
    if not same_class:
        field = "resources.gpu_type" if shape.gpu_type else "resources.gpu_count"
        return Verdict(False, field, f"no node in the cluster has gpu_type={kind}" if shape.gpu_type
                       else "the cluster has no CPU nodes")
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
            return Verdict(False, "resources.gpu_count", f"asks {shape.gpu_count} {kind}; the cluster has {total}")
    return Verdict(True)


def _check_largest_node(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    checks = (
        ("resources.gpus_per_task", shape.gpus_per_task, max(n.gpus for n in nodes), "GPUs per task", ""),
        ("resources.cpu_per_rank", shape.cpus_per_task, max(n.cpus for n in nodes), "CPUs per task", " CPUs"),
        ("resources.memory_per_rank_gb", shape.memory_gb_per_task, max(n.memory_gb for n in nodes),
         "GB of memory per task", " GB"),
    )
    for field, asked, largest, what, unit in checks:
        if asked > largest:
            return Verdict(False, field, f"asks {asked} {what}; the largest {kind} node has {largest}{unit}")
    return Verdict(True)


def _check_selector(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    if any(labels_match(shape.node_selector, n.labels) for n in nodes):
        return Verdict(True)
    wanted = ", ".join(f"{k}={v}" for k, v in sorted(shape.node_selector.items()))
    return Verdict(False, "node_selector", f"no {kind} node carries the labels {wanted} ({len(nodes)} {kind} nodes)")


def _check_groups(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    """A gang never spans zones; `require_same_rack` keeps it in one rack."""
    by_zone, by_rack = defaultdict(int), defaultdict(int)
    for n in nodes:
        fit = tasks_per_node(shape, gpus=n.gpus, cpus=n.cpus, memory_gb=n.memory_gb)
        by_zone[n.zone] += fit
        by_rack[n.rack] += fit
    what = f"{shape.tasks} tasks of {shape.describe().split(' x ', 1)[1]}"
    zone, zone_fit = max(sorted(by_zone.items()), key=lambda kv: kv[1])
    if zone_fit < shape.tasks:
        if sum(by_zone.values()) < shape.tasks:
            return Verdict(False, "resources.gpu_count" if shape.gpu_type else "resources.tasks",
                           f"needs {what}; the matching {kind} nodes hold {sum(by_zone.values())} at most")
        return Verdict(False, "resources.gpu_count" if shape.gpu_type else "resources.tasks",
                       f"needs {what} in one zone (a gang never spans zones); the largest zone, {zone}, holds {zone_fit}")
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        rack, rack_fit = max(sorted(by_rack.items()), key=lambda kv: kv[1])
        if rack_fit < shape.tasks:
            return Verdict(False, "topology_hint",
                           f"require_same_rack needs {what} in one rack; the largest rack, {rack}, holds {rack_fit}")
    return Verdict(True)
