"""Fleets for the simulator and the benchmarks: named fleets from the planning figures and
uniform custom ones, laid out in racks and zones. Pure Python, like the core."""

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduling.core.model import Node, NodeState


@dataclass(frozen=True, slots=True)
class Machine:
    """One kind of host as bought: what every node of the kind carries."""

    gpu_type: str | None
    gpus: int
    cpus: int
    memory_gb: int
    labels: Mapping[str, str] = field(default_factory=dict)


MACHINES = {
    "H100": Machine("H100", 8, 192, 2048, {"ib": "ndr400"}),
    "A100": Machine("A100", 8, 128, 1024, {"ib": "hdr200"}),
    "L40S": Machine("L40S", 8, 64, 512),
}
CPU_MACHINE = Machine(None, 0, 96, 384)
GPU_MIX = (("H100", 0.7), ("A100", 0.2), ("L40S", 0.1))
# A real fleet always has a few nodes out, which exercises the scheduler's node filters.
UNHEALTHY_FRACTION = 0.01


# --- fleets -------------------------------------------------------------------------------


def build_fleet(name: str) -> list[Node]:
    """One of the named benchmark fleets; a ValueError names the known ones."""
    try:
        builder = FLEETS[name]
    except KeyError:
        raise ValueError(f"unknown fleet {name!r}; known fleets: {', '.join(FLEETS)}") from None
    return builder()


def custom_fleet(nodes: int, gpus_per_node: int, racks: int, zones: int, gpu_type: str = "H100") -> list[Node]:
    """A uniform fleet for scaling runs: alike nodes spread evenly over racks and zones, all
    READY, so its size is the only thing that changes between runs. 0 GPUs gives CPU hosts."""
    if racks < 1 or zones < 1:
        raise ValueError("a fleet needs at least one rack and one zone")
    return _lay_out([_custom_machine(gpus_per_node, gpu_type)] * nodes, racks=racks, zones=zones)


def _seed_2500() -> list[Node]:
    """500 8-GPU hosts in racks of ~16 and 2,000 CPU hosts in racks of ~40, over 2 zones."""
    gpu_hosts = _lay_out(_gpu_hosts(500), racks=31, zones=2)
    cpu_hosts = _lay_out([CPU_MACHINE] * 2000, racks=50, zones=2, first_rack=31)
    return _with_unhealthy(gpu_hosts + cpu_hosts)


def _seed_10k() -> list[Node]:
    """10,000 GPUs: 1,250 8-GPU hosts in 32 racks of ~39, 16 racks per zone."""
    return _with_unhealthy(_lay_out(_gpu_hosts(1250), racks=32, zones=2))


FLEETS: dict[str, Callable[[], list[Node]]] = {"seed-2500": _seed_2500, "seed-10k": _seed_10k}


def _gpu_hosts(total: int) -> list[Machine]:
    """`total` hosts split 70/20/10 H100/A100/L40S, in that order, so racks are one type but
    for the few at a boundary."""
    counts = apportion(total, [share for _, share in GPU_MIX])
    return [MACHINES[gpu_type] for (gpu_type, _), n in zip(GPU_MIX, counts, strict=True) for _ in range(n)]


def _custom_machine(gpus: int, gpu_type: str) -> Machine:
    """The named type's host scaled to `gpus` GPUs, keeping its CPUs and memory per GPU."""
    if gpus == 0:
        return CPU_MACHINE
    base = MACHINES[gpu_type]
    return Machine(gpu_type, gpus, base.cpus * gpus // base.gpus, base.memory_gb * gpus // base.gpus, base.labels)


def _lay_out(machines: Sequence[Machine], *, racks: int, zones: int, first_rack: int = 0) -> list[Node]:
    """Cuts the machines, in order, into `racks` near-equal racks; rack numbers continue from
    `first_rack` so several calls can share a fleet's zones without name clashes."""
    nodes, start = [], 0
    for offset, size in enumerate(apportion(len(machines), [1] * racks)):
        zone, rack = _rack_name(first_rack + offset, zones)
        nodes += [_node(machine, zone, rack, slot) for slot, machine in enumerate(machines[start : start + size], 1)]
        start += size
    return nodes


def _rack_name(index: int, zones: int) -> tuple[str, str]:
    """Racks alternate between zones, so every zone gets a share of every machine kind."""
    zone = f"z{index % zones + 1}"
    return zone, f"{zone}-r{index // zones + 1:02d}"


def _node(machine: Machine, zone: str, rack: str, slot: int) -> Node:
    return Node(
        f"{rack}-n{slot:02d}",
        zone,
        rack,
        machine.gpu_type,
        machine.gpus,
        machine.cpus,
        machine.memory_gb,
        dict(machine.labels),
    )


def _with_unhealthy(nodes: list[Node]) -> list[Node]:
    """Marks a deterministic 1% of the nodes CORDONED or SUSPECT (alternately)."""
    rng = random.Random(len(nodes))
    picked = sorted(rng.sample(range(len(nodes)), round(len(nodes) * UNHEALTHY_FRACTION)))
    states = (NodeState.CORDONED, NodeState.SUSPECT)
    for i, index in enumerate(picked):
        nodes[index] = replace(nodes[index], state=states[i % 2])
    return nodes


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Largest-remainder split of `total` by `weights`: the parts always sum to `total`."""
    exact = [total * w / sum(weights) for w in weights]
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: parts[i] - exact[i])
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts
