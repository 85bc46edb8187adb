"""`mlq maintenance`: list, show, create, change and cancel maintenance windows (admins; docs/maintenance.md)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import click

from mlqueue.cli.app import AnyCase, client, main
from mlqueue.cli.output import emit, output_option, report
from mlqueue.client import MaintenanceWindow, MlqError

ONE_TARGET = "give exactly one of --rack, --zone or --node (repeatable)"
ONE_END = "give --hours or --until"
NOTHING_TO_CHANGE = "give what to change: --at, --hours, --until or --reason"
FROM_NOW = re.compile(r"\+(\d+(?:\.\d+)?)([mhd])")
# What looks meant as a time from now but is not one of ours: -30m, +40s, +1y (QA: they went to
# the server as typed and came back as "Datetime has wrong format").
LOOKS_RELATIVE = re.compile(r"[+-]\s*\d[\d.]*\s*[a-zA-Z]*")
NOT_FROM_NOW = "{value!r}: a time from now is + and a number of m, h or d (+30m, +2h, +1d)"
NOT_A_TIME = "{value!r} is not a time: give ISO 8601 (2027-01-15T02:00Z) or a time from now (+30m, +2h, +1d)"
# The API's fields, named in its refusals, as the options that give them (QA: `--hours 0` was
# refused as "duration_hours: ...").
OPTIONS = {"starts_at": "--at", "ends_at": "--until", "duration_hours": "--hours"}
FIELD_NAMES = re.compile(r"\b(" + "|".join(OPTIONS) + r")\b")
IN_THE_PAST = "{value!r} is in the past: a window starts and ends after now (+30m, +2h, +1d)"
# Past the calendar's end (year 9999): `+99999999d` overflowed into a traceback (QA).
TOO_FAR_AHEAD = "{value!r} is too far ahead: a window starts within a year from now and lasts at most 30 days"
UNITS = {"m": "minutes", "h": "hours", "d": "days"}
TIME_HELP = "ISO 8601 (2027-01-15T02:00Z), or from now: +30m, +2h, +1d"

WINDOW_COLUMNS = [
    ("ID", lambda w: w.id),
    ("TARGET", lambda w: w.target),
    ("STATE", lambda w: w.state),
    ("STARTS (UTC)", lambda w: w.starts_at),
    ("HOURS", lambda w: f"{w.duration_hours:g}"),
    ("NODES", lambda w: len(w.nodes)),
    ("REASON", lambda w: w.reason),
]
WINDOW_WIDE = [
    ("ENDS (UTC)", lambda w: w.ends_at),
    ("DRAINED", lambda w: ", ".join(w.drained)),
    ("BY", lambda w: w.created_by),
]


EVENT_COLUMNS = [
    ("AT", lambda event: event["created_at"]),
    ("BY", lambda event: event["actor"]),
    ("REASON", lambda event: event["reason"]),
    ("MESSAGE", lambda event: event["message"]),
]


def window_line(window: MaintenanceWindow) -> str:
    """`maintenance #7 (rack z1-r3): SCHEDULED, 2026-12-02T02:00:00Z for 4 h, 8 node(s)`."""
    return (
        f"maintenance #{window.id} ({window.target}): {window.state}, {window.starts_at} for "
        f"{window.duration_hours:g} h, {len(window.nodes)} node(s)"
    )


def clock() -> datetime:
    return datetime.now(UTC)


def when(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An ISO 8601 time as given (the server reads it), or `+2h` from now (this machine's clock)
    as an ISO 8601 time in UTC: an admin need not type the date of tonight's window."""
    found = FROM_NOW.fullmatch(value.strip()) if value else None
    if found is None:
        if value and LOOKS_RELATIVE.fullmatch(value.strip()):
            message = IN_THE_PAST if value.strip().startswith("-") else NOT_FROM_NOW
            raise click.BadParameter(message.format(value=value.strip()), ctx=ctx, param=param)
        if value is not None and not _is_iso(value):  # QA: "yesterday" was told of ISO 8601 alone
            raise click.BadParameter(NOT_A_TIME.format(value=value.strip()), ctx=ctx, param=param)
        return value
    try:
        later = clock() + timedelta(**{UNITS[found[2]]: float(found[1])})
    except OverflowError:
        raise click.BadParameter(TOO_FAR_AHEAD.format(value=value.strip()), ctx=ctx, param=param) from None
    return later.strftime("%Y-%m-%dT%H:%M:%SZ")


def _is_iso(value: str) -> bool:
    try:
        datetime.fromisoformat(value.strip())
    except ValueError:
        return False
    return True


@contextmanager
def options_named():
    """A refusal of the API names the options (`--hours: ...`), not the body's fields."""
    try:
        yield
    except MlqError as refused:
        fields = {OPTIONS.get(field, field): messages for field, messages in refused.fields.items()}
        fields = {field: [_named(str(message)) for message in found] for field, found in fields.items()}
        raise MlqError(refused.status, _named(refused.detail), fields, retry_after=refused.retry_after) from None


def _named(text: str) -> str:
    return FIELD_NAMES.sub(lambda found: OPTIONS[found[1]], text)


