"""Usage, shares and quotas: who is owed what, who is over, and whose turn it is.

A team's share of a resource class is its usage over its entitlement (guarantee plus a sliver
of the class's capacity, times its weight); its dominant share is the largest over classes.
Teams are compared division first, then team, so a division's teams share its turn.
"""

from collections import defaultdict
from dataclasses import dataclass, field

from scheduling.core.model import PendingJob, RunningJob, Team, priority_rank

# Keeps shares finite and ordered by usage for teams with no guarantee in a class.
ENTITLEMENT_FLOOR = 0.01


@dataclass
class Ledger:
    """Units in use per team (and per ancestor) per resource class, updated as a pass places."""

    teams: dict[str, Team]
    capacity: dict[str, int]
    usage: dict[str, dict[str, int]]
    # Memos: the tree never changes within a pass; a share only when its team's usage does.
    chains: dict[str, list[str]] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    version: int = 0  # counts the updates (`add`, `add_at`): what reads the usage may be kept until it moves

    @classmethod
    def build(cls, teams: tuple[Team, ...], running: tuple[RunningJob, ...], capacity: dict[str, int]) -> "Ledger":
        ledger = cls({t.name: t for t in teams}, dict(capacity), defaultdict(lambda: defaultdict(int)))
        for job in running:
            ledger.add(job.team, job.resource_class, job.units)
        return ledger

    def copy(self) -> "Ledger":
        """Another ledger with the same usage, to add to without changing this one."""
        usage = defaultdict(lambda: defaultdict(int))
        for name, classes in self.usage.items():
            usage[name] = defaultdict(int, classes)
        return Ledger(self.teams, dict(self.capacity), usage)

    def chain(self, team: str) -> list[str]:
        """The team and its ancestors, the team first. Unknown teams stand alone."""
        found = self.chains.get(team)
        if found is None:
            found = self.chains[team] = self._walk(team)
        return found

    def _walk(self, team: str) -> list[str]:
        names, seen = [], set()
        while team is not None and team not in seen:
            names.append(team)
            seen.add(team)
            team = self.teams[team].parent if team in self.teams else None
        return names

    def add(self, team: str, rclass: str, units: int) -> None:
        self.version += 1
        for name in self.chain(team):
            self.usage[name][rclass] += units
            self.shares.pop(name, None)

    def add_at(self, name: str, rclass: str, units: int) -> None:
        """`units` at one team of a chain only (`add` adds at every one)."""
        self.version += 1
        self.usage[name][rclass] += units
        self.shares.pop(name, None)

    def share(self, team: str) -> float:
        """Dominant share: the largest usage / entitlement over the classes the team uses."""
        found = self.shares.get(team)
        if found is None:
            used = self.usage.get(team, {})
            found = self.shares[team] = max(
                (units / self.entitlement(team, rclass) for rclass, units in used.items() if units), default=0.0
            )
        return found

    def entitlement(self, team: str, rclass: str) -> float:
        spec = self.teams.get(team)
        quota = spec.quota(rclass) if spec else None
        guaranteed = quota.guaranteed if quota else 0
        weight = quota.weight if quota else 1.0
        return weight * (guaranteed + ENTITLEMENT_FLOOR * max(self.capacity.get(rclass, 0), 1))

    def order_key(self, team: str) -> tuple[float, ...]:
        """Division's share first, then down to the team's own."""
        return tuple(self.share(name) for name in reversed(self.chain(team)))

    def guaranteed(self, team: str, rclass: str) -> int:
        spec = self.teams.get(team)
        quota = spec.quota(rclass) if spec else None
        return quota.guaranteed if quota else 0

    def over_limit(
        self, team: str, rclass: str, units: int, less: dict[str, int] | None = None
    ) -> tuple[str, int, int, int] | None:
        """The first of the team's chain whose guarantee + borrowing limit `units` more would
        exceed: (name, used, guaranteed, limit); None if all allow it. `less`: units per name
        to leave out of what it uses (a preemptor's own charge: as if taken off and put back)."""
        for name in self.chain(team):
            spec = self.teams.get(name)
            quota = spec.quota(rclass) if spec else None
            if quota is None:
                continue
            used, limit = self.usage[name][rclass], quota.guaranteed + quota.borrowing_limit
            if less:
                used -= less.get(name, 0)
            if used + units > limit:
                return name, used, quota.guaranteed, limit
        return None

    def would_borrow(self, team: str, rclass: str, units: int) -> bool:
        """Whether `units` more would put the team or an ancestor past its guarantee."""
        return any(self.usage[name][rclass] + units > self.guaranteed(name, rclass) for name in self.chain(team))

    def excess(self, rclass: str) -> dict[str, int]:
        """Units each team holds above its own guarantee in a class: what it may be made to
        give back."""
        found = {}
        for name, used in self.usage.items():
            over = used.get(rclass, 0) - self.guaranteed(name, rclass)
            if over > 0:
                found[name] = over
        return found

    def within_guarantee(self, team: str, rclass: str, units: int) -> bool:
        """Whether the team (alone) stays within its guarantee with `units` more: it may reclaim."""
        guaranteed = self.guaranteed(team, rclass)
        return guaranteed > 0 and self.usage[team][rclass] + units <= guaranteed


