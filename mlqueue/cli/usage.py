"""`mlq usage`: GPU-hours, cost, lost work and queue waits from the usage ledger."""

import click

from mlqueue.cli.app import AnyCase, client, main
from mlqueue.cli.output import OUTPUTS, emit
from mlqueue.client import PRIORITIES

GROUPS = ("team", "owner", "resource_class", "priority", "day", "week")


def hours(value) -> str:
    return f"{value:,.1f}"


def wait(seconds) -> str:
    """A queue wait as a person reads it: 45s, 12m, 3.5h."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def columns(group_by: list[str], currency: str):
    keys = [(name.upper().replace("_", " "), lambda row, name=name: row.get(name, "TOTAL")) for name in group_by]
    figures = [
        ("GPU-H", lambda row: hours(row["gpu_hours"])),
        ("CPU-H", lambda row: hours(row["cpu_hours"])),
        (f"COST ({currency})", lambda row: f"{row['cost']:,.2f}"),
        ("LOST GPU-H", lambda row: hours(row["lost_gpu_hours"])),
        ("WAIT P50", lambda row: wait(row["queue_wait_p50_s"])),
        ("WAIT P95", lambda row: wait(row["queue_wait_p95_s"])),
    ]
    wide = [
        ("LOST BY CAUSE", lambda row: ", ".join(f"{c} {h:g}" for c, h in row["lost_gpu_hours_by_cause"].items())),
        ("OUTCOMES", lambda row: ", ".join(f"{o} {n}" for o, n in row["jobs_by_outcome"].items())),
    ]
    return [*keys, *figures], wide


def resource_class(value: str | None) -> str | None:
    """`H100` -> `gpu:H100`, as `mlq quota` reads classes; `cpu` (any case) and `gpu:X` as
    given: the server takes a class in any case (`h100`)."""
    if value is None or ":" in value:
        return value
    return "cpu" if value.lower() == "cpu" else f"gpu:{value}"


@main.command()
@click.option("--from", "start", metavar="TIME", help="ISO date or time; default: 30 days before --to")
@click.option("--to", "end", metavar="TIME", help="ISO date or time (exclusive); default: now")
@click.option("--team")
@click.option("--owner", help="a user name")
@click.option("--mine", is_flag=True, help="only your usage (the API's owner=me)")
@click.option("--class", "rclass", metavar="CLASS", help="a resource class: H100, gpu:A100, cpu")
@click.option("--priority", type=AnyCase(PRIORITIES))
@click.option("--by", "group_by", default="team", show_default=True, help=f"one or two of {', '.join(GROUPS)}")
@click.option("--csv", "as_csv", is_flag=True, help="the server's CSV, for a spreadsheet")
@click.option("-o", "--output", type=OUTPUTS, default="table", show_default=True, help="table, wide, or json/yaml")
@click.pass_context
def usage(ctx, start, end, team, owner, mine, rclass, priority, group_by, as_csv, output):
    """Usage and cost from the ledger: GPU- and CPU-hours, cost, lost GPU-hours, queue waits.

    \b
    Example:
      mlq usage --from 2026-01-01 --to 2026-04-01
      mlq usage --team research-vision --by owner -o wide
      mlq usage --by team,week --csv > usage.csv
      mlq usage --mine --class h100
    """
    if mine and owner:
        raise click.UsageError("give --owner or --mine, not both")
    owner = "me" if mine else owner
    filters = {"team": team, "owner": owner, "resource_class": resource_class(rclass), "priority": priority}
    answer = client(ctx).usage(start=start, end=end, group_by=group_by, csv=as_csv, **filters)
    if as_csv:
        click.echo(answer, nl=False)
        return
    if output in ("json", "yaml"):
        emit(answer, output, [])
        return
    shown, wide = columns(answer["group_by"], answer["currency"])
    click.echo(f"usage from {answer['from']} to {answer['to']}")
    emit([*answer["rows"], answer["total"]], output, shown, wide)
