"""Teams, quotas and nodes: who may use what, and the admins' node verbs."""

from collections.abc import Sequence

import click

from mlqueue.cli.app import AnyCase, client, main
from mlqueue.cli.output import emit, output_option
from mlqueue.client import NODE_STATES, MlqError, read_scalar

BAD_QUOTA = "--set wants CLASS=N or CLASS.FIELD=N (field: guaranteed, borrowing_limit, weight); got {item!r}"
QUOTA_NEEDS_REASON = "--reason is required with --set: it is recorded in the audit log"

TEAM_COLUMNS = [
    ("TEAM", lambda team: team.name),
    ("PARENT", lambda team: team.parent),
    ("MY ROLE", lambda team: team.my_role),
]
QUOTA_COLUMNS = [
    ("CLASS", lambda quota: quota.resource_class),
    ("GUARANTEED", lambda quota: quota.guaranteed),
    ("BORROW LIMIT", lambda quota: quota.borrowing_limit),
    ("WEIGHT", lambda quota: quota.weight),
]
NODE_COLUMNS = [
    ("NODE", lambda node: node.name),
    ("STATE", lambda node: node.state),
    # DRAINED: DRAINING with no task left (Slurm's word): a drain that is done.
    ("ADMIN", lambda node: "DRAINED" if node.raw.get("drained") else node.admin_state),
    ("TASKS", lambda node: node.raw.get("tasks")),
    ("GPUS", lambda node: f"{node.gpu_count} {node.gpu_type}".strip() if node.gpu_count else "-"),
    ("RACK", lambda node: node.rack),
]
NODE_WIDE = [
    ("ZONE", lambda node: node.zone),
    ("HEALTH", lambda node: node.health),
    ("REASON", lambda node: node.admin_reason),
    ("EXCLUDED", lambda node: ",".join(sorted(node.excluded_gpus, key=int)) or "-"),
    # Whether its agent runs jobs' images (a container runtime); "-": not reported.
    ("IMAGES", lambda node: {True: "yes", False: "no"}.get(node.raw.get("runs_images"), "-")),
]


@main.command()
@output_option
@click.pass_context
def teams(ctx, output):
    """The teams, and your role in each.

    \b
    Example:
      mlq teams -o yaml
    """
    emit(client(ctx).teams(), output, TEAM_COLUMNS)


def parse_quota_changes(items: Sequence[str]) -> dict:
    """`H100=64` -> {"gpu:H100": {"guaranteed": 64}}; `H100.borrowing_limit=80`, `cpu.weight=2` too."""
    changes: dict[str, dict] = {}
    for item in items:
        key, equals, text = item.partition("=")
        resource, _, field = key.partition(".")
        field = field or "guaranteed"
        if not equals or not resource or field not in ("guaranteed", "borrowing_limit", "weight"):
            raise click.BadParameter(BAD_QUOTA.format(item=item), param_hint="--set")
        # The server takes a class in any case ("h100" -> gpu:H100, "CPU" -> cpu).
        resource_class = resource if ":" in resource or resource.lower() == "cpu" else f"gpu:{resource}"
        try:
            changes.setdefault(resource_class, {})[field] = read_scalar(text, key)
        except MlqError as error:  # not YAML: a usage error, as a malformed item is
            raise click.BadParameter(error.detail, param_hint="--set") from None
    return changes


def quota_wide(sdk, team: str) -> list[tuple]:
    """-o wide's columns: the team's standing per class from GET /fair-share (what it holds
    now, above its guarantee, and lends), as the teams page shows it."""
    standing = next((row for row in sdk.request("GET", "/fair-share")["teams"] if row["name"] == team), None)
    by_class = {row["resource_class"]: row for row in (standing or {}).get("classes") or ()}

    def column(title: str, field: str) -> tuple:
        return title, lambda quota: by_class.get(quota.resource_class, {}).get(field)

    return [column("USED", "used"), column("BORROWED", "borrowed"), column("LENT", "lent"), column("SHARE", "share")]


HISTORY_COLUMNS = [
    ("AT", lambda event: event["created_at"]),
    ("BY", lambda event: event["actor"]),
    ("KIND", lambda event: event["kind"]),
    ("MESSAGE", lambda event: event["message"] or event["reason"]),
]


