"""The search for one job's victims among candidates already chosen and ordered
(preemption.py says who may go and in what order): each domain that could hold the job gets
its own victim set, the best set wins (see preemption.py's docstring)."""

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduling.core.model import PendingJob, RunningJob, Topology
from scheduling.core.placement import capacity
from scheduling.core.state import ClusterState, Slot
from scheduling.core.trial import Trial

if TYPE_CHECKING:
    from scheduling.core.preemption import Candidate, Claim, VictimPool

DOMAINS_TRIED = 4


@dataclass(frozen=True)
class VictimSet:
    victims: tuple[RunningJob, ...]
    domain: str
    score: tuple


def find_victims(
    state: ClusterState,
    job: PendingJob,
    candidates: "list[Candidate]",
    claim: "Claim",
    *,
    excess: dict[str, int],
    borrowed: set[int],
    now: float,
    memory: bool = False,
    pool: "VictimPool | None" = None,
    closed: frozenset[str] = frozenset(),
    every: list[VictimSet] | None = None,
) -> VictimSet | None:
    """The best set of victims whose removal lets `job` fit, or None if no set does.
    `candidates` come in `candidate_order`. `pool`: the pool they were drawn from, whose
    index of candidates by domain serves every search of the pass (else one is built for
    this search). `closed`: nodes `job` must not start on (maintenance.py): no victim there helps.
    `every`: if given, each domain's set found is added to it (the best is one of them)."""
    scope, place = _domain_map(state, job)
    free_by_domain, free_room = _free_slots_by_domain(state, job, place)
    needed = job.shape.units
    best, tried = None, 0
    for name, domain in _domains(state, pool, job.resource_class, scope, place, candidates, claim, excess):
        free = free_by_domain.get(name, {})
        # Most domains fail here (a search reaches ~15 for every one it tries): what a domain
        # could give back is summed before anything is built for it, reading its candidates
        # only until it would do.
        if not domain.could_give(needed - free_room.get(name, 0), free):
            continue  # even all its candidates gone would not make room
        trial = Trial(
            job,
            {slot: capacity(slot, job.shape) for slot in free if slot.ready},
            one_domain=True,
            joining=domain.hosts,
            closed=closed,
        )
        found = trial.fit_by_removing(domain.victims, domain.read)
        if found is None:
            continue
        victims = trial.put_back_unneeded(found)
        found_set = VictimSet(tuple(victims), name, _score(victims, borrowed, now, memory))
        if every is not None:
            every.append(found_set)
        if best is None or (found_set.score, name) < (best.score, best.domain):
            best = found_set
        tried += 1
        if tried == DOMAINS_TRIED:
            break
    return best


def _domain_map(state: ClusterState, job: PendingJob) -> tuple[str, dict[str, str] | None]:
    """The kind of domain for this job and node name -> the domain it belongs to (see
    `domain_of`); None: the node itself."""
    if job.shape.tasks == 1:
        return "node", None
    if job.shape.topology in (Topology.PREFER_SAME_RACK, Topology.REQUIRE_SAME_RACK):
        return "rack", state.rack_of
    return "zone", state.zone_of


def _domains(
    state: ClusterState,
    pool: "VictimPool | None",
    rclass: str,
    scope: str,
    place: dict[str, str] | None,
    ordered: "list[Candidate]",
    claim: "Claim",
    excess: dict[str, int],
) -> Iterator[tuple[str, "Domain | ReadDomain"]]:
    """Domains in the order of their best candidate, each with its candidates in order. For
    nodes, out of the pool's index of the whole class: a search reaches ~15 of the hundreds of
    nodes its candidates run on, each with a few, read at once (`Domain`). For racks and zones,
    out of the search's own candidates, indexed as the search reads them (`ReadDomain`): it
    reaches most of those domains, where its candidates are a few of the class's (measured on
    the seed-2500 forecast: 3-5x fewer), and a zone's first few candidates make room."""
    if place is None and pool is not None:
        members = pool.by_domain(rclass, scope, place)
        chosen = {candidate.job.job_id for candidate in ordered}
        for name in _nodes(ordered, len(members)):
            yield name, Domain(_allowed(members[name], chosen, claim, excess), state.slots)
        return
    spans = pool.spans.setdefault(scope, {}) if pool is not None else {}
    index = DomainIndex(ordered, place, spans, state.fleet.domains[scope] if place is not None else len(state.slots))
    for name in index.names():
        yield name, ReadDomain(_allowed(index.members(name), None, claim, excess), state.slots)


