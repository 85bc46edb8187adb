"""Queries `make demo`'s store (SQLite, embedded mode) can run: the suite runs on Postgres, so
the queries here are compiled for SQLite as well. JSON containment (`labels__contains`,
`nodes__contains`) has no SQLite form: every node page and the label filter were 500s in the
demo."""

import pytest
from django.db.utils import ConnectionHandler

from agents.node_filters import ConsoleFilter
from scheduling import maintenance
from scheduling.models import Node
from tests.integration.test_maintenance import window_body

pytestmark = pytest.mark.django_db

SQLITE = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})["default"]


@pytest.mark.parametrize("label", ["ib", "ib=ndr400", "topology.kubernetes.io/zone=z1"])
def test_the_label_filter_compiles_for_sqlite(label):
    nodes = ConsoleFilter({"label": label}, queryset=Node.objects.all()).qs
    sql, _ = nodes.query.get_compiler(connection=SQLITE).as_sql()
    assert "labels" in sql


def test_a_nodes_open_windows_are_those_on_it(clock, api):
    assert api("ops").post("/api/v1/maintenance", window_body(), format="json").status_code == 201
    [window] = maintenance.open_windows(node_name=Node.objects.filter(rack="z1-r1").first().name)
    assert window.target == "rack z1-r1"
    assert maintenance.open_windows(node_name=Node.objects.exclude(rack="z1-r1").first().name) == []
