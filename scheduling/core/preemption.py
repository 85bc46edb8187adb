"""Choosing victims: simulate removing running jobs until the blocked job fits, then put back
every victim it can do without.

Who may be evicted for whom:
- RECLAIM: a team within its guarantee takes back capacity other teams hold above theirs,
  whatever the victims' priority class (never P0) and however young they are. Any job of a
  team over its guarantee may go, but no more of its units than it holds above the guarantee
  (less what is stopping there already: the pass's `_excess`), nor than each division above
  it holds above the division's, where the preemptor is not of that division too (`Excess`):
  which jobs is chosen for the block they free, not by which one started last. Without churn
  (`PolicyConfig.reclaim_*`): a job expected to end within `reclaim_spare_ending_s` is left to
  end (its room comes back soon anyway, while an evicted job waits again and redoes work);
  optionally young jobs and jobs evicted `reclaim_max_evictions` times are spared too. An
  owner that has waited past `reclaim_wait_bound_s` reclaims from anyone over a guarantee.
- PRIORITY: a job of a higher class evicts lower classes, never P0, never a task younger than
  the minimum runtime of the preemptor's class (`PolicyConfig.min_runtime_for`: none for P0).
  A preemptor that would borrow (start past its team's guarantee) takes from other teams only
  what they hold above their own guarantees, as a reclaim would: a team's guarantee is never
  taken by a borrower, or its evicted job would reclaim the room at once and evict the
  preemptor in turn (`Claim.guard`). An incident's P0 tries that first too, and takes another
  team's guarantee only when nothing else makes room (pass_preemption.py).

Candidates are tried in this order: 1. borrowed first; 2. checkpointing first; 3. lowest
priority class first; 4. fewest past evictions (`eviction_memory`); 5. with
`reclaim_longest_first` (the default), the time since the last checkpoint in whole
`reclaim_checkpoint_step_s` (a job that checkpointed lately redoes little), then the longest
expected remaining (its room would stay taken longest); 6. fewest GPU-hours lost since the last
checkpoint; 7. newest first; 8. job id. Each domain that could hold the
job (a node for one task, a rack for a packed gang, a zone otherwise) gets its own victim
set; the best set has the fewest non-borrowed victims, then non-checkpointing ones, then
(with eviction memory) the fewest past evictions and victims, then GPU-hours lost, then
victims. Domains are tried in the order of their best candidate, and the search stops after
`DOMAINS_TRIED` that work, so its cost does not grow with the cluster.
"""

from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from scheduling.core.decisions import PreemptionReason
from scheduling.core.model import HOUR, PendingJob, PolicyConfig, RunningJob, Topology, lost_since, priority_rank
from scheduling.core.state import Slot
from scheduling.core.victim_search import index_by_domain


class Excess(dict):
    """What each team (and each division: a team with teams under it) holds above its
    guarantee that a search may still take, and per team the names a victim of it spends that
    from (`spends`, where that is not the team alone): its own team and each division above it
    that is not also above the preemptor. Taking from a team below a division takes from the division too, so a division
    never falls below its own guarantee; taking from a team of the preemptor's own division
    leaves the division's use as it was. A plain dict: each team spends from itself alone."""

    __slots__ = ("spends",)

    def __init__(self, left: dict[str, int], spends: dict[str, tuple[str, ...]]):
        super().__init__(left)
        self.spends = spends


def bounds(excess: dict[str, int]) -> dict[str, int]:
    """Per team in `excess`, the most of its units a search may take: the least excess of the
    names it spends from (see `Excess`)."""
    found = getattr(excess, "spends", None)
    if found is None:
        return excess
    least = {team: min((excess.get(n, 0) for n in names), default=excess[team]) for team, names in found.items()}
    return excess | least


class Candidate(NamedTuple):
    """A job that may be evicted, with its class's rank. A named tuple: a pass makes one per
    preemptible running job of each class it searches, thousands a pass."""

    job: RunningJob
    rank: int


