"""Leave half of each page of the node table free, so that the web processes' liveness writes
(`Node.last_heartbeat_at` for every node, every MLQ_LIVENESS_FLUSH_S: scheduling/liveness.py)
are HOT updates: the new row version goes on the same page and none of the table's six
indexes is written. At the default fillfactor (100) every page was full, so every one of those
writes was a new row elsewhere plus six index entries: 1,250 nodes took 24-37 ms of Postgres
against 8 ms now, and left the indexes to bloat (BENCHMARKS.md, "the liveness flush").

Postgres only (SQLite has no fillfactor). Rows already stored stay where they are until they
are next written; `VACUUM FULL agents_node` repacks them at once."""

from django.db import migrations

TABLE = "agents_node"


def set_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} SET (fillfactor = 50)")


def reset_fillfactor(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0033_lease_forecast_age"),
    ]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
