"""A pass's evictions (part of `scheduler.Pass`, its step 4): whether a job may evict for
priority or reclaim what its team is guaranteed, the search for victims (preemption.py), and
when none may go yet, the time they may (PREEMPTION_PENDING).
"""

from collections import defaultdict
from typing import NamedTuple

from scheduling.core import explain
from scheduling.core.decisions import Preemption, PreemptionReason
from scheduling.core.fairshare import preemptor_charge
from scheduling.core.model import PendingJob, RunningJob, priority_rank
from scheduling.core.placement import plan
from scheduling.core.preemption import Candidate, Excess, VictimPool, ready_at, why
from scheduling.core.reasons import PendingReason
from scheduling.core.victim_search import find_victims, units_freed


class LimitVictims(NamedTuple):
    """The victims of an eviction within a team's limits, as `_evict` takes a search's."""

    victims: list


class PassPreemption:
    """`Pass`'s victim searches, with memos that hold within one pass: victims only ever leave
    the pool during a pass, so what failed once fails again."""

    def _start_searches(self) -> None:
        self._victims: VictimPool | None = None
        self.no_victims: dict[tuple, int] = {}
        self.no_limit_victims: set[tuple] = set()  # see `_preempt_within_limits`
        self.awaiting: dict[tuple, tuple | None] = {}  # (no_victims key, tasks) -> when victims may go (`Ready`s)
        self.own_reasons: set[int] = set()  # jobs whose reason gives their own wait bound's time
        self.searches = 0
        self.reclaim_searches = 0
        self.leaving: dict[str, dict[str, int]] = {}  # see `_leaving`
        # Per (class, team), the units evictions took, in earlier passes (jobs still stopping,
        # which the ledger counts until they have) and in this one: no longer the team's to give.
        self.evicted: dict[tuple[str, str], int] = defaultdict(int)
        for (rclass, team), units in self.stopping_units.items():  # and at each division above
            for name in self.ledger.chain(team):
                self.evicted[rclass, name] += units
        self.charged: dict[int, dict[str, int]] = {}  # see `_charge`: preemptor -> {team or ancestor: units}
        self.in_flight_units: dict[tuple[str, str], int] = defaultdict(int)  # (class, name) -> units charged
        self.excesses: dict[tuple[str, str], tuple[tuple[int, int], dict]] = {}  # see `_excess`
        self.kept_searches: dict[tuple, tuple] | None = None  # see `_search_kept` (a `Scheduler` sets it)

    def _charge_in_flight(self, candidates: list[PendingJob]) -> None:
        """A preemptor whose victims are still stopping runs as soon as they have: its team's
        use counts it from now (after `borrowed`, which is of the jobs running). Else each pass
        would find the team as far below its guarantee as before it reclaimed, and reclaim
        again for its next jobs, up to the victims' excess: past the guarantee, the surplus
        then starting as borrowed work the other team reclaims back. Only candidates (a held
        one cannot start); its own quota check reads the ledger without it (`_refused`), and
        placed after all (room found elsewhere) it is charged once (`_place`)."""
        if self.stopping_for:
            for job in candidates:
                if job.job_id in self.stopping_for:
                    self._charge(job, self.stopping_for[job.job_id])

    def _charge(self, job: PendingJob, victims: list[RunningJob]) -> None:
        """Charge `job` at its team and each team above it, less what its victims hold there:
        the ledger counts a stopping victim until it has stopped, so a preemptor of its own
        team's (or division's) job adds only the difference. Kept apart (`in_flight_units`) so
        that what a team holds above its guarantee stays what it runs (`_excess`)."""
        self._recharge(job, preemptor_charge(self.ledger, job.team, job.shape.units, victims))

    def _uncharge(self, job: PendingJob) -> dict[str, int]:
        charged = self.charged.pop(job.job_id, {})
        self._add_charge(job.resource_class, charged, -1)
        return charged

    def _recharge(self, job: PendingJob, charged: dict[str, int]) -> None:
        self._add_charge(job.resource_class, charged, 1)
        self.charged[job.job_id] = charged

    def _add_charge(self, rclass: str, charged: dict[str, int], sign: int) -> None:
        for name, units in charged.items():
            self.ledger.add_at(name, rclass, sign * units)
            self.in_flight_units[rclass, name] += sign * units

    def _excess(self, rclass: str, team: str) -> dict[str, int]:
        """What each team and division runs above its guarantee in `rclass` (the ledger's
        `excess`, less its preemptors in flight, which do not run yet), less what is stopping
        there already, evicted by this pass or an earlier one: reclaimers and borrowers must not
        together take more than a team holds above its guarantee (it would reclaim the rest
        straight back). For a preemptor of `team`: what a victim of each team spends it from.
        Kept while the ledger (whose updates include the charges) and the evictions stand as
        they were: ~470 asks a steady seed-2500 pass, between a handful of changes."""
        stamp = (self.ledger.version, len(self.preemptions))
        kept = self.excesses.get((rclass, team))
        if kept is not None and kept[0] == stamp:
            return kept[1]
        evicted, charged, chain = self.evicted, self.in_flight_units, self.ledger.chain
        found = {}
        for name, units in self.ledger.excess(rclass).items():
            left = units - evicted[rclass, name] - charged[rclass, name]
            if left > 0:
                found[name] = left
        mine = chain(team)
        # Only where a division counts: flat teams keep the plain dict (each spends its own).
        spends = {name: names for name in found if (names := tuple(n for n in chain(name) if n not in mine)) != (name,)}
        found = Excess(found, spends) if spends else found
        self.excesses[rclass, team] = (stamp, found)
        return found

    def _reclaimable_elsewhere(self, job: PendingJob) -> bool:
        """Whether a reclaim by `job` would have a victim to search now: a job of another team
        over its guarantee that its claim may take (not a P0, not one stopping or taken already,
        within that team's excess, past the reclaim's spares). The search's own candidates."""
        excess = self._excess(job.resource_class, job.team)
        if not any(team != job.team for team in excess):
            return False
        candidates = self.victims.candidates(job, self.victims.claim(job), excess=excess)
        return any(candidate.job.team != job.team for candidate in candidates)

    @property
    def victims(self) -> VictimPool:
        """Built on the first search: most passes never need one."""
        if self._victims is None:
            self._victims = VictimPool(self.snap.running, self.borrowed, self.now, self.config, self.spans)
        return self._victims

    def _preempt_for(self, job: PendingJob) -> bool:
        """Evict victims for `job` if it may; True when it waits for victims to stop. When the
        victims it needs are only too young yet, it waits with the time they may go."""
        in_flight = self.stopping_for.get(job.job_id)
        if in_flight:
            if job.job_id not in self.charged:  # still waiting: its team's use counts it (`_charge`)
                self._charge(job, in_flight)
            self._hold(job, self._nodes_to_hold(job, in_flight))
            if job.nominated:
                self.nominations[job.job_id] = job.nominated
            # A victim that does not rank below it was reclaimed (priority evicts lower classes
            # only): the reason says so while it stops, as the eviction's event did.
            reclaimed = any(priority_rank(v.priority) <= priority_rank(job.priority) for v in in_flight)
            forced = [v.stop_by for v in in_flight if v.stop_by is not None]
            self.pending[job.job_id] = explain.preempting(
                job,
                [v.job_id for v in in_flight],
                sum(v.units for v in in_flight),
                reclaim=reclaimed,
                stop_by=max(forced) if len(forced) == len(in_flight) else None,
            )
            return True
        if not self.config.preemption:
            return False
        reclaim = self.config.reclaim and self.ledger.within_guarantee(job.team, job.resource_class, job.shape.units)
        if reclaim and not self._may_reclaim_yet(job):
            reclaim = False
            self.pending[job.job_id] = explain.reclaim_delayed(job, self.config.reclaim_after_wait_s)
        ahead = self._reclaim_waits_turn(job) if reclaim else None
        if ahead is not None:
            reclaim = False
            # A reason only (a pass that does not explain, as the forecast's, skips the search
            # for it): else it would reclaim nothing even in its turn.
            if self.config.explain and self._reclaimable_elsewhere(job):
                self.pending[job.job_id] = explain.reclaim_waits_turn(job, ahead)
        outranks = priority_rank(job.priority) < self.lowest_running[job.resource_class]
        if not reclaim and (self.searches >= self.config.max_preemption_searches or not outranks):
            return False  # out of search budget, or nobody running ranks below it
        if reclaim and self._reclaim_spent():
            return False
        # A borrower evicts for priority only what other teams hold above their guarantees
        # (preemption.py `Claim.guard`). An incident's P0 tries that first, and takes another
        # team's guarantee only when that finds nothing: the team, evicted, would reclaim its
        # room at once from the P0's team (a P0 never goes), two evictions where one does.
        borrowing = not reclaim and self.ledger.would_borrow(job.team, job.resource_class, job.shape.units)
        incident = job.priority == "P0"
        if incident and borrowing:
            if self._search_and_evict(job, False, True, wait_reason=False):
                return True
            if self.searches >= self.config.max_preemption_searches:
                return False  # the bounded search spent the pass's last one
        return self._search_and_evict(job, reclaim, borrowing and not incident)

    def _search_and_evict(self, job: PendingJob, reclaim: bool, borrowing: bool, *, wait_reason: bool = True) -> bool:
        """Search for `job`'s victims (reclaiming, or only within others' excess when
        `borrowing`) and evict them; True when it did. `wait_reason`: when none may go yet,
        whether to find the time they may (PREEMPTION_PENDING)."""
        # Victims only ever leave the pool during a pass, so what failed once fails again, for
        # the same excess (which a placement or an eviction in the class changes).
        excess = self._excess(job.resource_class, job.team) if reclaim or borrowing else {}
        mine = job.team if reclaim or borrowing else None
        # Past its wait bound a job's claim lifts reclaim's spares: it may find what a younger
        # equal job could not.
        stage = self._reclaim_stage(job)
        memo_key = (job.shape.key(), priority_rank(job.priority), reclaim, mine, stage, tuple(sorted(excess.items())))
        if self.no_victims.get(memo_key, 1 << 30) <= job.shape.tasks:
            self._await_known(job, memo_key)
            return False
        claim = self.victims.claim(job, borrowing=borrowing)
        candidates = self.victims.candidates(job, claim, excess=excess)
        self.reclaim_searches += reclaim and bool(candidates)
        found = self._search(job, candidates, claim, excess)
        if found is None:
            self.no_victims[memo_key] = min(self.no_victims.get(memo_key, 1 << 30), job.shape.tasks)
            if wait_reason:
                self.awaiting[(memo_key, job.shape.tasks)] = self._await_victims(
                    job, excess, len(candidates), borrowing
                )
            self._await_known(job, memo_key)
            return False
        self._evict(job, found, claim)
        return True

    def _preempt_within_limits(self, job: PendingJob) -> bool:
        """An incident's P0 that its team's borrowing limit refuses (or a limit of a team above
        it) evicts its own team's jobs of lower classes, enough to fit, as Kueue preempts within
        a ClusterQueue: it waited, room idle, for the team's own P2s to end. P0 only: it goes
        first in the order, so the room its victims free under the limit is its own when they
        stop; a lower class's could go to a job the order puts before it, and it would evict
        again. Within the search budget; not while jobs already stopping (a cancel, a drain,
        another team's eviction) will make the room; not where the job could not start once
        they are gone (a maintenance window, a reservation). True when it evicted."""
        config = self.config
        if job.priority != "P0" or not config.preemption or self.searches >= config.max_preemption_searches:
            return False
        rclass = job.resource_class
        if priority_rank(job.priority) >= self.lowest_running[rclass]:
            return False  # nobody running ranks below it
        need = self._over_limits(job)
        if need <= 0:
            return False  # what is stopping already makes the room
        claim = self.victims.claim(job)
        taken = self.victims.taken
        own = [
            c
            for c in self.victims.of_class(rclass)
            if c.job.team == job.team and claim.outranks(c) and c.job.job_id not in taken
        ]
        if sum(c.job.units for c in own) < need:
            return False
        # What failed fails again for an equal job until the class changes: searched once, and
        # not charged to the budget again (as `no_victims` for the other searches).
        memo_key = self._limit_search_key(job, rclass)
        if memo_key in self.no_limit_victims:
            return False
        self.searches += 1
        chosen = self._limit_victims(job, own, claim, need)
        if chosen is None or not self._start_nodes(job, chosen):  # or nowhere to start once they are gone
            if memo_key is not None:
                self.no_limit_victims.add(memo_key)
            return False
        self._evict(job, LimitVictims(chosen), claim)
        return True

    def _limit_victims(self, job: PendingJob, own: list, claim, need: int) -> list[RunningJob] | None:
        """`_preempt_within_limits`'s victims: those it needs for room, if it needs any (None if
        none will do), then what the limits still need, the cheapest to lose first."""
        end_at = self.now + job.max_runtime_s
        limit = self.windows.limit(end_at, self.book.limit_for(end_at, job.job_id))
        chosen: list = []
        if plan(self.state, job.shape, limit) is None:  # it needs its victims' room too
            found = find_victims(
                self.state,
                job,
                own,
                claim,
                excess={},
                borrowed=self.borrowed,
                now=self.now,
                memory=self.config.eviction_memory,
                pool=self.victims,
                closed=self._closed(job),
            )
            if found is None:
                return None
            chosen = list(found.victims)
        freed = sum(victim.units for victim in chosen)
        for candidate in own:
            if freed >= need:
                break
            if candidate.job not in chosen:
                chosen.append(candidate.job)
                freed += candidate.job.units
        return chosen

    def _limit_search_key(self, job: PendingJob, rclass: str) -> tuple | None:
        """All that `_preempt_within_limits`'s search reads of `job` and of the pass (the
        class's room, victims and ledger change only with its generation); None for a job that
        holds nodes, which are its alone."""
        if job.job_id in self.holders:
            return None
        kind = self._kind(job)[0]
        return kind, self._variant(rclass, job.max_runtime_s), self._reclaim_stage(job), self.generation[rclass]

    def _over_limits(self, job: PendingJob) -> int:
        """The units the job's team and the teams above it are over their borrowing limits by,
        with the job, less what is stopping there and will not come back to the team (a
        cancel, a drain, another team's eviction; not jobs stopping for a preemptor of the
        same team, which takes their place): what its evictions must give back, the most any
        level is over."""
        ledger, rclass, units = self.ledger, job.resource_class, job.shape.units
        leaving = self._leaving(rclass)
        need = 0
        for name in ledger.chain(job.team):
            spec = ledger.teams.get(name)
            quota = spec.quota(rclass) if spec else None
            if quota is not None:
                gone = sum(n for team, n in leaving.items() if name in ledger.chain(team))
                need = max(need, ledger.usage[name][rclass] + units - quota.guaranteed - quota.borrowing_limit - gone)
        return need

    def _leaving(self, rclass: str) -> dict[str, int]:
        """Per team, the units of its jobs stopping in `rclass` that no preemptor of the same
        team stands to take (see `_over_limits`); worked out once per class and pass."""
        found = self.leaving.get(rclass)
        if found is None:
            teams = {job.job_id: job.team for job in self.snap.pending}
            found = self.leaving[rclass] = defaultdict(int)
            for running in self.active.get(rclass, ()):
                if running.preempting and teams.get(running.preempted_for) != running.team:
                    found[running.team] += running.units
        return found

    def _may_reclaim_yet(self, job: PendingJob) -> bool:
        """A job reclaims only once it has waited `reclaim_after_wait_s`: until then, room that
        frees up by itself comes to it first (an owner goes before borrowers in the queue),
        and nobody is evicted for a wait of seconds."""
        return self.now - job.submitted_at >= self.config.reclaim_after_wait_s

    def _reclaim_stage(self, job: PendingJob) -> bool:
        """Whether a job has waited past the bound that lets it reclaim from anyone over a
        guarantee: equal jobs on the same side of it are decided alike."""
        return self.now - job.submitted_at > self.config.reclaim_wait_bound_s

    def _search(self, job: PendingJob, candidates: list, claim, excess: dict[str, int], every=None):
        if not candidates:
            return None
        self.searches += 1
        return find_victims(
            self.state,
            job,
            candidates,
            claim,
            excess=excess,
            borrowed=self.borrowed,
            now=self.now,
            memory=self.config.eviction_memory,
            pool=self.victims,
            closed=self._closed(job),
            every=every,
        )

    def _await_victims(self, job: PendingJob, excess: dict[str, int], tried: int, borrowing: bool) -> tuple | None:
        """No victims may go now: would some, once they have run the minimum of `job`'s class
        (or its wait bound lifts reclaim's spares)? Then when each set the search found may go,
        for `_await_reason`: the earliest time (the set a
        search picks first by its cost can change from pass to pass as its victims age, and the
        time with it: a P1's reason read 16:32, 16:27, 16:30, 16:32 in turn, and it preempted at
        16:27); asked within the search budget, and only in passes that explain. Nobody is
        evicted early: this search only looks."""
        if not self.config.explain or self.searches >= self.config.max_preemption_searches:
            return None
        claim = self.victims.claim(job, ignore_age=True, borrowing=borrowing)
        candidates = self.victims.candidates(job, claim, excess=excess)
        if len(candidates) == tried:
            return None  # age kept nobody out: no wait would help
        found = self._search_kept(job, candidates, claim, excess)
        now_claim = self.victims.claim(job, borrowing=borrowing)
        readies = []
        for victims in found:
            ready = ready_at(
                victims.victims,
                job,
                now_claim,
                excess={} if claim.guard is not None else excess,  # a borrower reclaims nothing
                minimum=self.config.min_runtime_for(job.priority),
                reclaim_minimum=self.config.reclaim_min_runtime_s,
            )
            if ready:
                readies.append((ready, len(victims.victims)))
        return tuple(readies) or None

    def _search_kept(self, job: PendingJob, candidates: list, claim, excess: dict[str, int]) -> list:
        """`_await_victims`'s search: every domain's set it finds (`find_victims`'s `every`).
        Kept across passes (`kept_searches`, from a `Scheduler`: over one state) while all the
        sets read stands: the state as it was (its count of changes, every class's: the order
        nodes are tried in reads the racks' free room), the job's shape, team and closed nodes,
        the claim's class and guard, the excess, and the candidates, equal and in the same
        order, every one started by the claim's `started_by` (ignoring age, a claim outranks
        by class alone), as the sets' victims are all it reads of them. A steady seed-2500
        pass makes ~60 of these searches, most of them the last pass's again."""
        victims = tuple(candidate.job for candidate in candidates)
        kept, found = self.kept_searches, []
        if kept is None or not victims or max(victim.started_at for victim in victims) > claim.started_by:
            self._search(job, candidates, claim, excess, every=found)
            return found
        shape, spends = job.shape, tuple(getattr(excess, "spends", {}).items())
        key = (shape.key(), shape.tasks, job.team, claim.rank, claim.guard, frozenset(excess.items()), spends)
        key += (self._closed(job), sum(self.state.changes.values()))
        known = kept.get(key)
        if known is not None and known[0] == victims:
            self.searches += 1  # as the search would
            return known[1]
        self._search(job, candidates, claim, excess, every=found)
        kept[key] = (victims, found)
        return found

    def _await_reason(self, job: PendingJob, readies: tuple) -> PendingReason:
        """PREEMPTION_PENDING with the earliest time a set found may go for `job`: when a set
        waits for the job's own wait bound, the time is the job's (not an equal job's), so the
        reason is not repeated for equal jobs (`own_reasons`)."""
        bound = self.config.reclaim_wait_bound_s
        choices = [(*ready.for_job(job.submitted_at + bound), count, ready) for ready, count in readies]
        at, minimum, count, ready = min(choices, key=lambda found: (found[0], found[2]))
        if minimum is not None:
            return explain.preemption_pending(job, count, at, minimum)
        self.own_reasons.add(job.job_id)
        if ready.capped is not None:
            spared = f"evicted {ready.capped} time{'s' if ready.capped != 1 else ''} already, the cap"
        elif ready.ending:
            spared = "about to end"
        else:
            spared = f"younger than their {explain.duration(self.config.reclaim_min_runtime_s)} minimum"
        return explain.reclaim_after_bound(job, count, at, bound, spared)

    def _await_known(self, job: PendingJob, memo_key: tuple) -> None:
        readies = self.awaiting.get((memo_key, job.shape.tasks))
        if readies is not None:
            self.pending[job.job_id] = self._await_reason(job, readies)

    def _evict(self, job: PendingJob, found, claim) -> None:
        # Each victim's candidate made again (a candidate is its job and its class's rank), not
        # looked up in a dict of the search's candidates made for it: thousands, for a few victims.
        reasons = {v.job_id: why(Candidate(v, priority_rank(v.priority)), claim) for v in found.victims}
        for victim in found.victims:
            self.victims.take(victim)
            for name in self.ledger.chain(victim.team):
                self.evicted[victim.resource_class, name] += victim.units
            self.preemptions.append(
                Preemption(
                    victim.job_id,
                    job.job_id,
                    reasons[victim.job_id],
                    (
                        f"preempted for job {job.job_id} ({job.priority}, team {job.team}): "
                        + (
                            "reclaiming capacity its team is guaranteed"
                            if reasons[victim.job_id] == PreemptionReason.RECLAIM
                            else f"{victim.priority} yields to {job.priority}"
                        )
                    ),
                )
            )
            self.acted += 1  # see `Pass._changes`
        reclaim = PreemptionReason.RECLAIM in reasons.values()
        self.slots.take(job)
        nominate = not reclaim or (self.config.nominate_reclaimers and self._deep_backlog(job.resource_class))
        self._hold_room(job, list(found.victims), nominate=nominate)
        self.pending[job.job_id] = explain.preempting(
            job, [v.job_id for v in found.victims], units_freed(found.victims), reclaim
        )
        # The room is spoken for: the team's share and guarantee count it from now on, so
        # its next job does not reclaim (or outrank) the same capacity again (as in later
        # passes while the victims stop: `_charge`).
        self._charge(job, list(found.victims))
