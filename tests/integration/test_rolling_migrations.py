"""A release's migrations run while the release before it still serves (docs/deploy.md: migrate
once per release, then the pods roll one at a time). A column those processes do not know must
not fail their writes: an operator's walkthrough found migration 0043's NOT NULL column without a
database default made every submit of the old web processes a 500."""

from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField
from django.db.models import NOT_PROVIDED

# The migrations before the rule; a new one keeps to it.
FIRST_KEPT = {"scheduling": "0043", "teams": "0012", "agents": "0007", "notifications": "0002"}


def test_an_added_column_has_a_database_default_or_takes_null(db):
    loader = MigrationLoader(connection)
    broken = []
    for (app, name), migration in sorted(loader.disk_migrations.items()):
        if app not in FIRST_KEPT or name[:4] < FIRST_KEPT[app]:
            continue
        for operation in migration.operations:
            field = getattr(operation, "field", None)
            if isinstance(operation, AddField) and not field.null and field.db_default is NOT_PROVIDED:
                broken.append(f"{app}.{name}: {operation.model_name}.{operation.name}")
    assert broken == []


def test_held_with_group_defaults_in_the_database(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_default FROM information_schema.columns "
            "WHERE table_name = 'scheduling_job' AND column_name = 'held_with_group'"
        )
        assert cursor.fetchone()[0] == "false"
