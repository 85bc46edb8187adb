"""Where a job fits now: filter (class, labels, ready, room), then score (best fit, fewest
racks and nodes). A gang is placed whole in one zone or not at all.

`plan()` only looks; `commit()` takes the resources. A `limit` lets the caller cap what a job
may use on a node (the room a reservation leaves to backfill).
"""

from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

from scheduling.core.model import JobShape, TaskPlacement, Topology, labels_match
from scheduling.core.state import ClusterState, Slot

Limit = Callable[[Slot], int | None]


class Extra(NamedTuple):
    """Resources a node would have back if some jobs stopped (for shadow starts and victims). A
    named tuple, not a frozen dataclass: victim searches make one per victim task they try,
    and a tuple is several times cheaper to make."""

    gpus: int = 0
    cpus: int = 0
    memory_gb: int = 0

    def __add__(self, other: "Extra") -> "Extra":
        return Extra(self.gpus + other.gpus, self.cpus + other.cpus, self.memory_gb + other.memory_gb)


NOTHING = Extra()


class Room(NamedTuple):
    """A node and how many of a job's tasks fit on it. A named tuple: a shadow start makes one
    per node with room each time it checks a layout."""

    slot: Slot
    tasks: int  # how many of the job's tasks fit on it

    @property
    def rack(self) -> str:
        return self.slot.node.rack


Plan = list[tuple[Slot, int]]