def _nodes(ordered: "list[Candidate]", count: int) -> Iterator[str]:
    """The nodes `ordered` run on, in order, out of the `count` any candidate runs on."""
    seen: set[str] = set()
    for candidate in ordered:
        if len(seen) == count:
            return  # every node any candidate runs on is out
        for task in candidate.job.tasks:
            if task.node not in seen:
                seen.add(task.node)
                yield task.node


class DomainIndex:
    """`index_by_domain` of a search's candidates, built only as far as the search reads it:
    the domains in the order of their first candidate, each domain's members in order."""

    def __init__(self, ordered: "list[Candidate]", place: dict[str, str] | None, spans: dict, most: int):
        """`most`: how many domains there are in all (once that many are found, no candidate
        left can bring another)."""
        self.rest, self.place, self.spans, self.most = iter(ordered), place, spans, most
        self.found: dict[str, list] = {}
        self.order: list[str] = []

    def names(self) -> Iterator[str]:
        at, order = 0, self.order
        while True:
            while at == len(order):
                if len(order) == self.most or not self._index_next():
                    return
            yield order[at]
            at += 1

    def members(self, name: str) -> Iterator[tuple]:
        at, found = 0, self.found[name]
        while True:
            while at == len(found):
                if not self._index_next():
                    return
            yield found[at]
            at += 1

    def _index_next(self) -> bool:
        """Index one more candidate; False when none is left."""
        for candidate in self.rest:
            for name, hosts, units in spans_of(candidate.job, self.place, self.spans):
                members = self.found.get(name)
                if members is None:
                    members = self.found[name] = []
                    self.order.append(name)
                members.append((candidate, hosts, units))
            return True
        return False


class Domain:
    """One domain's victims in candidate order, the nodes they run on there and the units they
    hold there, all read at once."""

    __slots__ = ("victims", "hosts", "units")

    def __init__(self, allowed: Iterable[tuple], slots: dict[str, Slot]):
        self.victims: list[RunningJob] = []
        self.hosts: dict[str, Slot] = {}
        self.units = 0
        for candidate, hosts, units in allowed:
            self.victims.append(candidate.job)
            self.units += units
            for node in hosts:
                self.hosts[node] = slots[node]

    def could_give(self, needed: int, free: dict[Slot, None]) -> bool:
        """Whether all its candidates gone would give back `needed` units, with the free room of
        the nodes they run on (but `free`'s, counted already)."""
        return self.units + sum(slot.free_units for slot in self.hosts.values() if slot not in free) >= needed

    def read(self, count: int) -> None:
        """All are read."""


class ReadDomain:
    """A `Domain` read off its members only as far as the search needs: whether the domain
    could make room at all reads until it could, a trial reads until the job fits (a zone
    holds most of a class's candidates, ~700 for a cold seed-2500 pass's CPU gangs, of which
    the first ones make room)."""

    __slots__ = ("victims", "hosts", "_allowed", "_slots")

    def __init__(self, allowed: Iterator[tuple], slots: dict[str, Slot]):
        self.victims: list[RunningJob] = []
        self.hosts: dict[str, Slot] = {}  # the nodes the victims read so far run on, there
        self._allowed, self._slots = allowed, slots

    def could_give(self, needed: int, free: dict[Slot, None]) -> bool:
        """Whether all its candidates gone would give back `needed` units, with the free room of
        the nodes they run on (but `free`'s, counted already)."""
        room = 0
        while room < needed:
            member = next(self._allowed, None)
            if member is None:
                return False
            room += member[2] + sum(slot.free_units for slot in self._add(member) if slot not in free)
        return True

    def read(self, count: int) -> None:
        """Read victims until `count` are, or none is left."""
        while len(self.victims) < count:
            member = next(self._allowed, None)
            if member is None:
                return
            self._add(member)

    def _add(self, member: tuple) -> list[Slot]:
        """Take in one more victim: the slots of the nodes it adds to `hosts`."""
        candidate, hosts, _ = member
        self.victims.append(candidate.job)
        added = []
        for node in hosts:
            if node not in self.hosts:
                added.append(self._slots[node])
                self.hosts[node] = added[-1]
        return added


