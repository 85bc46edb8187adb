"""Who holds what of each resource class, against what they are owed: the teams page's numbers.

Shares come from the scheduler's own Ledger (scheduling/core/fairshare.py), fed from an
aggregate of the active tasks, so the page ranks teams exactly as a pass would. Four queries,
whatever the number of teams, jobs or tasks.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Case, F, Func, IntegerField, Sum, When

from scheduling.cluster import load_teams
from scheduling.core import model as core
from scheduling.core.fairshare import Ledger
from scheduling.models import Node, Task
from scheduling.states import ON_NODE
from teams.models import Team
from teams.resources import known_classes


class JSONArrayLength(Func):
    """len() of a JSON array column; Django has no portable one (SQLite and Postgres differ)."""

    function = "JSON_ARRAY_LENGTH"
    output_field = IntegerField()

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="JSONB_ARRAY_LENGTH", **extra_context)


@dataclass(frozen=True)
class Bar:
    """Widths in percent of the team's limit (or of its use, if more): for the page's bars."""

    used: str
    borrowed: str
    guarantee: str


@dataclass(frozen=True)
class ClassUsage:
    """One team's standing in one resource class. `borrowed`: held above its guarantee;
    `lent`: its part of what teams at its level borrow, out of the guarantee it leaves idle
    (`_lent`: a level's teams lend, together, what its teams borrow)."""

    resource_class: str
    has_quota: bool
    guaranteed: int
    borrowing_limit: int
    weight: float
    used: int
    borrowed: int
    lent: int
    share: float

    @classmethod
    def unused(cls, rclass: str) -> "ClassUsage":
        """A class the team has no quota for and does not use (yet: a form may be adding it)."""
        return cls(rclass, False, 0, 0, 1.0, 0, 0, 0, 0.0)

    @property
    def slug(self) -> str:
        """The class as it can appear in an HTML id ("gpu:H100" -> "gpu-H100")."""
        return self.resource_class.replace(":", "-")

    @property
    def unit(self) -> str:
        return core.gpu_type_of(self.resource_class) or "CPU"

    @property
    def bar(self) -> Bar:
        limit = self.guaranteed + self.borrowing_limit if self.has_quota else 0
        scale = max(limit, self.used, 1)
        within = min(self.used, self.guaranteed)
        return Bar(*(f"{100 * units / scale:.1f}" for units in (within, self.borrowed, self.guaranteed)))


@dataclass(frozen=True)
class TeamUsage:
    """A team (or division, counting its teams' use) in every class it has a quota for or uses."""

    id: int
    name: str
    parent: str | None
    depth: int
    classes: tuple[ClassUsage, ...]
    shares: tuple[float, ...]  # one per ClusterUsage.classes, in that order
    dominant_share: float

    def get(self, rclass: str) -> ClassUsage | None:
        return next((row for row in self.classes if row.resource_class == rclass), None)

    @property
    def in_use(self) -> list[ClassUsage]:
        return [row for row in self.classes if row.used]


@dataclass(frozen=True)
class ClusterUsage:
    classes: tuple[str, ...]
    capacity: dict[str, int]
    teams: tuple[TeamUsage, ...]  # depth first: each division, then its teams
    known_classes: tuple[str, ...]  # what a quota may name (teams/resources.py)

    def team(self, name: str) -> TeamUsage | None:
        return next((team for team in self.teams if team.name == name), None)

    @property
    def capacities(self) -> list[tuple[str, int]]:
        return [(rclass, self.capacity.get(rclass, 0)) for rclass in self.classes]


def class_order(known: Iterable[str]) -> Callable[[str], tuple[int, str]]:
    """A sort key: known classes in their order (configured GPU types first, CPU last), others
    after by name."""
    rank = {rclass: index for index, rclass in enumerate(known)}
    return lambda rclass: (rank.get(rclass, len(rank)), rclass)


def cluster_usage() -> ClusterUsage:
    teams = list(Team.objects.values("id", "name", "parent__name"))
    tree = load_teams()
    quotas = {team.name: team.quotas for team in tree}
    capacity = _capacity()
    ledger = Ledger.build(tree, (), capacity)
    names = {t["id"]: t["name"] for t in teams}
    for team_id, rclass, units in _active_units():
        ledger.add(names[team_id], rclass, units)
    ordered = _depth_first(teams)
    known = tuple(known_classes(node_classes=capacity))
    order = class_order(known)
    classes = tuple(
        sorted(
            set(capacity)
            | {rclass for q in quotas.values() for rclass in q}
            | {rclass for used in ledger.usage.values() for rclass in used},
            key=order,
        )
    )
    lent = _lent(ledger, ordered, _borrowed_per_level(ledger, ordered))
    return ClusterUsage(
        classes,
        capacity,
        tuple(_team_usage(ledger, row, depth, classes, lent, order) for row, depth in ordered),
        known,
    )


def _capacity() -> dict[str, int]:
    """Every node counts, whatever its state: the same capacity a scheduler pass computes."""
    rows = Node.objects.order_by().values("gpu_type").annotate(gpus=Sum("gpu_count"), cpus=Sum("cpu_count"))
    return {
        core.resource_class(row["gpu_type"] or None): row["gpus"] if row["gpu_type"] else row["cpus"] for row in rows
    }


def _active_units() -> list[tuple[int, str, int]]:
    """(team id, resource class, units held) summed over assigned and running tasks: a GPU
    task holds its GPU indices, a CPU task its job's CPUs per rank."""
    units = Case(
        When(job__gpu_type="", then=F("job__cpu_per_rank")),
        default=JSONArrayLength("gpu_indices"),
        output_field=IntegerField(),
    )
    rows = (
        Task.objects.filter(state__in=ON_NODE)
        .order_by()
        .values("job__team_id", "job__gpu_type")
        .annotate(units=Sum(units))
    )
    return [(row["job__team_id"], core.resource_class(row["job__gpu_type"] or None), row["units"]) for row in rows]


def _depth_first(teams: list[dict]) -> list[tuple[dict, int]]:
    """Each division, then the teams under it (by name at each level), with their depth."""
    children = defaultdict(list)
    for row in sorted(teams, key=lambda t: t["name"]):
        children[row["parent__name"]].append(row)
    ordered = []

    def visit(parent: str | None, depth: int) -> None:
        for row in children[parent]:
            ordered.append((row, depth))
            visit(row["name"], depth + 1)

    visit(None, 0)
    return ordered


def _borrowed_per_level(ledger: Ledger, ordered: list[tuple[dict, int]]) -> dict[tuple[int, str], int]:
    """Units held above guarantees per (depth, class): divisions lend to divisions, teams to
    teams, so a division's use is not counted again through its teams."""
    borrowed = defaultdict(int)
    for row, depth in ordered:
        for rclass, used in ledger.usage.get(row["name"], {}).items():
            borrowed[(depth, rclass)] += max(0, used - ledger.guaranteed(row["name"], rclass))
    return borrowed


def _lent(ledger: Ledger, ordered: list[tuple[dict, int]], borrowed_at: dict[tuple[int, str], int]) -> dict:
    """Units each team lends per (team, class): what teams at its level borrow, split over the
    teams there that leave guarantee idle, in proportion to what each leaves idle (largest
    remainders, then by name), so that what a level lends adds up to what it borrows, at most
    its idle guarantees (QA: one team's 8 borrowed H100 read as 8 lent by each of its two
    idle peers). A team with idle guarantee borrows nothing itself."""
    idle: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    for row, depth in ordered:
        name = row["name"]
        for rclass in ledger.teams[name].quotas:
            spare = ledger.guaranteed(name, rclass) - ledger.usage.get(name, {}).get(rclass, 0)
            if spare > 0:
                idle[(depth, rclass)][name] = spare
    lent = {}
    for level, spares in idle.items():
        total = sum(spares.values())
        lend = min(total, borrowed_at[level])
        parts = {name: lend * spare / total for name, spare in spares.items()}
        whole = {name: int(part) for name, part in parts.items()}
        by_remainder = sorted(spares, key=lambda name: (whole[name] - parts[name], name))
        for name in by_remainder[: lend - sum(whole.values())]:
            whole[name] += 1
        lent.update({(name, level[1]): units for name, units in whole.items()})
    return lent


def _team_usage(
    ledger: Ledger,
    row: dict,
    depth: int,
    classes: tuple[str, ...],
    lent: dict[tuple[str, str], int],
    order: Callable[[str], tuple[int, str]],
) -> TeamUsage:
    name, used = row["name"], ledger.usage.get(row["name"], {})
    quotas = ledger.teams[name].quotas
    mine = sorted(set(quotas) | {rclass for rclass, units in used.items() if units}, key=order)
    return TeamUsage(
        row["id"],
        name,
        row["parent__name"],
        depth,
        tuple(_class_usage(ledger, name, rclass, used.get(rclass, 0), lent.get((name, rclass), 0)) for rclass in mine),
        tuple(used.get(rclass, 0) / ledger.entitlement(name, rclass) for rclass in classes),
        ledger.share(name),
    )


def _class_usage(ledger: Ledger, team: str, rclass: str, used: int, lent: int) -> ClassUsage:
    quota = ledger.teams[team].quota(rclass)
    guaranteed = quota.guaranteed if quota else 0
    return ClassUsage(
        rclass,
        quota is not None,
        guaranteed,
        quota.borrowing_limit if quota else 0,
        quota.weight if quota else 1.0,
        used,
        max(0, used - guaranteed),
        lent,
        used / ledger.entitlement(team, rclass),
    )
