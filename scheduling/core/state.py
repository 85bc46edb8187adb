"""The working state of one pass: each node's free GPUs (by index), CPUs and memory, indexed by
resource class and by free amount, so finding room for a task does not scan every node.

A "unit" is what a resource class is counted in: GPUs for a GPU class, CPUs for `cpu`.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping

from scheduling.core.model import Node, NodeState, RunningJob, TaskPlacement

# Below this many running jobs, a refresh is cheap whatever it compares: always refresh.
SMALL = 100
# Per class, how many of the latest slot changes `changed_since` can name (then half are forgotten).
CHANGES_KEPT = 4096


class Slot:
    """One node's free resources during a pass (mutable; the Node itself is frozen)."""

    __slots__ = ("node", "name", "free_gpus", "free_cpus", "free_memory", "free_units", "ready", "rclass")

    def __init__(self, node: Node, gpus: list[int], ready: bool, rclass: str):
        """`gpus`: the node's GPU indices (copied: the slot takes them as it allocates).
        `name`: the node's, kept on the slot (sorts and look-ups read it ~100,000 times a
        forecast, where a property's call cost ~1%)."""
        self.node, self.free_gpus, self.free_cpus, self.free_memory = node, gpus[:], node.cpus, node.memory_gb
        self.name, self.ready, self.rclass = node.name, ready, rclass
        self.free_units = 0
        self.counted()

    def counted(self) -> None:
        """`free_units` made again from the free GPUs (CPUs for a CPU node): the free units,
        kept on the slot for the ~120,000 reads of a forecast's bound run; every change to
        the free GPUs or CPUs is followed by this (`ClusterState._reset`, `_take`)."""
        self.free_units = len(self.free_gpus) if self.node.gpu_type else self.free_cpus

    @property
    def total_units(self) -> int:
        """What the node can give out at most: excluded GPUs are not counted."""
        return self.node.gpus - len(self.node.excluded_gpus) if self.node.gpu_type else self.node.cpus


class Fleet:
    """What a pass derives from the nodes alone: their order, racks, zones, classes. Kept for
    the last fleet seen, so passes over the same nodes (a simulation's) derive it once."""

    __slots__ = ("nodes", "rows", "rack_of", "zone_of", "domains", "capacity")
    last: "Fleet | None" = None

    def __init__(self, nodes):
        self.nodes = nodes
        ordered = sorted(nodes, key=lambda n: n.name)
        self.rows = [(n.name, n, n.usable_gpus, n.state == NodeState.READY, n.resource_class) for n in ordered]
        self.rack_of = {n.name: n.rack for n in ordered}
        self.zone_of = {n.name: n.zone for n in ordered}
        self.domains = {"rack": len(set(self.rack_of.values())), "zone": len(set(self.zone_of.values()))}  # how many
        self.capacity: dict[str, int] = defaultdict(int)  # every node's units, per class
        for node in ordered:
            self.capacity[node.resource_class] += node.gpus if node.gpu_type else node.cpus

    @classmethod
    def of(cls, nodes) -> "Fleet":
        if not isinstance(nodes, tuple):
            return cls(nodes)
        found = cls.last
        if found is None or found.nodes is not nodes:
            found = Fleet.last = cls(nodes)
        return found


