"""mlqueue.compiled: a read's SQL compiled once gives what the queryset gives, for any values."""

import pytest

from mlqueue.compiled import CompiledRead
from scheduling.inventory import ALIKE_FIELDS, ALIKE_NODES
from scheduling.models import Node
from teams.models import Team

pytestmark = pytest.mark.django_db


def test_each_call_sends_its_own_values(demo):
    named = CompiledRead(
        lambda name: Team.objects.filter(name=name).order_by().values_list("pk", "parent_id"), name=str
    )
    for team in Team.objects.all():
        assert named.rows(name=team.name) == [(team.pk, team.parent_id)]
    assert named.rows(name="no-such-team") == []


def test_constants_stay_and_columns_are_converted(demo):
    """A JSON column comes back decoded, as from the ORM; a constant in the filter stays as written."""
    first = Node.objects.filter(zone="z1", gpu_type="H100").order_by("name").first()
    Node.objects.filter(pk=first.pk).update(labels={"ib": "hdr"})
    labelled = CompiledRead(
        lambda zone: Node.objects.filter(zone=zone, gpu_type="H100").order_by("name").values_list("name", "labels"),
        zone=str,
    )
    expected = list(Node.objects.filter(zone="z1", gpu_type="H100").order_by("name").values_list("name", "labels"))
    assert labelled.rows(zone="z1") == [tuple(row) for row in expected]
    assert (first.name, {"ib": "hdr"}) in labelled.rows(zone="z1")


def test_the_inventory_read_groups_alike_nodes(demo):
    rows = ALIKE_NODES.rows()
    assert sum(row[-1] for row in rows) == Node.objects.count()
    assert len({repr(row[: len(ALIKE_FIELDS)]) for row in rows}) == len(rows)


def test_a_parameter_that_is_not_a_plain_value_is_refused():
    """`contains` sends '%value%': the value given is not what the statement's parameter holds."""
    within = CompiledRead(lambda name: Team.objects.filter(name__contains=name).values_list("pk"), name=str)
    with pytest.raises(ValueError, match="name"):
        within.rows(name="x")