@dataclass(frozen=True, slots=True)
class Claim:
    """What a preemptor may evict for priority: classes below its `rank`, started no later
    than `started_by` (now less its class's minimum runtime). What it may reclaim (from
    teams over their guarantee): jobs started no later than `reclaim_started_by`, preempted
    fewer than `max_evictions` times (None: any)."""

    rank: int
    started_by: float
    reclaim_started_by: float = float("inf")
    max_evictions: int | None = None
    ending_after: float = float("-inf")
    # A borrowing preemptor's team: it outranks other teams' jobs only within what they hold
    # above their guarantees (their `excess`); None: no such bound.
    guard: str | None = None

    def outranks(self, candidate: Candidate) -> bool:
        return candidate.rank > self.rank and candidate.job.started_at <= self.started_by

    def bounded(self, victim: RunningJob) -> bool:
        """Whether taking `victim` counts against its team's excess even where it is outranked."""
        return self.guard is not None and victim.team != self.guard

    def may_reclaim(self, candidate: Candidate) -> bool:
        job = candidate.job
        return job.started_at <= self.reclaim_started_by and not self.capped(job) and not self.ending(job)

    def capped(self, victim: RunningJob) -> bool:
        """Evicted as often as a reclaim may: spared until the owner's wait bound."""
        return self.max_evictions is not None and victim.preemptions >= self.max_evictions

    def ending(self, victim: RunningJob) -> bool:
        """About to end (natural termination): spared until the owner's wait bound."""
        return victim.expected_end <= self.ending_after


