"""Is the database ready for the server processes? One try of deploy/entrypoint.sh's
`wait-for-migrations`, which runs it every few seconds until it exits 0:

    python -m mlqueue.migrations_ready

exits READY (0) when the database answers and no migration is left to apply; UNAPPLIED (1)
when some are (the migrate job has not run yet, or not finished), naming them; UNREACHABLE (2)
when the database cannot be reached at all, with the database's own reason (FATAL: database
"x" does not exist, password authentication failed, no route to the host); BROKEN (3) for
anything else (bad settings). Always one line, so that the entrypoint can show it whole.

It connects without the connection pool (MLQ_DB_POOL=0): a pool only says that it "couldn't
get a connection after 2.00 sec" and logs the reason in a warning of its own, which a caller
keeping the last lines of the output would cut off."""

import os
import sys

READY, UNAPPLIED, UNREACHABLE, BROKEN = 0, 1, 2, 3
NOTHING_TO_APPLY = "the database is reachable and every migration is applied"
CANNOT_CONNECT = "cannot connect to the database: {reason}"
NOT_APPLIED = "{count} migration(s) not applied yet: {names}"
CANNOT_CHECK = "cannot check the migrations: {error}"
NAMES_SHOWN = 5


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def unapplied_migrations(connection) -> list[str]:
    """What `migrate` would apply, in order, as "app.name"."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]


def check(connection) -> tuple[int, str]:
    """(status, the one line to say) for the database behind `connection`."""
    from django.db.utils import OperationalError

    try:
        connection.ensure_connection()
    except OperationalError as exc:
        return UNREACHABLE, CANNOT_CONNECT.format(reason=one_line(exc))
    names = unapplied_migrations(connection)
    if not names:
        return READY, NOTHING_TO_APPLY
    shown = ", ".join(names[:NAMES_SHOWN]) + (", ..." if len(names) > NAMES_SHOWN else "")
    return UNAPPLIED, NOT_APPLIED.format(count=len(names), names=shown)


def main() -> None:
    os.environ["MLQ_DB_POOL"] = "0"  # see the module docstring
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlqueue.settings")
    try:
        import django

        django.setup()
        from django.db import connection

        status, message = check(connection)
    except Exception as exc:  # one line instead of a traceback (the entrypoint keeps the last ones)
        status, message = BROKEN, CANNOT_CHECK.format(error=one_line(f"{type(exc).__name__}: {exc}"))
    print(message, file=sys.stdout if status == READY else sys.stderr, flush=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
