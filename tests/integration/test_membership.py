"""Who is a member of which team: of the team itself or of a team above it, in as few queries
as every submit can afford, and the same answer as the list of a user's teams."""

import pytest
from django.contrib.auth import get_user_model

from teams.models import Membership, Team
from teams.selectors import is_member, team_ids_of


@pytest.fixture
def tree(db):
    """research > vision > vision-3d (three deep), and a division beside it."""
    research = Team.objects.create(name="research")
    vision = Team.objects.create(name="vision", parent=research)
    deep = Team.objects.create(name="vision-3d", parent=vision)
    production = Team.objects.create(name="production")
    return {team.name: team for team in (research, vision, deep, production)}


def member_of(*teams):
    user = get_user_model().objects.create_user(username="member-of-" + ("-".join(t.name for t in teams) or "none"))
    for team in teams:
        Membership.objects.create(user=user, team=team)
    return user


@pytest.mark.parametrize("where", [(), ("research",), ("vision",), ("vision-3d",), ("production",)])
def test_is_member_agrees_with_the_users_teams_everywhere_in_the_tree(tree, where):
    user = member_of(*(tree[name] for name in where))
    for team in tree.values():
        assert is_member(user, team) == (team.pk in team_ids_of(user)), (where, team.name)


@pytest.mark.parametrize(
    ("where", "asked", "queries"),
    [
        ("vision-3d", "vision-3d", 1),  # the team itself
        ("vision", "vision-3d", 1),  # the parent: known from the team's row
        ("research", "vision-3d", 2),  # above the parent: its row is read
        ("production", "vision-3d", 3),  # not a member: the walk reaches the top
    ],
)
def test_is_member_reads_a_parents_row_only_past_the_teams_own_parent(
    tree, django_assert_num_queries, where, asked, queries
):
    user, team = member_of(tree[where]), tree[asked]
    with django_assert_num_queries(queries):
        assert is_member(user, team) == (where != "production")