def preemptor_charge(ledger: Ledger, team: str, units: int, victims: list[RunningJob]) -> dict[str, int]:
    """What a preemptor whose victims are still stopping adds to its team's use and to each team
    above it, by name: its units, less what its victims hold there (the ledger counts a stopping
    victim until it has stopped, so a preemptor of its own team's job adds only the difference)."""
    chain, charged = ledger.chain, {}
    for name in chain(team):
        left = units - sum(victim.units for victim in victims if name in chain(victim.team))
        if left > 0:
            charged[name] = left
    return charged


def in_flight_ledger(
    teams: tuple[Team, ...], running: tuple[RunningJob, ...], capacity: dict[str, int], preemptors: dict[int, tuple]
) -> Ledger:
    """The teams' use as a pass counts it for quotas: what runs, and each preemptor whose victims
    are still stopping (`preemptors`: job id -> (team, resource class, units), waiting jobs)."""
    ledger = Ledger.build(teams, running, capacity)
    stopping = defaultdict(list)
    for victim in running:
        if victim.preempted_for is not None:
            stopping[victim.preempted_for].append(victim)
    for job_id, victims in stopping.items():
        if job_id in preemptors:
            team, rclass, units = preemptors[job_id]
            for name, charged in preemptor_charge(ledger, team, units, victims).items():
                ledger.add_at(name, rclass, charged)
    return ledger


def _guarantee_order(job: RunningJob) -> tuple:
    return priority_rank(job.priority), job.started_at, job.job_id


def borrowed_jobs(ledger: Ledger, running: tuple[RunningJob, ...]) -> set[int]:
    """Running jobs above their team's guarantee: its highest classes fill the guarantee, the
    oldest first, and the rest are borrowed: a team's lowest-class, newest jobs. By start alone,
    a P1 started after the team's P2s was the borrowed one: a reclaim evicted it, and it evicted
    its own team's P2 for priority at once (QA: two evictions where one does)."""
    borrowed, by_team = set(), defaultdict(list)
    for job in running:
        by_team[(job.team, job.resource_class)].append(job)
    for (team, rclass), jobs in by_team.items():
        guaranteed, used = ledger.guaranteed(team, rclass), 0
        if sum(job.units for job in jobs) <= guaranteed:
            continue  # within its guarantee: nothing borrowed, no order to find
        for job in sorted(jobs, key=_guarantee_order):
            used += job.units
            if used > guaranteed:
                borrowed.add(job.job_id)
    return borrowed


def expected_units_seconds(job: PendingJob) -> float:
    runtime = job.expected_runtime_s if job.expected_runtime_s is not None else job.max_runtime_s
    return runtime * job.shape.units
