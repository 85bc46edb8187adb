"""Can a job ever run? Asked at submit against an empty cluster, so a job that no amount of
waiting would start is refused with a 400 instead of pending forever."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from scheduling.core.model import JobShape, Node, Topology, Verdict, labels_match, tasks_per_node

NO_NODE_OF_TYPE = "no node in the cluster has gpu_type={kind}"
NO_CPU_NODES = "the cluster has no CPU nodes"
MORE_THAN_THE_CLUSTER = "asks {asked} {kind}; the cluster has {total}"
# After MORE_THAN_THE_CLUSTER, where one gang gets less than the cluster (QA: "the cluster has
# 128" sent a user to 128 GPUs, refused in turn for the zone). group: "zone", or "rack" under
# require_same_rack.
AT_MOST_IN_ONE = ", and a gang runs in one {group}: {most} at most"
# what: "GPUs per task", "CPUs per task", "GB of memory per task" or "GB of scratch disk";
# unit: "", " CPUs" or " GB".
LARGER_THAN_ANY_NODE = "asks {asked} {what}; the largest {kind} node has {largest}{unit}"
NO_NODE_WITH_LABELS = "no {kind} node carries the labels {wanted} ({count} {kind} nodes)"
# After NO_NODE_WITH_LABELS, where the selector names `zone` or `rack` and no node has such a
# label: `mlq nodes` shows a node's zone and rack, which a selector does not match (QA).
TOPOLOGY_IS_NOT_A_LABEL = (
    "; zone and rack are not labels: a gang already runs in one zone, and topology_hint: require_same_rack "
    "keeps it in one rack"
)
TOPOLOGY_KEYS = ("zone", "rack")
# labelled: "" or " with the labels ib=ndr400".
NO_NODE_RUNS_IMAGES = (
    "no {kind} node{labelled} runs images ({count} {kind} nodes, their agents without a container runtime: "
    "mlqueue-agent --container-runtime podman or --container-hook); leave image out to run the command on the "
    "node itself"
)
# After a gang's verdict, where nodes that run no images were left out of it.
ONLY_NODES_RUNNING_IMAGES = " (counting the {count} of {total} such nodes that run images: the job names an image)"
MORE_THAN_THE_MATCHING_NODES = "needs {what}; the matching {kind} nodes hold {count} at most"
MORE_THAN_ONE_ZONE = (
    "needs {what} in one zone (a gang never spans zones); the largest zone, {zone}, holds {count} such tasks "
    "({units} {kind})"
)
MORE_THAN_ONE_RACK = "require_same_rack needs {what} in one rack; the largest rack, {rack}, holds {count}"
# A per-task field other than the job's GPUs (CPUs for a CPU job) keeps a zone's tasks below the
# job's. where: "the largest zone, z1," or "zone z2"; remedy: AT_MOST_FITS_PER_NODE, AT_MOST_FITS
# or NOTHING_ALONE_FITS. Alike nodes (the zone's nodes all of one size) get the per-node story.
ROOM_PER_NODE = (
    "{asked} {what} leaves room for {room} of {task} per node ({capacity}{unit}): "
    "{where} holds {count} such tasks, the job needs {tasks}; {remedy}"
)
ROOM_IN_ZONE = (
    "{asked} {what} leaves {where} room for {count} tasks of {task} (its {units} alone hold {alone}), "
    "the job needs {tasks}; {remedy}"
)
AT_MOST_FITS_PER_NODE = "{at_most} fits {count} per node"
AT_MOST_FITS = "{at_most} fits it"
NOTHING_ALONE_FITS = "{less} alone does not fit it"
ALSO_CAPPED_BY = " ({fields} {verb} it too)"  # verb: "caps" or "cap"


@dataclass(frozen=True)
class _Limit:
    """A per-task need besides the job's units, that may cap the tasks a node holds."""

    field: str  # the spec field blamed
    need: str  # the JobShape attribute
    has: str  # the Node attribute
    what: str
    unit: str
    at_most: str  # "{value} CPUs or fewer per task"
    less: str  # "fewer CPUs per task"


# In the order they are blamed when more than one binds.
LIMITS = (
    _Limit(
        "resources.cpu_per_rank",
        "cpus_per_task",
        "cpus",
        "CPUs per task",
        " CPUs",
        "{value} CPUs or fewer per task",
        "fewer CPUs per task",
    ),
    _Limit(
        "resources.memory_per_rank_gb",
        "memory_gb_per_task",
        "memory_gb",
        "GB of memory per task",
        " GB",
        "{value} GB of memory or less per task",
        "less memory per task",
    ),
    _Limit(
        "resources.scratch_disk_gb",
        "scratch_disk_gb",
        "scratch_disk_gb",
        "GB of scratch disk",
        " GB",
        "{value} GB of scratch disk or less",
        "less scratch disk",
    ),
)


