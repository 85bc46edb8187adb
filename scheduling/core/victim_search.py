"""The search for one job's victims among candidates already chosen and ordered
(preemption.py says who may go and in what order): each domain that could hold the job gets
its own victim set, the best set wins (see preemption.py's docstring)."""

from collections import defaultdict
from collections.abc import Iterator
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
    members = _members(pool, job.resource_class, scope, place, candidates)
    domains = _domains(candidates, members, place, claim, excess)
    free_by_domain, free_room = _free_slots_by_domain(state, job, place)
    slots, needed = state.slots, job.shape.units
    best, tried = None, 0
    for name, domain in domains:
        free = free_by_domain.get(name, {})
        # Most domains fail here (a search reaches ~15 for every one it tries): what a domain
        # could give back is summed before anything is built for it.
        room = domain.units + free_room.get(name, 0)
        for node in domain.hosts:
            if slots[node] not in free:
                room += slots[node].free_units
        if room < needed:
            continue  # even all its candidates gone would not make room
        hosts = {node: slots[node] for node in domain.hosts}
        trial = Trial(
            job,
            {slot: capacity(slot, job.shape) for slot in free if slot.ready},
            one_domain=True,
            joining=hosts,
            closed=closed,
        )
        found = trial.fit_by_removing(domain.victims)
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


def _members(
    pool: "VictimPool | None", rclass: str, scope: str, place: dict[str, str] | None, candidates: "list[Candidate]"
) -> dict[str, list]:
    """Per domain, the candidates with tasks there (`index_by_domain`) of which those in
    `candidates` count. For nodes, the pool's index of the whole class: a search reaches ~15
    of the hundreds of nodes its candidates run on. For racks and zones, the search's own
    candidates: it reaches most of those domains, so it would walk most of the class, where
    its candidates are a few of them (measured on the seed-2500 forecast: 3-5x fewer)."""
    if pool is None:
        return index_by_domain(candidates, place)
    if place is None:
        return pool.by_domain(rclass, scope, place)
    return index_by_domain(candidates, place, pool.spans.setdefault(scope, {}))


@dataclass(slots=True)
class Domain:
    victims: list[RunningJob]
    hosts: dict[str, None]
    units: int = 0


def _domains(
    ordered: "list[Candidate]",
    members: dict[str, list],
    place: dict[str, str] | None,
    claim: "Claim",
    excess: dict[str, int],
) -> Iterator[tuple[str, Domain]]:
    """Domains with their candidates in order, the nodes they run on and the units they hold
    there; domains in the order of their best candidate, each built only when the search
    reaches it (it stops after a few that work). A candidate the job does not outrank (or
    outranks only within its team's excess: `Claim.bounded`) enters a domain only while its
    team's units taken there stay within the team's excess.
    `members`: per domain, every candidate with tasks there (`index_by_domain`), of which those in
    `ordered` count."""
    chosen = {candidate.job.job_id for candidate in ordered}
    seen: set[str] = set()
    for candidate in ordered:
        if len(seen) == len(members):
            return  # every domain any candidate runs in is out (a gang's zones, often after one)
        for task in candidate.job.tasks:
            name = task.node if place is None else place[task.node]
            if name not in seen:
                seen.add(name)
                yield name, _domain(members[name], chosen, claim, excess)


def _domain(members: list, chosen: set[int], claim: "Claim", excess: dict[str, int]) -> Domain:
    """One domain of `_domains`. `Claim.outranks` and `Claim.bounded` inlined, and a team
    that spends from itself alone (no division: see `Excess`) checked without a generator:
    a cold seed-2500 pass walks ~30,000 members here, ~25,000 of them counted against excess."""
    victims, on, held = [], {}, 0
    spent: dict[str, int] = {}  # per team (and division), the units taken from it by reclaim
    rank, started_by, guard = claim.rank, claim.started_by, claim.guard
    spend = getattr(excess, "spends", None) or {}
    for candidate, hosts, units in members:
        victim = candidate.job
        if victim.job_id not in chosen:
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
        victims.append(victim)
        on.update(hosts)
        held += units
    return Domain(victims, on, held)


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
        victim = candidate.job
        kept = spans.get(victim.job_id)
        if kept is None or kept[0] is not victim.tasks or kept[1] is not place:
            kept = spans[victim.job_id] = (victim.tasks, place, _spans(victim, place))
        for name, hosts, units in kept[2]:
            found[name].append((candidate, hosts, units))
    return found


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