class VictimPool:
    """Who may be evicted, per resource class, in candidate order. Built once per pass from
    what ran before it; victims leave it as they are chosen. A search's candidates are kept:
    jobs alike ask for the same ones (see `candidates`). A class is put in order only where a
    search needs all of it (`of_class`); else a search's candidates are picked out first and
    only they are ordered (`_ordered`): most searches want a few of a class's jobs (a steady
    seed-2500 pass sorted its 3,300 CPU jobs for five reclaim searches that found none)."""

    def __init__(
        self,
        running: tuple[RunningJob, ...],
        borrowed: set[int],
        now: float,
        config: PolicyConfig,
        spans: dict[str, dict[int, tuple]] | None = None,
    ):
        """`spans`: per kind of domain, each running job's domains from earlier passes (see
        `victim_search.index_by_domain`), and under "candidates" each job's `Candidate` (see
        `_unordered`), if the caller keeps them (a `Scheduler` does)."""
        self.now, self.config, self.borrowed = now, config, borrowed
        self.may_go: dict[str, list[RunningJob]] = defaultdict(list)
        self.unordered: dict[str, list[Candidate]] = {}  # per class, in the snapshot's order
        self.by_class: dict[str, list[Candidate]] = {}  # per class, in candidate order
        self.order_keys: dict[int, tuple] = {}  # id() of a candidate's job -> `candidate_order`
        self.ordered_alone: dict[str, int] = defaultdict(int)  # per class, candidates ordered by `_ordered`
        self.below: dict[tuple[str, int], tuple[list, list[Candidate]]] = {}  # see `_ranked_below`
        self.taken: set[int] = set()
        self.claims: dict[tuple, Claim] = {}  # see `claim`
        self.found: dict[tuple, tuple[int, list[Candidate]]] = {}  # key -> (victims taken then, candidates)
        self.domains: dict[tuple[str, str], dict[str, list]] = {}  # see `by_domain`
        self.spans: dict[str, dict[int, tuple]] = spans if spans is not None else {}
        self.fixed = self.spans.setdefault("order", {})  # see `_order_key`
        self.memory, self.longest = config.eviction_memory, config.reclaim_longest_first
        # `candidate_order`'s step in whole `reclaim_checkpoint_step_s` (0: none).
        self.checkpoint_step = config.reclaim_checkpoint_step_s if self.longest else 0
        if self.checkpoint_step <= 0:
            self.checkpoint_step = 0
        for job in running:
            if job.preempting or not job.preemptible or job.priority == "P0":
                continue
            self.may_go[job.resource_class].append(job)

    def of_class(self, rclass: str) -> list[Candidate]:
        """The class's candidates in `candidate_order` (a total order: it ends in the job id)."""
        found = self.by_class.get(rclass)
        if found is None:
            found = self.by_class[rclass] = sorted(self._unordered(rclass), key=self._order_key)
        return found

    def _unordered(self, rclass: str) -> list[Candidate]:
        """The class's candidates in the snapshot's order. Each job's `Candidate` is kept (in
        `spans`, under "candidates") for as long as the job is the same object: a simulation's
        passes run mostly the same jobs, and making ~4,000 of them anew each pass cost ~3% of
        a forecast."""
        found = self.unordered.get(rclass)
        if found is None:
            kept = self.spans.setdefault("candidates", {})
            found = self.unordered[rclass] = []
            append = found.append
            for job in self.may_go[rclass]:
                candidate = kept.get(job.job_id)
                if candidate is None or candidate[0] is not job:
                    candidate = kept[job.job_id] = Candidate(job, priority_rank(job.priority))
                append(candidate)
        return found

    def _order_key(self, candidate: Candidate) -> tuple:
        """`candidate_order`, worked out once per job and pass, out of what in it is the job's
        own (`_fixed`), kept across passes with the job's `Candidate` (in `spans`, under
        "order") while the job is the same object: a simulated pass orders ~850 jobs, most of
        them the last pass's again, at a new time."""
        job = candidate.job
        key = self.order_keys.get(id(job))
        if key is None:
            fixed = self.fixed.get(job.job_id)
            if fixed is None or fixed[0] is not job:
                fixed = self.fixed[job.job_id] = _fixed(job)
            _, checkpointing, rank, preemptions, end, units, since, started = fixed
            lost, step = max(0.0, self.now - since), self.checkpoint_step
            key = self.order_keys[id(job)] = (
                job.job_id not in self.borrowed,
                checkpointing,
                rank,
                preemptions if self.memory else 0,
                lost // step if step else 0,
                end if self.longest else 0,
                units * lost / HOUR,  # `hours_lost_if_stopped`
                started,
                job.job_id,
            )
        return key

    def _source(self, rclass: str) -> list[Candidate]:
        """What a search picks its candidates out of: the class in order if it is already,
        else in the snapshot's order (`_ordered` then orders what it picked)."""
        found = self.by_class.get(rclass)
        return found if found is not None else self._unordered(rclass)

    def _ranked_below(self, rclass: str, rank: int) -> list[Candidate]:
        """`_source`'s candidates that rank below `rank`, in its order: all that a search which
        may only outrank picks from. Sifted once per pass and source (a borrower's search is
        most of the forecast's, and only a sixth of a class's jobs rank below it)."""
        source = self._source(rclass)
        kept = self.below.get((rclass, rank))
        if kept is None or kept[0] is not source:
            kept = self.below[rclass, rank] = (source, [c for c in source if c.rank > rank])
        return kept[1]

    def _ordered(self, rclass: str, picked: list[Candidate]) -> list[Candidate]:
        """`picked` (out of `_source`) in candidate order, as the class in order, filtered,
        gives it (a sort is stable): sorted alone while under half the class and the class's
        searches have picked fewer than it holds in all; else picked from `of_class`."""
        if rclass in self.by_class or not picked:
            return picked
        size = len(self.may_go[rclass])
        self.ordered_alone[rclass] += len(picked)
        if 2 * len(picked) <= size and self.ordered_alone[rclass] <= size:
            return sorted(picked, key=self._order_key)
        chosen = set(map(id, picked))
        return [c for c in self.of_class(rclass) if id(c) in chosen]

    def claim(self, job: PendingJob, *, ignore_age: bool = False, borrowing: bool = False) -> Claim:
        """`ignore_age`: as if every victim had run its minimum (when could the job preempt?).
        Past `reclaim_wait_bound_s` of waiting, a job reclaims from anyone over a guarantee.
        `borrowing`: the job would start past its team's guarantee and takes from other teams
        only what they hold above theirs (see `Claim.guard`). Made once per pass for each
        (priority, guard, age, past the bound): a pass asks ~170 claims of a few kinds."""
        config = self.config
        guard = job.team if borrowing else None
        lifted = ignore_age or self.now - job.submitted_at > config.reclaim_wait_bound_s
        key = (job.priority, guard, ignore_age, lifted)
        found = self.claims.get(key)
        if found is None:
            found = self.claims[key] = self._claim(job.priority, guard, ignore_age, lifted)
        return found

    def _claim(self, priority: str, guard: str | None, ignore_age: bool, lifted: bool) -> Claim:
        config = self.config
        minimum = 0.0 if ignore_age else config.min_runtime_for(priority)
        if lifted:
            # Ignoring age, victims spared until the bound (evicted as often as allowed, about
            # to end) count too: `ready_at` gives the time the bound lets them go.
            return Claim(priority_rank(priority), self.now - minimum, guard=guard)
        reclaim_minimum = 0.0 if ignore_age else config.reclaim_min_runtime_s
        return Claim(
            priority_rank(priority),
            self.now - minimum,
            self.now - reclaim_minimum,
            config.reclaim_max_evictions,
            self.now + config.reclaim_spare_ending_s,
            guard,
        )

    def by_domain(self, rclass: str, scope: str, place: dict[str, str] | None) -> dict[str, list]:
        """A class's candidates by domain (node, rack or zone: `scope`, mapped by `place`), in
        candidate order: indexed once per pass, for every search that needs it."""
        found = self.domains.get((rclass, scope))
        if found is None:
            spans = self.spans.setdefault(scope, {})
            found = self.domains[rclass, scope] = index_by_domain(self.of_class(rclass), place, spans)
        return found

    def candidates(self, job: PendingJob, claim: Claim, *, excess: dict[str, int]) -> list[Candidate]:
        """`excess`: for a job whose team reclaims, what each other team holds above its
        guarantee (empty when the job may only outrank)."""
        # All that decides the answer: jobs of one class asking alike (the same claim, team and
        # excess) between two evictions get one list, which no caller changes.
        # Victims only leave: a list found before some were taken is that list less them.
        key = (job.resource_class, claim, job.team, frozenset(excess.items()))
        taken = self.taken
        kept = self.found.get(key)
        if kept is None:
            found = self._ordered(job.resource_class, self._pick(job, claim, excess))
        elif kept[0] == len(taken):
            return kept[1]
        else:
            found = [c for c in kept[1] if c.job.job_id not in taken]
        self.found[key] = (len(taken), found)
        return found

    def _pick(self, job: PendingJob, claim: Claim, excess: dict[str, int]) -> list[Candidate]:
        """`candidates` worked out: the class's candidates that `claim` may take, out of `_source`."""
        team, rclass, rank, started_by = job.team, job.resource_class, claim.rank, claim.started_by
        taken = self.taken
        if claim.guard is not None:
            most = bounds(excess)
            # It outranks its own team's jobs, and others' only within what they hold above
            # their guarantees: a job larger than that (every other team's, when none is over)
            # is a candidate no search can take (`_domain`), and a search over only such
            # candidates would spend the pass's budget for nothing.
            return [
                c
                for c in self._ranked_below(rclass, rank)
                if (victim := c.job).started_at <= started_by
                and victim.job_id not in taken
                and (victim.team == team or victim.units <= most.get(victim.team, 0))
            ]
        if not excess:  # it may only outrank: claim.outranks(c), inlined (a hot loop)
            return [
                c
                for c in self._ranked_below(rclass, rank)
                if (victim := c.job).started_at <= started_by and victim.job_id not in taken
            ]
        others, most = excess.keys() - {team}, bounds(excess)  # the teams it may reclaim from
        # claim.may_reclaim(c), inlined too: a cold seed-2500 pass asks it of ~3,000 CPU jobs a search.
        reclaim_by, ending_after = claim.reclaim_started_by, claim.ending_after
        cap = claim.max_evictions if claim.max_evictions is not None else float("inf")
        return [
            c
            for c in self._source(rclass)
            if (victim := c.job).job_id not in taken
            and (
                (c.rank > rank and victim.started_at <= started_by)  # claim.outranks(c), inlined
                or (
                    victim.team in others
                    and victim.units <= most[victim.team]
                    and victim.started_at <= reclaim_by
                    and victim.preemptions < cap
                    and not victim.expected_end <= ending_after
                )
            )
        ]

    def take(self, victim: RunningJob) -> None:
        self.taken.add(victim.job_id)