def _allowed(members: Iterator[tuple], chosen: set[int] | None, claim: "Claim", excess: dict[str, int]) -> Iterator:
    """A domain's members (see `index_by_domain`) the search may take, in order: those in
    `chosen` (None: all). A candidate the job does not outrank (or outranks only within its
    team's excess: `Claim.bounded`) enters a domain only while its team's units taken there
    stay within the team's excess. `Claim.outranks` and `Claim.bounded` inlined, and a team
    that spends from itself alone (no division: see `Excess`) checked without a generator:
    a cold seed-2500 pass walked ~30,000 members here, ~25,000 of them counted against excess,
    before racks and zones were read as needed."""
    spent: dict[str, int] = {}  # per team (and division), the units taken from it by reclaim
    rank, started_by, guard = claim.rank, claim.started_by, claim.guard
    spend = getattr(excess, "spends", None) or {}
    for member in members:
        candidate = member[0]
        victim = candidate.job
        if chosen is not None and victim.job_id not in chosen:
            continue
        team = victim.team
        if not (candidate.rank > rank and victim.started_at <= started_by) or (guard is not None and team != guard):
            size, names = victim.units, spend.get(team)
            if not names:  # its own team alone
                total = spent.get(team, 0) + size
                if total > excess.get(team, 0):
                    continue
                spent[team] = total
            elif any(spent.get(name, 0) + size > excess.get(name, 0) for name in names):
                continue
            else:
                for name in names:
                    spent[name] = spent.get(name, 0) + size
        yield member


def index_by_domain(
    ordered: "list[Candidate]", place: dict[str, str] | None, spans: dict[int, tuple] | None = None
) -> dict[str, list]:
    """Domain -> (candidate, the nodes it runs on there, the units it holds there), in
    candidate order. `spans`: job id -> (its tasks, `place`, `_spans`) from earlier calls,
    used again while the job has the same tasks object and the map is the same one (a
    simulation keeps both across passes; the hosts dicts are only ever read)."""
    found: dict[str, list] = defaultdict(list)
    if spans is None:
        spans = {}
    for candidate in ordered:
        for name, hosts, units in spans_of(candidate.job, place, spans):
            found[name].append((candidate, hosts, units))
    return found


def spans_of(victim: RunningJob, place: dict[str, str] | None, spans: dict[int, tuple]) -> tuple:
    """`_spans`, kept in `spans` (see `index_by_domain`)."""
    kept = spans.get(victim.job_id)
    if kept is None or kept[0] is not victim.tasks or kept[1] is not place:
        kept = spans[victim.job_id] = (victim.tasks, place, _spans(victim, place))
    return kept[2]


def _spans(victim: RunningJob, place: dict[str, str] | None) -> tuple[tuple[str, dict[str, None], int], ...]:
    """The domains a running job has tasks in, in the order of its tasks: each with the nodes
    it runs on there and the units it holds there."""
    unit_is_gpu = victim.gpu_type is not None
    found: dict[str, tuple[dict[str, None], list[int]]] = {}
    for task in victim.tasks:
        name = task.node if place is None else place[task.node]
        hosts, units = found.setdefault(name, ({}, [0]))
        hosts[task.node] = None
        units[0] += len(task.gpu_indices) if unit_is_gpu else task.cpus
    return tuple((name, hosts, units[0]) for name, (hosts, units) in found.items())


def _free_slots_by_domain(
    state: ClusterState, job: PendingJob, place
) -> tuple[dict[str, dict[Slot, None]], dict[str, int]]:
    """For a gang, nodes with room for a task count too, though no victim runs there (a node
    with less room counts only if a victim on it gives the rest back). Also the free units
    of those nodes, per domain."""
    by_domain: dict[str, dict[Slot, None]] = defaultdict(dict)
    room: dict[str, int] = defaultdict(int)
    if place is None:
        return by_domain, room
    for slot in state.slots_by_free(job.resource_class, job.shape.units_per_task):
        name = place[slot.name]
        by_domain[name][slot] = None
        room[name] += slot.free_units
    return by_domain, room


def _score(victims: list[RunningJob], borrowed: set[int], now: float, memory: bool) -> tuple:
    return (
        sum(v.job_id not in borrowed for v in victims),
        sum(not v.checkpointing for v in victims),
        sum(v.preemptions for v in victims) if memory else 0,
        len(victims) if memory else 0,
        round(sum(v.hours_lost_if_stopped(now) for v in victims), 6),
        len(victims),
    )


def units_freed(victims: tuple[RunningJob, ...]) -> int:
    return sum(v.units for v in victims)