def can_ever_run(shape: JobShape, nodes: Iterable[Node]) -> Verdict:
    """Checks, in order: the resource class exists, the totals, one task on the largest node,
    the node selector, a node that runs images for a job naming one, one zone per gang (on the
    nodes left), and one rack when the hint requires it."""
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
    if not shape.image:
        return _check_groups(shape, matching, kind)
    verdict = _check_images(shape, matching, kind)
    if not verdict.ok:
        return verdict
    able = [n for n in matching if not n.lacks_images(shape.image)]
    verdict = _check_groups(shape, able, kind)
    if verdict.ok or len(able) == len(matching):
        return verdict
    return replace(
        verdict, message=verdict.message + ONLY_NODES_RUNNING_IMAGES.format(count=len(able), total=len(matching))
    )


def _check_totals(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    if shape.gpu_type:
        total = sum(n.gpus for n in nodes)
        if shape.gpu_count > total:
            message = MORE_THAN_THE_CLUSTER.format(asked=shape.gpu_count, kind=kind, total=total)
            group = "rack" if shape.topology == Topology.REQUIRE_SAME_RACK else "zone"
            most = _most_in_one(shape, nodes, group)
            if 0 < most < total:
                message += AT_MOST_IN_ONE.format(group=group, most=most)
            return Verdict(False, "resources.gpu_count", message)
    return Verdict(True)


def _most_in_one(shape: JobShape, nodes: list[Node], group: str) -> int:
    """The most GPUs a gang of the job's tasks gets in one zone (or rack): the largest one's
    tasks of its shape, times its GPUs per task."""
    groups = _grouped(nodes, (lambda n: n.rack) if group == "rack" else (lambda n: n.zone))
    return max(_holds(shape, members) for members in groups.values()) * shape.gpus_per_task


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
    message = NO_NODE_WITH_LABELS.format(kind=kind, wanted=wanted, count=len(nodes))
    if any(key in shape.node_selector and not any(key in n.labels for n in nodes) for key in TOPOLOGY_KEYS):
        message += TOPOLOGY_IS_NOT_A_LABEL
    return Verdict(False, "node_selector", message)


def _check_images(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    """Nodes whose agents did not say (None) are taken to run images, as scratch disk 0."""
    if any(not n.lacks_images(shape.image) for n in nodes):
        return Verdict(True)
    wanted = ", ".join(f"{k}={v}" for k, v in sorted(shape.node_selector.items()))
    labelled = f" with the labels {wanted}" if wanted else ""
    return Verdict(False, "image", NO_NODE_RUNS_IMAGES.format(kind=kind, labelled=labelled, count=len(nodes)))


def _check_groups(shape: JobShape, nodes: list[Node], kind: str) -> Verdict:
    """A gang never spans zones; `require_same_rack` keeps it in one rack. A zone short of
    tasks while its GPUs alone would hold them is the binding per-task field's fault."""
    by_zone = _grouped(nodes, lambda n: n.zone)
    held = {zone: _holds(shape, members) for zone, members in by_zone.items()}
    what = f"{shape.tasks} tasks of {_task(shape)}"
    zone, zone_fit = max(sorted(held.items()), key=lambda kv: kv[1])
    if zone_fit < shape.tasks:
        if any(_fits(_units_only(shape), members) for members in by_zone.values()):
            return _other_limit_binds(shape, by_zone, held)
        if sum(held.values()) < shape.tasks:
            return Verdict(
                False,
                "resources.gpu_count" if shape.gpu_type else "resources.tasks",
                MORE_THAN_THE_MATCHING_NODES.format(what=what, kind=kind, count=sum(held.values())),
            )
        return Verdict(
            False,
            "resources.gpu_count" if shape.gpu_type else "resources.tasks",
            MORE_THAN_ONE_ZONE.format(
                what=what, zone=zone, count=zone_fit, units=zone_fit * getattr(shape, _units_need(shape)), kind=kind
            ),
        )
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        by_rack = {rack: _holds(shape, members) for rack, members in _grouped(nodes, lambda n: n.rack).items()}
        rack, rack_fit = max(sorted(by_rack.items()), key=lambda kv: kv[1])
        if rack_fit < shape.tasks:
            return Verdict(False, "topology_hint", MORE_THAN_ONE_RACK.format(what=what, rack=rack, count=rack_fit))
    return Verdict(True)


def _other_limit_binds(shape: JobShape, by_zone: dict[str, list[Node]], held: dict[str, int]) -> Verdict:
    """Blames, of the per-task fields that cap a zone's tasks, the first whose lowering alone
    (to the largest value that does it) fits the job; if none does, the one that caps most.
    The zone named is the one that largest value fits it in, else the one holding the most."""
    limits = [limit for limit in LIMITS if getattr(shape, limit.need) and limit.need != _units_need(shape)]
    for limit in limits:
        found = _largest_fitting(shape, limit, by_zone, held)
        if found is not None:
            value, zone = found
            return Verdict(False, limit.field, _room_message(shape, limit, zone, by_zone, held, value=value))
    # min() keeps the first of equals: the order of LIMITS breaks ties.
    limit = min(limits, key=lambda limit: max(_holds(_only(shape, limit), m) for m in by_zone.values()))
    zone = max(sorted(held.items()), key=lambda kv: kv[1])[0]
    also = _also_capped_by(shape, limit, limits, by_zone)
    return Verdict(False, limit.field, _room_message(shape, limit, zone, by_zone, held, value=None, also=also))


def _also_capped_by(shape: JobShape, limit: _Limit, limits: list[_Limit], by_zone) -> str:
    """The other fields that, alone beside the units, keep some zone below what its units hold."""
    units_only = _units_only(shape)
    fields = [
        other.field.removeprefix("resources.")
        for other in limits
        if other is not limit and any(_holds(_only(shape, other), m) < _holds(units_only, m) for m in by_zone.values())
    ]
    if not fields:
        return ""
    return ALSO_CAPPED_BY.format(fields=" and ".join(fields), verb="caps" if len(fields) == 1 else "cap")


def _largest_fitting(shape: JobShape, limit: _Limit, by_zone, held) -> tuple[int, str] | None:
    """The largest value of `limit`'s field, below the one asked, that fits the job in some
    zone, and that zone (of equal values, the one holding more tasks now, then by name).
    Fitting only gets easier as the value falls, so each zone's is found by bisection."""
    best = None
    for zone, members in sorted(by_zone.items()):
        low, high = 0, getattr(shape, limit.need) - 1  # low fits, or is 0: none found yet
        while low < high:
            middle = (low + high + 1) // 2
            if _fits(replace(shape, **{limit.need: middle}), members):
                low = middle
            else:
                high = middle - 1
        if low and (best is None or (low, held[zone]) > (best[0], held[best[1]])):
            best = (low, zone)
    return best


def _room_message(shape: JobShape, limit: _Limit, zone: str, by_zone, held, *, value: int | None, also="") -> str:
    """`value`: the field's largest that fits the job (in `zone`), None if none does alone;
    `also`: ALSO_CAPPED_BY's clause then. Alike nodes get the per-node story."""
    members = by_zone[zone]
    alike = len({(n.gpus, n.cpus, n.memory_gb, n.scratch_disk_gb) for n in members}) == 1
    at_most = limit.at_most.format(value=value)
    if value is None:
        remedy = NOTHING_ALONE_FITS.format(less=limit.less) + also
    elif alike:
        count = _node_holds(replace(shape, **{limit.need: value}), members[0])
        remedy = AT_MOST_FITS_PER_NODE.format(at_most=at_most, count=count)
    else:
        remedy = AT_MOST_FITS.format(at_most=at_most)
    where = f"the largest zone, {zone}," if held[zone] == max(held.values()) else f"zone {zone}"
    words = dict(asked=getattr(shape, limit.need), what=limit.what, task=_task(shape), where=where, remedy=remedy)
    words.update(count=held[zone], tasks=shape.tasks)
    if alike:
        node = members[0]
        room, capacity = _tasks(_node_holds(shape, node)), getattr(node, limit.has)
        return ROOM_PER_NODE.format(**words, room=room, capacity=capacity, unit=limit.unit)
    units, alone = "GPUs" if shape.gpu_type else "CPUs", _holds(_units_only(shape), members)
    return ROOM_IN_ZONE.format(**words, units=units, alone=alone)


def _grouped(nodes: list[Node], key) -> dict[str, list[Node]]:
    groups = defaultdict(list)
    for n in nodes:
        groups[key(n)].append(n)
    return groups


def _node_holds(shape: JobShape, node: Node) -> int:
    if node.lacks_scratch(shape.scratch_disk_gb):
        return 0
    return tasks_per_node(shape, gpus=node.gpus, cpus=node.cpus, memory_gb=node.memory_gb)


def _holds(shape: JobShape, nodes: list[Node]) -> int:
    return sum(_node_holds(shape, n) for n in nodes)


def _fits(shape: JobShape, zone: list[Node]) -> bool:
    """Whether the zone holds the job (in one of its racks, where the hint requires it)."""
    if _holds(shape, zone) < shape.tasks:
        return False
    if shape.topology != Topology.REQUIRE_SAME_RACK:
        return True
    return any(_holds(shape, rack) >= shape.tasks for rack in _grouped(zone, lambda n: n.rack).values())


def _units_need(shape: JobShape) -> str:
    return "gpus_per_task" if shape.gpu_type else "cpus_per_task"


def _units_only(shape: JobShape) -> JobShape:
    """The job as its units (GPUs, or a CPU job's CPUs) alone would place it."""
    others = {limit.need: 0 for limit in LIMITS if limit.need != _units_need(shape)}
    return replace(shape, **others)


def _only(shape: JobShape, limit: _Limit) -> JobShape:
    return replace(_units_only(shape), **{limit.need: getattr(shape, limit.need)})


def _task(shape: JobShape) -> str:
    return shape.describe().split(" x ", 1)[1]


def _tasks(count: int) -> str:
    return f"{count} task" if count == 1 else f"{count} tasks"