class ClusterState:
    """Free room per node, indexed. A pass may keep one between passes (see `Scheduler`):
    `refresh()` brings it up to date with the jobs running now, recomputing only the nodes
    whose jobs changed, and `rollback()` undoes a pass's allocations. Either way the index
    reads exactly as a fresh one: within a (class, free amount, rack) bucket, name order."""

    def __init__(self, nodes: Iterable[Node], running: Iterable[RunningJob] = ()):
        fleet = self.fleet = Fleet.of(nodes)
        self.journal: dict[Slot, tuple[list[int], int, int]] | None = None
        # Per class, how often a slot of it changed (allocated, given back, refreshed): on the
        # same state, an equal count means the same room, so what was read off it still holds.
        self.changes: dict[str, int] = defaultdict(int)
        # Per class, the slots behind the latest counts of `changes`, in order (see `changed_since`).
        self.changed: dict[str, list[str]] = defaultdict(list)
        self.changed_from: dict[str, int] = defaultdict(int)  # the count the kept log starts at
        self.running: dict[int, RunningJob] | None = None
        # What the last `refresh()` found had stopped and started: (as they were, as they are).
        self.last_moved: tuple[list[RunningJob], list[RunningJob]] | None = None
        self.slots: dict[str, Slot] = {}
        self.by_class: dict[str, list[Slot]] = defaultdict(list)
        self.named: dict[str, dict[str, Slot]] = {}  # per class, slots by node name (see `slots_named`)
        for name, node, gpus, ready, rclass in fleet.rows:
            slot = self.slots[name] = Slot(node, gpus, ready, rclass)
            self.by_class[rclass].append(slot)
        self.rack_of = fleet.rack_of  # shared, read-only
        self.zone_of = fleet.zone_of
        self.running_jobs = running = tuple(running)
        self._take_running(running)
        # rclass -> free units -> rack -> ready slots with that many free (dicts keep name order).
        self.buckets: dict[str, dict[int, dict[str, dict[Slot, None]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(dict))
        )
        self.free_units: dict[str, int] = defaultdict(int)
        self.rack_free: dict[str, int] = defaultdict(int)
        buckets, free_units, rack_free = self.buckets, self.free_units, self.rack_free
        for slot in self.slots.values():  # _index, inlined: this loop runs over every node each pass
            if slot.ready:
                node = slot.node
                free = len(slot.free_gpus) if node.gpu_type else slot.free_cpus
                buckets[slot.rclass][free][node.rack][slot] = None
                free_units[slot.rclass] += free
                rack_free[node.rack] += free

    def _take_running(self, running: Iterable[RunningJob]) -> None:
        """What runs already, summed per node first: one update per node, not per task."""
        used: dict[str, list] = {}
        for job in running:
            for task in job.tasks:
                entry = used.get(task.node)
                if entry is None:
                    entry = used[task.node] = [[], 0, 0]
                entry[0].extend(task.gpu_indices)
                entry[1] += task.cpus
                entry[2] += task.memory_gb
        for name, (gpus, cpus, memory_gb) in used.items():
            self._take(self.slots[name], gpus, cpus, memory_gb)

    def start_journal(self) -> None:
        """Record what allocations take from here on, so `rollback()` can give it back."""
        self.journal = {}

    def _note(self, jobs: Iterable[RunningJob]) -> None:
        for job in jobs:
            self.running[job.job_id] = job

    def rollback(self) -> None:
        """Undo every allocation since `start_journal()`."""
        touched = set()
        for slot, (gpus, cpus, memory_gb) in self.journal.items():
            self._reset(slot, gpus, cpus, memory_gb, touched)
        self._name_order(touched)
        self.journal = {}

    def refresh(self, running: tuple[RunningJob, ...], moved: Mapping[int, RunningJob | None] | None = None) -> bool:
        """Recompute the nodes of jobs that started, ended or moved since the last snapshot.
        False (and nothing done) when most running jobs are new objects, as from a snapshot
        built afresh: comparing their tasks would cost more than building a new state.
        `moved`: if the caller knows them, every job that may have started, ended or moved
        since the last refresh, each with what runs now under its id (None: nothing); then
        only those are compared, not every running job (a simulation's passes)."""
        if self.running is None:  # the first refresh: the running jobs by id, once
            self.running = {}
            self._note(self.running_jobs)
        if moved is not None:
            before = [(self.running.get(job_id), job) for job_id, job in moved.items()]
            changed = [old for old, job in before if old is not None and _moved(job, old)]
            new = [job for old, job in before if job is not None and _moved(old, job)]
        else:
            current = {job.job_id: job for job in running}
            identical = sum(self.running.get(j) is job for j, job in current.items())
            if len(current) > SMALL and 2 * identical < len(current):
                return False
            changed = [job for job_id, job in self.running.items() if _moved(current.get(job_id), job)]
            new = [job for job_id, job in current.items() if _moved(self.running.get(job_id), job)]
        for job in changed:
            del self.running[job.job_id]
        self._note(new)
        self.running_jobs = running
        self.last_moved = (changed, new)
        given, taken = _tasks_by_node(changed), _tasks_by_node(new)
        touched = set()
        for name in sorted(given.keys() | taken.keys()):
            self._move(self.slots[name], given.get(name, ()), taken.get(name, ()), touched)
        self._name_order(touched)
        return True

    def _move(self, slot: Slot, given: list[TaskPlacement], taken: list[TaskPlacement], touched: set) -> None:
        """The slot's room with what `given` held back and what `taken` hold gone: the room of
        every task on the node worked out again, read off the tasks that moved alone (outside a
        pass the slot holds exactly the room the running jobs leave, `rollback` sees to it).
        One loop over the tasks; a CPU node's GPU list (empty) is kept as it is (the lists are
        never changed in place: each change makes a new one)."""
        cpus, memory_gb, back, gone = slot.free_cpus, slot.free_memory, [], []
        for task in given:
            cpus += task.cpus
            memory_gb += task.memory_gb
            back += task.gpu_indices
        for task in taken:
            cpus -= task.cpus
            memory_gb -= task.memory_gb
            gone += task.gpu_indices
        gpus = slot.free_gpus
        if back or gone:
            free = set(gpus)
            free.update(back)
            free.difference_update(gone)
            gpus = [i for i in slot.node.usable_gpus if i in free]
        self._reset(slot, gpus, cpus, memory_gb, touched)

    def _count_change(self, slot: Slot) -> None:
        rclass = slot.rclass
        self.changes[rclass] += 1
        log = self.changed[rclass]
        log.append(slot.name)
        if len(log) > CHANGES_KEPT:  # only the latest are asked for: forget the older half
            dropped = len(log) // 2
            del log[:dropped]
            self.changed_from[rclass] += dropped

    def changed_since(self, rclass: str, count: int) -> list[str] | None:
        """The names of the slots of `rclass` that changed since its `changes` count was
        `count` (a name once per change), or None when that is too long ago to say."""
        start = count - self.changed_from[rclass]
        return None if start < 0 else self.changed[rclass][start:]

    def _reset(self, slot: Slot, gpus: list[int], cpus: int, memory_gb: int, touched: set) -> None:
        """`touched` gets the bucket the slot joins: the one it leaves stays in name order."""
        self._count_change(slot)
        if slot.ready:
            self._unindex(slot)
        slot.free_gpus, slot.free_cpus, slot.free_memory = gpus, cpus, memory_gb
        slot.counted()
        if slot.ready:
            touched.add(self._index(slot))

    def _name_order(self, touched: set) -> None:
        """Slots re-indexed go last in their bucket: put each bucket back in name order."""
        for rclass, free, rack in touched:
            level = self.buckets[rclass][free]
            if level.get(rack):
                level[rack] = dict.fromkeys(sorted(level[rack], key=lambda s: s.name))

    # `_index` and `_unindex` run for every slot change (~800 a forecast's pass): the free
    # units and the rack are read once each.
    def _index(self, slot: Slot) -> tuple[str, int, str]:
        """Returns the bucket the slot joined: (class, free units, rack)."""
        free, rack = slot.free_units, slot.node.rack
        self.buckets[slot.rclass][free][rack][slot] = None
        self.free_units[slot.rclass] += free
        self.rack_free[rack] += free
        return slot.rclass, free, rack

    def _unindex(self, slot: Slot) -> None:
        free, rack = slot.free_units, slot.node.rack
        level = self.buckets[slot.rclass][free]
        del level[rack][slot]
        if not level[rack]:
            del level[rack]
        self.free_units[slot.rclass] -= free
        self.rack_free[rack] -= free

    @staticmethod
    def _take(slot: Slot, gpu_indices, cpus: int, memory_gb: int) -> None:
        taken = set(gpu_indices)
        slot.free_gpus = [i for i in slot.free_gpus if i not in taken]
        slot.free_cpus -= cpus
        slot.free_memory -= memory_gb
        slot.counted()

    def allocate(self, slot: Slot, *, rank: int, gpus: int, cpus: int, memory_gb: int) -> TaskPlacement:
        """Give one task the node's lowest free GPU indices (stable, and what `nvidia-smi` shows first)."""
        indices = tuple(slot.free_gpus[:gpus])
        self._count_change(slot)
        if self.journal is not None and slot not in self.journal:
            self.journal[slot] = (slot.free_gpus, slot.free_cpus, slot.free_memory)
        if slot.ready:
            self._unindex(slot)
        self._take(slot, indices, cpus, memory_gb)
        if slot.ready:
            self._index(slot)
        return TaskPlacement(rank=rank, node=slot.name, gpu_indices=indices, cpus=cpus, memory_gb=memory_gb)

    def slots_named(self, rclass: str) -> dict[str, Slot]:
        """A class's slots by node name, ready or not (built on first use)."""
        found = self.named.get(rclass)
        if found is None:
            found = self.named[rclass] = {slot.name: slot for slot in self.by_class.get(rclass, ())}
        return found

    def ready_slots(self, rclass: str) -> Iterator[Slot]:
        return (s for s in self.by_class.get(rclass, ()) if s.ready)

    def slots_by_free(self, rclass: str, at_least: int) -> Iterator[Slot]:
        """Ready slots of a class with at least `at_least` free units: best fit first (fewest
        free units), and among equals those in the fullest racks, to keep empty racks for
        gangs. Stop iterating before allocating: the buckets change under an allocation."""
        buckets = self.buckets.get(rclass)
        if not buckets:
            return
        for free in sorted(f for f in buckets if f >= at_least and buckets[f]):
            level = buckets[free]
            for rack in sorted(level, key=lambda r: (self.rack_free[r], r)):
                yield from level[rack]

    def levels_roomiest_first(self, rclass: str, at_least: int) -> Iterator[list[Slot]]:
        """Ready slots with at least `at_least` free units, one list per free amount, the
        roomiest first (gangs want few nodes), racks with the most free room first."""
        buckets = self.buckets.get(rclass)
        if not buckets:
            return
        for free in sorted((f for f in buckets if f >= at_least and buckets[f]), reverse=True):
            level = buckets[free]
            yield [slot for rack in sorted(level, key=lambda r: (-self.rack_free[r], r)) for slot in level[rack]]


def _tasks_by_node(jobs: list[RunningJob]) -> dict[str, list[TaskPlacement]]:
    found: dict[str, list[TaskPlacement]] = {}
    for job in jobs:
        for task in job.tasks:
            found.setdefault(task.node, []).append(task)
    return found


def _moved(now: RunningJob | None, before: RunningJob | None) -> bool:
    """Whether a job holds other resources than it did (started, ended, or other tasks)."""
    if now is before:
        return False
    return now is None or before is None or now.tasks != before.tasks
