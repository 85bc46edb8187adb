"""Queries `make demo`'s store (SQLite, embedded mode) can run: the suite runs on Postgres, so
the queries here are compiled for SQLite as well. JSON containment (`labels__contains`,
`nodes__contains`) has no SQLite form: every node page and the label filter were 500s in the
demo."""

import contextlib
from datetime import UTC, datetime

import pytest
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.utils import ConnectionHandler

from agents.node_filters import ConsoleFilter
from scheduling import maintenance
from scheduling.models import Node
from tests.integration.test_maintenance import window_body

pytestmark = pytest.mark.django_db

SQLITE = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})["default"]


@pytest.mark.parametrize("label", ["ib", "ib=ndr400", "topology.kubernetes.io/zone=z1"])
def test_the_label_filter_compiles_for_sqlite(label, monkeypatch, demo):
    monkeypatch.setattr(connection.features, "supports_json_field_contains", False)  # as SQLite's
    nodes = ConsoleFilter({"label": label}, queryset=Node.objects.all()).qs
    with contextlib.suppress(EmptyResultSet):  # no node has it: nothing to ask the store
        nodes.query.get_compiler(connection=SQLITE).as_sql()  # raised NotSupportedError


@pytest.mark.parametrize("contains", [True, False])
def test_the_label_filter_finds_a_key_of_digits_and_a_value_of_any_type(demo, monkeypatch, contains):
    """On Postgres a key of digits read by its text (`labels ->> 2024`) is an array index."""
    monkeypatch.setattr(connection.features, "supports_json_field_contains", contains)
    node = Node.objects.first()
    Node.objects.filter(pk=node.pk).update(labels={**node.labels, "2024": "x", "ib": "ndr400"})
    for label in ("2024=x", "ib=ndr400"):
        found = ConsoleFilter({"label": label}, queryset=Node.objects.all()).qs
        assert node.name in {n.name for n in found}, label


def test_a_nodes_open_windows_are_those_on_it(clock, api):
    assert api("ops").post("/api/v1/maintenance", window_body(), format="json").status_code == 201
    [window] = maintenance.open_windows(node_name=Node.objects.filter(rack="z1-r1").first().name)
    assert window.target == "rack z1-r1"
    assert maintenance.open_windows(node_name=Node.objects.exclude(rack="z1-r1").first().name) == []


def _insert(store, model, **values) -> None:
    """A row written as the model's own save would write it on `store` (defaults included)."""
    fields = model._meta.concrete_fields
    row = [field.get_db_prep_save(values.get(field.attname, field.get_default()), connection=store) for field in fields]
    columns = ", ".join(store.ops.quote_name(field.column) for field in fields)
    with store.cursor() as cursor:
        cursor.execute(f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({', '.join(['%s'] * len(row))})", row)


def test_the_heartbeats_raw_read_gives_an_aware_kill_at_on_sqlite(monkeypatch):
    """make demo's store gave the heartbeat's raw SQL a naive `kill_at`: every heartbeat of a
    node with a stop asked was a 500, and no cancel reached its task (QA). Read on SQLite itself:
    the two tables it reads, a node and a task being stopped."""
    from agents import heartbeats
    from scheduling.models import Task

    store = ConnectionHandler({"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})["default"]
    with store.schema_editor() as editor:
        editor.create_model(Node)
        editor.create_model(Task)
    kill_at = datetime(2026, 12, 5, 11, 7, 51, tzinfo=UTC)
    store.disable_constraint_checking()  # the task's job and the others' tables are not here
    _insert(store, Node, id=1, name="n1", token_digest="digest", health="READY", cpu_count=8, memory_gb=64)
    _insert(
        store, Task, id=1, job_id=7, rank=0, node_id=1, state="RUNNING", attempt=1, stop_signal="TERM", kill_at=kill_at
    )
    monkeypatch.setattr(heartbeats, "connection", store)
    [task] = heartbeats.load_many({"digest"})["digest"].tasks
    assert task.kill_at == kill_at and (task.kill_at - kill_at).total_seconds() == 0  # was a TypeError