def why(candidate: Candidate, claim: Claim) -> PreemptionReason:
    """PRIORITY when the job outranks the victim, else RECLAIM (a guarantee taken back)."""
    return PreemptionReason.PRIORITY if claim.outranks(candidate) else PreemptionReason.RECLAIM


class Ready(NamedTuple):
    """When a set of victims found with age and reclaim's spares ignored may all go: the latest
    time one that only priority frees may (`outranked`), and the latest one a reclaim may take
    before the owner's wait bound lifts its spares (`reclaimed`; the time inf where one is
    spared until then), each with the minimum runtime that sets it. What spares them: `capped`
    (evicted as often as `PolicyConfig.reclaim_max_evictions` allows), `ending` (about to end),
    else only young. The owner's bound is its own, so `for_job` gives a job's time."""

    outranked: tuple[float, float] | None
    reclaimed: tuple[float, float | None] | None
    capped: int | None
    ending: bool

    def for_job(self, bound_at: float) -> tuple[float, float | None]:
        """(the time they may all go for a job whose wait bound passes at `bound_at`, the
        minimum runtime that sets it; None: the bound)."""
        found = None
        if self.reclaimed is not None:
            found = self.reclaimed if self.reclaimed[0] <= bound_at else (bound_at, None)
        if self.outranked is not None and (found is None or self.outranked[0] > found[0]):
            found = self.outranked
        return found


