"""Reads about teams and who may do what, and people's API tokens. Site admins are Django
superusers."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from mlqueue.compiled import CompiledRead
from teams.models import ApiToken, AuditEvent, EventKind, Membership, Role, Team
from teams.team_changes import TEAM_REASONS

# The teams a user is a member of itself (every submit asks).
TEAMS_OF_USER = CompiledRead(
    lambda user_id: Membership.objects.filter(user_id=user_id).values_list("team_id"), user_id=int
)


def is_site_admin(user) -> bool:
    return bool(user and user.is_authenticated and user.is_superuser)


def team_ids_of(user) -> set[int]:
    """The teams a user belongs to, with the teams below them (a division member sees its teams)."""
    if not user.is_authenticated:
        return set()
    direct = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    return direct | descendant_ids(direct)


def may_name_owner(user, name: str, former: QuerySet) -> bool:
    """Whether `name` is an owner `user` may filter by: any user, for a site admin; else
    itself, the members of its teams and of the teams below, or a former member with rows in
    `former` (the caller's own view of rows owned by `name`: jobs, usage). A name outside them
    gets the answer a name that does not exist gets, so no one learns which user names exist."""
    users = get_user_model().objects.filter(username=name)
    if is_site_admin(user):
        return users.exists()
    users = users.filter(Q(pk=user.pk) | Q(memberships__team_id__in=team_ids_of(user)))
    return users.exists() or former.exists()


def team_and_below_ids(name: str) -> set[int]:
    """The team named `name` and the teams below it: a filter on a division means its teams."""
    ids = set(Team.objects.filter(name=name).values_list("id", flat=True))
    return ids | descendant_ids(ids)


def descendant_ids(team_ids: set[int]) -> set[int]:
    found, frontier = set(), set(team_ids)
    while frontier:
        frontier = set(Team.objects.filter(parent_id__in=frontier).values_list("id", flat=True)) - found
        found |= frontier
    return found


def is_member(user, team: Team) -> bool:
    """A member of the team or of a team above it (as `team.pk in team_ids_of(user)`, in one
    query where the tree is two deep: every submit asks)."""
    if is_site_admin(user):
        return True
    if not user.is_authenticated:
        return False
    direct = {team_id for (team_id,) in TEAMS_OF_USER.rows(user_id=user.pk)}
    return any(team_id in direct for team_id in _chain_ids(team))


def _chain_ids(team: Team):
    """The team's id, then its parents' ids, nearest first; a parent's own parent is read only
    when the walk gets above it."""
    seen = {team.pk}
    yield team.pk
    team_id = team.parent_id
    while team_id is not None and team_id not in seen:
        yield team_id
        seen.add(team_id)
        team_id = Team.objects.filter(pk=team_id).values_list("parent_id", flat=True).first()


def can_read_quotas(user, team: Team) -> bool:
    """A team's guarantees, use and share: every signed-in user while MLQ_QUOTAS_PUBLIC is on,
    else its members (and members of the teams above it) and admins."""
    if not user.is_authenticated:
        return False
    return settings.MLQ_QUOTAS_PUBLIC or is_member(user, team)


def quota_readable_ids(user) -> set[int] | None:
    """The teams whose numbers `user` may read, by id; None for all of them."""
    if is_site_admin(user) or (user.is_authenticated and settings.MLQ_QUOTAS_PUBLIC):
        return None
    return team_ids_of(user)


def can_edit_quotas(user, team: Team) -> bool:
    """Admins, and leads of this team or of a team above it."""
    if is_site_admin(user):
        return True
    if not user.is_authenticated:
        return False
    chain = [team.pk] + [t.pk for t in team.ancestors()]
    return Membership.objects.filter(user=user, team_id__in=chain, role=Role.LEAD).exists()


def can_rank_among_siblings(user, team: Team) -> bool:
    """Whether `user` may set what only ranks `team` against its sibling teams (its fair-share
    weight): admins, and leads of a team above it, never its own leads, as a Slurm
    sub-account's shares are set from its parent account. So a division's, admins only."""
    if is_site_admin(user):
        return True
    above = [t.pk for t in team.ancestors()]
    if not (above and user.is_authenticated):
        return False
    return Membership.objects.filter(user=user, team_id__in=above, role=Role.LEAD).exists()


def team_history(team: Team, user) -> QuerySet[AuditEvent]:
    """A team's quota changes, for whoever may read its quotas; and the changes to its members,
    its place in the tree and its schedules only for its members (and those of teams above it)
    and admins: with quotas public, anyone reads the quotas, but a team's roster, its leads and
    its schedules are its own (who sees a team's schedules is this same rule:
    scheduling.schedules.visible_schedules)."""
    wanted = Q(kind=EventKind.QUOTA_CHANGED)
    if is_member(user, team):  # admins too
        wanted |= Q(kind=EventKind.SECURITY, reason__in=TEAM_REASONS) | Q(kind=EventKind.SCHEDULE)
    return AuditEvent.objects.filter(wanted, team=team)


def quota_team_names(user) -> list[str]:
    """The teams whose quotas a user may change (and preview changes to), by name: admins all,
    leads the teams they lead and every team below them."""
    if is_site_admin(user):
        return list(Team.objects.order_by("name").values_list("name", flat=True))
    if not user.is_authenticated:
        return []
    leads = set(Membership.objects.filter(user=user, role=Role.LEAD).values_list("team_id", flat=True))
    ids = leads | descendant_ids(leads)
    return list(Team.objects.filter(pk__in=ids).order_by("name").values_list("name", flat=True))


def roles_of(user) -> dict[str, str]:
    """team name -> role, for the user's direct memberships."""
    return dict(Membership.objects.filter(user=user).values_list("team__name", "role"))


def visible_team_names(user) -> list[str]:
    """The teams whose jobs a user may see and submit to (admins: all), by name."""
    teams = Team.objects.all() if is_site_admin(user) else Team.objects.filter(pk__in=team_ids_of(user))
    return list(teams.order_by("name").values_list("name", flat=True))


def tokens_of(owner) -> list[ApiToken]:
    """`owner`'s API tokens, revoked and expired ones too, newest first (id breaks ties)."""
    return list(ApiToken.objects.filter(user=owner).order_by("-created_at", "-id"))


def token_for(user, token_id: int) -> ApiToken | None:
    """The token `user` may revoke: their own, or anyone's for a site admin; None otherwise,
    so someone else's token cannot be told from one that does not exist."""
    tokens = ApiToken.objects.select_related("user")
    if not is_site_admin(user):
        tokens = tokens.filter(user=user)
    return tokens.filter(pk=token_id).first()