def capacity(slot: Slot, shape: JobShape, limit: Limit | None = None, extra: Extra = NOTHING) -> int:
    """Tasks of `shape` that fit in the slot's free resources plus `extra` (0 if it must not
    be used)."""
    if shape.node_selector and not labels_match(shape.node_selector, slot.node.labels):
        return 0
    gpus, cpus = len(slot.free_gpus) + extra.gpus, slot.free_cpus + extra.cpus
    cap = limit(slot) if limit else None
    if cap is not None:
        gpus, cpus = (min(gpus, cap), cpus) if shape.gpu_type else (gpus, min(cpus, cap))
    if shape.scratch_disk_gb and slot.node.lacks_scratch(shape.scratch_disk_gb):
        return 0
    if shape.image and slot.node.lacks_images(shape.image):
        return 0
    # `tasks_per_node`, inline (asked ~2,400 times a forecast's pass): the binding resource decides.
    memory_gb, per_task = slot.free_memory + extra.memory_gb, shape.memory_gb_per_task
    fit = memory_gb // per_task if per_task else 1 << 30
    if shape.gpus_per_task:
        fit = min(fit, gpus // shape.gpus_per_task)
    if shape.cpus_per_task:
        fit = min(fit, cpus // shape.cpus_per_task)
    return fit


def rooms(state: ClusterState, shape: JobShape, limit: Limit | None = None) -> list[Room]:
    """Ready nodes of the job's class with room for a task, gathered roomiest first until one
    group (a rack for rack hints, else a zone) could hold the whole gang; the rest of that free
    level is still read, so equal nodes compete fairly. Bounds the cost of placing a gang by
    the nodes it needs, not the size of the cluster. A spread gang reads them all: the zone
    that spreads it widest (most racks, then most nodes) may hold its least roomy nodes."""
    found: list[Room] = []
    held: dict[str, int] = defaultdict(int)
    by_rack = shape.topology in (Topology.REQUIRE_SAME_RACK, Topology.PREFER_SAME_RACK)
    spread = shape.topology == Topology.SPREAD
    for level in state.levels_roomiest_first(shape.resource_class, shape.units_per_task):
        for slot in level:
            tasks = capacity(slot, shape, limit)
            if tasks:
                found.append(Room(slot, tasks))
                held[slot.node.rack if by_rack else slot.node.zone] += tasks
        if held and not spread and max(held.values()) >= shape.tasks:
            break
    return sorted(found, key=lambda r: r.slot.name)


def plan(state: ClusterState, shape: JobShape, limit: Limit | None = None) -> Plan | None:
    """Nodes and task counts for the whole job, or None if it does not fit now."""
    if shape.units > state.free_units.get(shape.resource_class, 0):
        return None
    if shape.tasks == 1:
        return _plan_single(state, shape, limit)
    return plan_on(rooms(state, shape, limit), shape)


def _plan_single(state: ClusterState, shape: JobShape, limit: Limit | None) -> Plan | None:
    # Best fit: the node with the fewest free units that still holds the task.
    for slot in state.slots_by_free(shape.resource_class, shape.units_per_task):
        if capacity(slot, shape, limit) >= 1:
            return [(slot, 1)]
    return None


def plan_on(candidates: list[Room], shape: JobShape) -> Plan | None:
    """Choose among rooms already found: one zone, then the topology's rule."""
    by_zone: dict[str, list[Room]] = defaultdict(list)
    for room in candidates:
        by_zone[room.slot.node.zone].append(room)
    best = None
    for zone in sorted(by_zone):
        zone_rooms = by_zone[zone]
        if sum(r.tasks for r in zone_rooms) < shape.tasks:
            continue
        layout = _layout(zone_rooms, shape)
        if layout is not None and (best is None or _score(layout, shape) < _score(best, shape)):
            best = layout
    return [(room.slot, count) for room, count in best] if best else None


def plan_one(rooms: dict[Slot, int], topology: Topology) -> Plan | None:
    """`plan_on` for a job of one task, over each slot's room for it (those with none left
    out), without sorting the rooms: every layout is one node, so each zone's choice is read
    off its rooms in one pass (`_one_in`), and the zone whose node leaves the fewest tasks
    spare wins, the first by name on a tie (the score's racks and nodes are 1 for every zone).
    Over the bound forecast run 973 shadow starts of one task (most of them a preemptor's)
    each made Rooms of the ~7 nodes with room, sorted them and grouped them by zone and rack."""
    zones: dict[str, list[tuple[Slot, int]]] = {}
    for slot, tasks in rooms.items():
        if tasks > 0:
            found = zones.get(slot.node.zone)
            if found is None:
                found = zones[slot.node.zone] = []
            found.append((slot, tasks))
    best = None
    for zone in sorted(zones):
        chosen = _one_in(zones[zone], topology)
        if best is None or chosen[1] < best[1]:
            best = chosen
    return [(best[0], 1)] if best is not None else None


def _one_in(rooms: list[tuple[Slot, int]], topology: Topology) -> tuple[Slot, int]:
    """The node `_layout` gives one task in a zone: for a spread, the roomiest node of the
    first rack by name (`_spread`); for a rack hint, the tightest node of the tightest rack
    (`_pack` in the rack `_layout` picks); else the tightest node (`_pack`). Ties by name."""
    if topology == Topology.SPREAD:
        first = min(slot.node.rack for slot, _ in rooms)
        return min((room for room in rooms if room[0].node.rack == first), key=_roomiest)
    if topology in (Topology.REQUIRE_SAME_RACK, Topology.PREFER_SAME_RACK):
        sums: dict[str, int] = {}
        for slot, tasks in rooms:
            sums[slot.node.rack] = sums.get(slot.node.rack, 0) + tasks
        rack = min(sums, key=lambda name: (sums[name], name))
        rooms = [room for room in rooms if room[0].node.rack == rack]
    return min(rooms, key=_tightest)


def _roomiest(room: tuple[Slot, int]) -> tuple:
    return -room[1], room[0].name


def _tightest(room: tuple[Slot, int]) -> tuple:
    return room[1], room[0].name


def _score(layout: list[tuple[Room, int]], shape: JobShape) -> tuple:
    racks = len({room.rack for room, _ in layout})
    leftover = sum(room.tasks - count for room, count in layout)
    if shape.topology == Topology.SPREAD:
        return (-racks, -len(layout), leftover)
    return (racks, len(layout), leftover)


def _layout(zone_rooms: list[Room], shape: JobShape) -> list[tuple[Room, int]] | None:
    if shape.topology == Topology.SPREAD:
        return _spread(zone_rooms, shape.tasks)
    by_rack: dict[str, list[Room]] = defaultdict(list)
    for room in zone_rooms:
        by_rack[room.rack].append(room)
    whole = [rack for rack, rs in by_rack.items() if sum(r.tasks for r in rs) >= shape.tasks]
    if whole and shape.topology in (Topology.REQUIRE_SAME_RACK, Topology.PREFER_SAME_RACK):
        # The tightest rack that holds it all, keeping the roomier racks for bigger gangs.
        rack = min(whole, key=lambda name: (sum(r.tasks for r in by_rack[name]), name))
        return _pack(by_rack[rack], shape.tasks)
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        return None
    if shape.topology == Topology.PREFER_SAME_RACK:
        return _pack_fewest_racks(by_rack, shape.tasks)
    return _pack(zone_rooms, shape.tasks)


def _pack(candidates: list[Room], tasks: int) -> list[tuple[Room, int]] | None:
    """Fewest nodes: fill the roomiest nodes, then put the remainder on the tightest node
    that holds all of it (best fit)."""
    pool = sorted(candidates, key=lambda r: (-r.tasks, r.slot.name))
    chosen, remaining = [], tasks
    while remaining > 0 and pool:
        fitting = [r for r in pool if r.tasks >= remaining]
        if fitting:
            room = min(fitting, key=lambda r: (r.tasks, r.slot.name))
            chosen.append((room, remaining))
            return chosen
        room = pool.pop(0)
        chosen.append((room, room.tasks))
        remaining -= room.tasks
    return chosen if remaining <= 0 else None


def _pack_fewest_racks(by_rack: dict[str, list[Room]], tasks: int) -> list[tuple[Room, int]] | None:
    racks = sorted(by_rack, key=lambda name: (-sum(r.tasks for r in by_rack[name]), name))
    chosen, remaining = [], tasks
    for name in racks:
        rack_tasks = sum(r.tasks for r in by_rack[name])
        part = _pack(by_rack[name], min(rack_tasks, remaining))
        chosen += part or []
        remaining -= min(rack_tasks, remaining)
        if remaining == 0:
            return chosen
    return None


def _spread(zone_rooms: list[Room], tasks: int) -> list[tuple[Room, int]] | None:
    """One task per node, the racks taking turns (within a rack the roomiest node first),
    until every node has one; only then a second task per node, the same way, and so on. So
    a node takes more tasks only once every node of the zone with room has as many. None if
    the zone has room for fewer tasks than the job's."""
    by_rack: dict[str, list[Room]] = defaultdict(list)
    for room in sorted(zone_rooms, key=lambda r: (-r.tasks, r.slot.name)):
        by_rack[room.rack].append(room)
    counts: dict[Room, int] = defaultdict(int)
    remaining, level = tasks, 0
    while remaining > 0:
        # The nodes with room for one more task than `level`, per rack, in the rack's order.
        queues = [[room for room in by_rack[rack] if room.tasks > level] for rack in sorted(by_rack)]
        if not any(queues):
            return None
        while remaining > 0 and any(queues):
            for queue in queues:
                if queue and remaining > 0:
                    counts[queue.pop(0)] += 1
                    remaining -= 1
        level += 1
    return [(room, n) for room, n in counts.items() if n]


def commit(state: ClusterState, chosen: Plan, shape: JobShape) -> tuple[TaskPlacement, ...]:
    """Take the resources; ranks run in rack then node order so neighbours share a rack."""
    placements, rank = [], 0
    for slot, count in sorted(chosen, key=lambda sc: (sc[0].node.rack, sc[0].name)):
        for _ in range(count):
            placements.append(
                state.allocate(
                    slot,
                    rank=rank,
                    gpus=shape.gpus_per_task,
                    cpus=shape.cpus_per_task,
                    memory_gb=shape.memory_gb_per_task,
                )
            )
            rank += 1
    return tuple(placements)