@main.command()
@click.argument("team")
@click.option("--set", "changes", multiple=True, metavar="CLASS=N", help="e.g. H100=64, H100.borrowing_limit=80")
@click.option("--history", is_flag=True, help="its quota changes (for members: role changes too), newest first")
@click.option("--reason", help="why (required with --set; audited)")
@output_option
@click.pass_context
def quota(ctx, team, changes, reason, history, output):
    """A team's quotas (-o wide: with its use, borrowed, lent and share); leads change them
    with --set (a team's weight: admins and leads of the team above; docs/quotas.md).

    \b
    Example:
      mlq quota research-vision -o wide
      mlq quota research-vision --set H100=18 --set H100.borrowing_limit=40 --reason "new project"
      mlq quota research-vision --set H100.weight=2 --reason "paper deadline"
      mlq quota research-vision --history
    """
    sdk = client(ctx)
    if history:  # QA: a lead saw her team's quota history in the API alone
        if changes:
            raise click.UsageError("give --set or --history, not both")
        emit(sdk.team_history(team), output, HISTORY_COLUMNS)
        return
    if changes:
        if not reason:
            raise click.UsageError(QUOTA_NEEDS_REASON)
        quotas = sdk.set_quota(team, parse_quota_changes(changes), reason)
    else:
        quotas = sdk.quota(team)
    emit(quotas, output, QUOTA_COLUMNS, quota_wide(sdk, team) if output == "wide" else ())


@main.command()
@click.option("--state", multiple=True, type=AnyCase(NODE_STATES), help="repeat for several")
@click.option("--rack")
@click.option("--zone")
@click.option("--gpu-type", help="H100, A100, ...; cpu for the nodes without GPUs")
@output_option
@click.pass_context
def nodes(ctx, state, rack, zone, gpu_type, output):
    """The cluster's nodes.

    \b
    Example:
      mlq nodes --state READY --rack z1-r1
      mlq nodes --state CORDONED --state DRAINING
      mlq nodes --gpu-type cpu
    """
    found = client(ctx).nodes(state=list(state) or None, rack=rack, zone=zone, gpu_type=gpu_type)
    emit(found, output, NODE_COLUMNS, NODE_WIDE)


UNCHANGED = "{node}: already so: nothing changed, nothing recorded"
STILL_FAULTY = "{node}: back in service, but its latest health sample still reports: {fault}"


def said_unchanged(found, output: str) -> None:
    """That an action changed nothing (the API's `changed`: an uncordon of a node in service),
    on stderr beside the table; it printed the table alone, as if it had done something (QA)."""
    if output == "table" and found.raw.get("changed") is False:
        click.echo(UNCHANGED.format(node=found.name), err=True)
    for fault in found.raw.get("warnings") or () if output == "table" else ():
        click.echo(STILL_FAULTY.format(node=found.name, fault=fault), err=True)


def _node_verb(action: str, example: str):
    @click.argument("node")
    @click.option("--reason", required=True, help="recorded in the audit log")
    @output_option
    @click.pass_context
    def verb(ctx, node, reason, output):
        found = getattr(client(ctx), action)(node, reason)
        said_unchanged(found, output)
        emit(found, output, NODE_COLUMNS, NODE_WIDE)

    verb.__doc__ = f"{action.capitalize()} NODE (admins).\n\n    \b\n    Example:\n      {example}\n    "
    return main.command(action)(verb)


_node_verb("cordon", 'mlq cordon gpu-017 --reason "flaky NVLink"')
_node_verb("uncordon", 'mlq uncordon gpu-017 --reason "repaired"')


@main.command()
@click.argument("node")
@click.option("--reason", required=True, help="recorded in the audit log")
@click.option("--wait", is_flag=True, help="let running tasks finish instead of stopping them now")
@output_option
@click.pass_context
def drain(ctx, node, reason, wait, output):
    """Drain NODE (admins): no new tasks; running ones are stopped gracefully and requeued, or
    with --wait left to finish.

    \b
    Example:
      mlq drain gpu-017 --reason "maintenance"
      mlq drain gpu-017 --reason "firmware" --wait
    """
    found = client(ctx).drain(node, reason, wait=True if wait else None)
    said_unchanged(found, output)
    emit(found, output, NODE_COLUMNS, NODE_WIDE)


@main.command("include-gpus")
@click.argument("node")
@click.option("--gpu", "gpus", type=click.IntRange(0, 15), multiple=True, help="a GPU index (repeat); default: all")
@click.option("--reason", required=True, help="recorded in the audit log")
@output_option
@click.pass_context
def include_gpus(ctx, node, gpus, reason, output):
    """Put NODE's GPUs excluded for a fault back into placement (admins).

    \b
    Example:
      mlq include-gpus gpu-017 --gpu 3 --reason "board swapped"
    """
    found = client(ctx).include_gpus(node, reason, list(gpus) or None)
    if output == "table" and found.raw.get("changed") is False:
        click.echo(f"{node}: no GPU was excluded: nothing changed, nothing recorded", err=True)
    elif output == "table":  # what went back and what is still out, beside the node's row
        back = ", ".join(map(str, sorted(gpus))) if gpus else "every excluded GPU"
        still = ", ".join(sorted(found.excluded_gpus, key=int)) or "none"
        click.echo(f"{node}: put back {back}; still excluded: {still}", err=True)
    emit(found, output, NODE_COLUMNS, NODE_WIDE)