def ready_at(
    victims: tuple[RunningJob, ...],
    job: PendingJob,
    claim: Claim,
    *,
    excess: dict[str, int],
    minimum: float,
    reclaim_minimum: float,
) -> Ready | None:
    """When victims found with age and reclaim's spares ignored may all go, by `claim` (the
    job's claim now); None if every one may go already. A victim may go for priority once it
    has run `minimum`, or be reclaimed (its team over a guarantee) once it has run
    `reclaim_minimum` and is not spared, or, spared or not, once the job has waited past its
    wait bound (`Ready.for_job`), whichever comes first."""
    outranked = reclaimed = None
    capped, ending = None, False
    for victim in victims:
        candidate = Candidate(victim, priority_rank(victim.priority))
        reclaimable = victim.team in excess and victim.team != job.team
        if claim.outranks(candidate) or (reclaimable and claim.may_reclaim(candidate)):
            continue
        route = (victim.started_at + minimum, minimum) if candidate.rank > claim.rank else None
        if not reclaimable:
            if route is not None and (outranked is None or route[0] > outranked[0]):
                outranked = route
            continue
        over_cap, ends = claim.capped(victim), claim.ending(victim)
        capped = claim.max_evictions if over_cap else capped
        ending = ending or (ends and not over_cap)
        if not (over_cap or ends):
            own = (victim.started_at + reclaim_minimum, reclaim_minimum)
            route = own if route is None or own[0] < route[0] else route
        route = route or (float("inf"), None)
        if reclaimed is None or route[0] > reclaimed[0]:
            reclaimed = route
    if outranked is None and reclaimed is None:
        return None
    return Ready(outranked, reclaimed, capped, ending)


def _fixed(job: RunningJob) -> tuple:
    """What `candidate_order` reads of a job that neither the time nor the borrowed set
    changes: the job (what it was worked out for), not checkpointing, its class's rank
    negated, its past evictions, its expected end negated, its units, where the work a stop
    would lose begins (`lost_since`), its start negated."""
    return (
        job,
        not job.checkpointing,
        -priority_rank(job.priority),
        job.preemptions,
        -job.expected_end,
        job.units,
        lost_since(job.started_at, job.last_checkpoint_at),
        -job.started_at,
    )


def candidate_order(
    victim: RunningJob,
    borrowed: set[int],
    now: float,
    *,
    memory: bool = False,
    longest: bool = False,
    checkpoint_step: float = 0.0,
) -> tuple:
    """See the module's docstring. `checkpoint_step` (with `longest`): the time since the
    victim's last checkpoint (its start, if none), in whole steps, goes before the longest
    remaining, so a long job that checkpointed lately goes before one that would redo more."""
    step = 0
    if longest and checkpoint_step > 0:
        step = max(0.0, now - lost_since(victim.started_at, victim.last_checkpoint_at)) // checkpoint_step
    return (
        victim.job_id not in borrowed,
        not victim.checkpointing,
        -priority_rank(victim.priority),
        victim.preemptions if memory else 0,
        step,
        -victim.expected_end if longest else 0,
        victim.hours_lost_if_stopped(now),
        -victim.started_at,
        victim.job_id,
    )


def domain_of(slot: Slot, job: PendingJob) -> str:
    if job.shape.tasks == 1:
        return slot.name
    if job.shape.topology in (Topology.PREFER_SAME_RACK, Topology.REQUIRE_SAME_RACK):
        return slot.node.rack
    return slot.node.zone