@main.group()
def maintenance():
    """Maintenance windows: drain a rack, a zone or nodes at a time, uncordon them after.

    \b
    Example:
      mlq maintenance create --rack z1-r3 --at +2h --hours 4 --reason "PDU swap"
      mlq maintenance list
      mlq maintenance show 7
      mlq maintenance change 7 --at +3h
      mlq maintenance cancel 7
    """


@maintenance.command("list")
@click.option(
    "--state",
    type=AnyCase(["SCHEDULED", "ACTIVE", "DONE", "CANCELLED"]),
    help="default: open ones",
)
@output_option
@click.pass_context
def list_windows(ctx, state, output):
    """The scheduled and active windows, soonest first (or those in --state).

    \b
    Example:
      mlq maintenance list -o wide
    """
    emit(client(ctx).maintenance_windows(state), output, WINDOW_COLUMNS, WINDOW_WIDE)


@maintenance.command()
@click.option("--rack")
@click.option("--zone")
@click.option("--node", "nodes", multiple=True, help="a node's name (repeat for several)")
@click.option("--at", "starts_at", required=True, callback=when, help=f"the start: {TIME_HELP}")
@click.option("--hours", type=float, help="how long")
@click.option("--until", "ends_at", callback=when, help="or the end, as --at")
@click.option("--reason", required=True, help="shown on the nodes and in the audit log")
@output_option
@click.pass_context
def create(ctx, rack, zone, nodes, starts_at, hours, ends_at, reason, output):
    """Schedule a window: its nodes drain at --at (running jobs get SIGTERM and their grace,
    then requeue), jobs that would run into it do not start there before, and the nodes it
    drained are uncordoned at its end.

    \b
    Example:
      mlq maintenance create --rack z1-r3 --at 2027-01-15T02:00Z --hours 4 --reason "PDU swap"
      mlq maintenance create --node gpu-017 --at +30m --until +2h --reason "NVLink reseat"
    """
    if sum(bool(target) for target in (rack, zone, nodes)) != 1:
        raise click.UsageError(ONE_TARGET)
    if hours is None and ends_at is None:
        raise click.UsageError(ONE_END)
    with options_named():
        window = client(ctx).schedule_maintenance(
            rack=rack, zone=zone, names=nodes, starts_at=starts_at, ends_at=ends_at, duration_hours=hours, reason=reason
        )
    report(window, output, WINDOW_COLUMNS, f"scheduled {window_line(window)}")


@maintenance.command()
@click.argument("window_id", type=int)
@output_option
@click.pass_context
def show(ctx, window_id, output):
    """One window (its times, nodes and those it drained) and its history, newest first.
    -o json/yaml is the window as the API answers it, its history under `events`.

    \b
    Example:
      mlq maintenance show 7
    """
    sdk = client(ctx)
    window, events = sdk.maintenance_window(window_id), sdk.maintenance_events(window_id)
    if output in ("json", "yaml"):
        emit({**window.raw, "events": events}, output, [])
        return
    emit(window, output, WINDOW_COLUMNS, WINDOW_WIDE)
    click.echo(f"\nnodes: {', '.join(window.nodes) or '-'}")
    if window.drained:
        click.echo(f"drained by it: {', '.join(window.drained)}")
    if events:
        click.echo("\nhistory, newest first:")
        emit(events, output, EVENT_COLUMNS)


@maintenance.command()
@click.argument("window_id", type=int)
@click.option("--at", "starts_at", callback=when, help=f"a new start: {TIME_HELP}; it keeps its length")
@click.option("--hours", type=float, help="a new length, from its (new) start")
@click.option("--until", "ends_at", callback=when, help="or a new end, as --at")
@click.option("--reason")
@output_option
@click.pass_context
def change(ctx, window_id, starts_at, hours, ends_at, reason, output):
    """Move a scheduled window, change its length or its reason (not its nodes: cancel it and
    create another). A window that has started cannot move: end it with cancel.

    \b
    Example:
      mlq maintenance change 7 --at 2027-01-16T02:00Z
      mlq maintenance change 7 --hours 6 --reason "PDU swap, both feeds"
    """
    if starts_at is None and hours is None and ends_at is None and reason is None:
        raise click.UsageError(NOTHING_TO_CHANGE)
    if hours is not None and ends_at is not None:
        raise click.UsageError("give --hours or --until, not both")
    with options_named():
        window = client(ctx).change_maintenance(
            window_id, starts_at=starts_at, ends_at=ends_at, duration_hours=hours, reason=reason
        )
    report(window, output, WINDOW_COLUMNS, f"changed {window_line(window)}")


@maintenance.command()
@click.argument("window_id", type=int)
@output_option
@click.pass_context
def cancel(ctx, window_id, output):
    """Cancel a scheduled window, or end an active one now (its nodes are uncordoned).

    \b
    Example:
      mlq maintenance cancel 7
    """
    window = client(ctx).cancel_maintenance(window_id)
    report(window, output, WINDOW_COLUMNS, f"cancelled {window_line(window)}")
