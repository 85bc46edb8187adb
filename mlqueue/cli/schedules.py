"""`mlq schedules`: list, show, create, suspend, resume, run (now) and delete schedules
(docs/schedules.md). A schedule is made from a spec with a `schedule:` block, as `mlq submit`
of that spec makes it."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from mlqueue.cli.app import client, main, overridden, set_option
from mlqueue.cli.output import emit, output_option, report
from mlqueue.client import Fire, Schedule, load_spec

SCHEDULE_COLUMNS = [
    ("ID", lambda s: s.id),
    ("NAME", lambda s: s.name),
    ("TEAM", lambda s: s.team),
    ("CRON", lambda s: s.cron),
    ("TIMEZONE", lambda s: s.timezone),
    ("CONCURRENCY", lambda s: s.concurrency),
    ("STATE", lambda s: "suspended" if s.suspended else "active"),
    ("NEXT FIRE", lambda s: "-" if s.suspended else s.next_run_local),
    ("LAST", lambda s: f"{s.last_outcome} {in_zone(s.last_fire_at, s.timezone)}" if s.last_outcome else "-"),
]
SCHEDULE_WIDE = [
    ("OWNER", lambda s: s.owner),
    ("DEADLINE MIN", lambda s: s.starting_deadline_minutes),
    ("LAST JOB", lambda s: s.last_job),
    ("SUSPENDED BECAUSE", lambda s: s.suspended_reason),
]
FIRE_COLUMNS = [
    ("FIRE TIME (UTC)", lambda f: f.scheduled_for),
    ("OUTCOME", lambda f: f.outcome),
    ("JOB", lambda f: f.job),
    ("MESSAGE", lambda f: f.message),
]


def in_zone(moment: str | None, zone: str) -> str | None:
    """A UTC time of the API's in the schedule's time zone, as NEXT FIRE shows its next time (QA:
    NEXT FIRE read 03:00+02:00 beside LAST 01:00Z, the same hour of day). As sent where the zone
    is not known here (an older tz database than the server's)."""
    try:
        return datetime.fromisoformat(moment).astimezone(ZoneInfo(zone)).isoformat()
    except (TypeError, ValueError, ZoneInfoNotFoundError):
        return moment


def schedule_line(schedule: Schedule) -> str:
    """`schedule 3 (nightly): '0 3 * * *' in Europe/Berlin, next 2026-04-21T03:00:00+02:00`."""
    return f"schedule {schedule.id} ({schedule.name}): {_timing(schedule)}"


def created_line(schedule: Schedule) -> str:
    """What a create did: made the schedule, or found one of that name made before with these
    very settings (the server's 200: nothing was created)."""
    if schedule.existing:
        return f"schedule {schedule.id} ({schedule.name}) exists already with these settings: {_timing(schedule)}"
    return f"created {schedule_line(schedule)}"


def _timing(schedule: Schedule) -> str:
    when = f"suspended ({schedule.suspended_reason})" if schedule.suspended else f"next {schedule.next_run_local}"
    return f"{schedule.cron!r} in {schedule.timezone}, {when}"


def fire_line(fire: Fire) -> str:
    return f"{fire.outcome}: {fire.message}" + (f" (job {fire.job})" if fire.job and "job" not in fire.message else "")


@main.group()
def schedules():
    """Schedules: a spec submitted as a run at each fire time of a cron expression.

    \b
    Example:
      mlq schedules create -f nightly.yaml
      mlq schedules list
      mlq schedules run 3
      mlq schedules suspend 3 --reason "dataset migration"
    """


@schedules.command("list")
@output_option
@click.pass_context
def list_schedules(ctx, output):
    """Your teams' schedules, newest first, with each one's next fire time in its time zone.

    \b
    Example:
      mlq schedules list -o wide
    """
    emit(client(ctx).schedules(), output, SCHEDULE_COLUMNS, SCHEDULE_WIDE)


@schedules.command()
@click.argument("schedule_id", type=int)
@output_option
@click.pass_context
def show(ctx, schedule_id, output):
    """A schedule and its last fire times (newest first).

    \b
    Example:
      mlq schedules show 3
    """
    schedule = client(ctx).schedule(schedule_id)
    if output in ("json", "yaml"):
        emit(schedule, output, SCHEDULE_COLUMNS)
        return
    emit(schedule, "wide", SCHEDULE_COLUMNS, SCHEDULE_WIDE)
    click.echo("")
    if schedule.fires:
        emit(list(schedule.fires), "table", FIRE_COLUMNS)
    else:
        click.echo("no fire times yet")


@schedules.command()
@click.option("-f", "--file", "spec", required=True, type=click.Path(exists=True, dir_okay=False))
@set_option("override a dotted field, as submit")
@output_option
@click.pass_context
def create(ctx, spec, overrides, output):
    """Create a schedule from a spec with a schedule: block (nothing is sent without one).

    \b
    Example:
      mlq schedules create -f examples/nightly.yaml --set schedule.cron='0 4 * * *'
    """
    schedule = client(ctx).create_schedule(overridden(load_spec(spec), overrides))
    report(schedule, output, SCHEDULE_COLUMNS, created_line(schedule))


@schedules.command()
@click.argument("schedule_id", type=int)
@click.option("--reason", default="", help="shown with the schedule while it is suspended")
@output_option
@click.pass_context
def suspend(ctx, schedule_id, reason, output):
    """Stop firing until resumed.

    \b
    Example:
      mlq schedules suspend 3 --reason "dataset migration"
    """
    schedule = client(ctx).suspend_schedule(schedule_id, reason=reason)
    report(schedule, output, SCHEDULE_COLUMNS, schedule_line(schedule))


@schedules.command()
@click.argument("schedule_id", type=int)
@output_option
@click.pass_context
def resume(ctx, schedule_id, output):
    """Fire again, from the next fire time after now (the times missed while suspended are not fired).

    \b
    Example:
      mlq schedules resume 3
    """
    schedule = client(ctx).resume_schedule(schedule_id)
    report(schedule, output, SCHEDULE_COLUMNS, schedule_line(schedule))


@schedules.command()
@click.argument("schedule_id", type=int)
@output_option
@click.pass_context
def run(ctx, schedule_id, output):
    """Run now: an ordinary run as the schedule's owner, honouring its concurrency.

    \b
    Example:
      mlq schedules run 3
    """
    fire = client(ctx).run_schedule(schedule_id)
    report(fire, output, FIRE_COLUMNS, f"schedule {schedule_id}: {fire_line(fire)}")


@schedules.command()
@click.argument("schedule_id", type=int)
@click.pass_context
def delete(ctx, schedule_id):
    """Delete a schedule and its fire history; its runs stay.

    \b
    Example:
      mlq schedules delete 3
    """
    client(ctx).delete_schedule(schedule_id)
    click.echo(f"schedule {schedule_id} deleted")
