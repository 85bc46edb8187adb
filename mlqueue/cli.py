"""`mlq`, the command line (issue 15), built on the SDK (mlqueue.client): no Django.

Exit codes: 0 done, 1 the server refused (its detail, then each field's error as `field: message`),
2 a usage error (click's), and `submit --wait`: 0 succeeded, 1 failed, 3 cancelled."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable, Sequence

import click
import yaml

from mlqueue.client import (
    NO_USER,
    Child,
    Client,
    Job,
    MlqError,
    apply_overrides,
    config_path,
    load_spec,
    read_scalar,
)

EXIT_REFUSED = 1
EXIT_FAILED = 1
EXIT_CANCELLED = 3
NOTHING_TO_CANCEL = "name jobs to cancel, or --mine / --state / --team to cancel by filter"
BAD_QUOTA = "--set wants CLASS=N or CLASS.FIELD=N (field: guaranteed, borrowing_limit, weight); got {item!r}"
QUOTA_NEEDS_REASON = "--reason is required with --set: it is recorded in the audit log"

ARRAY_PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?\Z")
ARRAY_HELP = (
    "make the job an array, as Slurm's --array: indices 0-199, 1,5,9-12 or 0-98:2 (every second), then %N to run "
    "at most N at once (0-199%16). A lone number is that one index (--array 7 reruns element 7): 200 elements "
    "are 0-199"
)
BAD_ARRAY_PART = "{part!r} is not an index or a range: write indices such as 0-199, 1,5,9-12 or 0-98:2, then %N"
ARRAY_BACKWARDS = "{part!r} runs backwards: write the lower index first"
ARRAY_STEP = "{part!r}: the step after ':' is at least 1"
ARRAY_PARALLELISM = "{limit!r} after % is the most elements at once: a whole number, at least 1"
ARRAY_AND_SWEEP = "--array makes the job an array, but the spec has a sweep: block: a job is one or the other"
MAX_FAILURES_NEEDS_GROUP = "--max-failures is for a group: give --array, or a spec with an array: or sweep: block"
SEED_NEEDS_SWEEP = "--sweep-seed is for a sweep: the spec has no sweep: block"
FOLLOW_A_GROUP = "--follow prints one job's log; a group's children each have theirs (mlq logs CHILD_ID): use --wait"
NOT_A_GROUP = "job {job} has no children: it is not an array or a sweep"
STATUS_CHILDREN = 20  # children `mlq status` lists before pointing at `mlq children`
SUMMARY_COLUMNS = ("running", "pending", "succeeded", "failed", "cancelled", "early_stopped")

OUTPUTS = click.Choice(["table", "wide", "json", "yaml"])


def output_option(function):
    return click.option(
        "-o", "--output", type=OUTPUTS, default="table", show_default=True, help="table, wide, or json/yaml for scripts"
    )(function)


def _plain(value):
    """Results as plain data for json/yaml: a dataclass's server JSON as it came."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value):
        return value.raw
    return value


def emit(data, output: str, columns: Sequence[tuple[str, Callable]], wide: Sequence[tuple[str, Callable]] = ()):
    """Print `data` (one result or a list) as json, yaml, or a table of `columns` (+ `wide`)."""
    if output == "json":
        click.echo(json.dumps(_plain(data), indent=2, sort_keys=True, default=str))
        return
    if output == "yaml":
        click.echo(yaml.safe_dump(_plain(data), sort_keys=True, default_flow_style=False).rstrip("\n"))
        return
    from rich.console import Console
    from rich.table import Table

    rows = data if isinstance(data, list | tuple) else [data]
    shown = [*columns, *(wide if output == "wide" else ())]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for title, _ in shown:
        table.add_column(title, overflow="fold")
    for row in rows:
        table.add_row(*("" if (cell := get(row)) is None else str(cell) for _, get in shown))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def report(item, output: str, columns, message: str) -> None:
    """What a verb changed: the object itself for -o json/yaml, else one line for a person."""
    if output in ("json", "yaml"):
        emit(item, output, columns)
    else:
        click.echo(message)


def parse_array(text: str) -> dict:
    """`0-199%16` -> {"indices": "0-199", "parallelism": 16}, Slurm's --array syntax: comma-separated
    indices and ranges (`1,5,9-12`, `0-98:2` every second), then `%N` the most at once (no `%`: the
    spec's parallelism, else all). ValueError with the message when malformed; how many elements is
    the server's to bound."""
    listed, percent, limit = text.replace(" ", "").partition("%")
    for part in listed.split(","):
        match = ARRAY_PART.match(part)
        if not match:
            raise ValueError(BAD_ARRAY_PART.format(part=part))
        if match[2] is not None and int(match[2]) < int(match[1]):
            raise ValueError(ARRAY_BACKWARDS.format(part=part))
        if match[3] is not None and int(match[3]) < 1:
            raise ValueError(ARRAY_STEP.format(part=part))
    found = {"indices": listed}
    if percent:
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError(ARRAY_PARALLELISM.format(limit=limit))
        found["parallelism"] = int(limit)
    return found


class ArrayIndices(click.ParamType):
    """--array's value, checked by parse_array: a malformed one is a usage error naming the part."""

    name = "INDICES[%N]"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        try:
            return parse_array(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def with_group_options(spec: dict, *, array: dict | None, max_failures: int | None, sweep_seed: int | None) -> dict:
    """The spec with --array, --max-failures and --sweep-seed put in its group block. --array
    replaces the block's elements (count or indices) and, with %N, its parallelism; the file's
    max_failures stays unless --max-failures is given."""
    out = dict(spec)
    if array is not None:
        if out.get("sweep") is not None:
            raise click.UsageError(ARRAY_AND_SWEEP)
        kept = {key: value for key, value in (out.get("array") or {}).items() if key not in ("count", "indices")}
        out["array"] = {**kept, **array}
    kind = "array" if out.get("array") is not None else "sweep" if out.get("sweep") is not None else None
    if max_failures is not None:
        if kind is None:
            raise click.UsageError(MAX_FAILURES_NEEDS_GROUP)
        out[kind] = {**out[kind], "max_failures": max_failures}
    if sweep_seed is not None:
        if kind != "sweep":
            raise click.UsageError(SEED_NEEDS_SWEEP)
        out["sweep"] = {**out["sweep"], "seed": sweep_seed}
    return out


def group_counts(group: dict) -> str:
    """`3 running, 5 pending, 4 succeeded`: a group's children by state, the empty states left out."""
    counts = [f"{group[column]} {column.replace('_', ' ')}" for column in SUMMARY_COLUMNS if group.get(column)]
    return ", ".join(counts) or "no children"


def group_summary(group: dict) -> str:
    """A group in a line: `array of 12 elements, at most 3 at once, 1 may fail: 3 running, 9 pending`."""
    what = "elements" if group["kind"] == "array" else "trials"
    head = f"{group['kind']} of {group['count']} {what}, at most {group['parallelism']} at once"
    if group.get("max_failures"):
        head += f", {group['max_failures']} may fail"
    if group["kind"] == "sweep":
        head += f" ({group.get('method')}, seed {group.get('seed')}"
        metric = group.get("metric")
        head += f", {metric['goal']} {metric['name']})" if metric else ")"
    return f"{head}: {group_counts(group)}"


def group_cell(job: Job) -> str | None:
    """The jobs list's GROUP column: a parent's kind, size and counts; a child's place in its group."""
    if job.group:
        return f"{job.group['kind']} of {job.group['count']}: {group_counts(job.group)}"
    if job.parent is not None:
        place = f"[{job.array_index}]" if job.array_index is not None else f"trial {job.trial}"
        return f"job {job.parent} {place}"
    return None


def child_place(job: Job) -> str:
    """`element 4 of array job 42`, `trial 3 of sweep job 43: lr=0.001 batch_size=32`."""
    if job.array_index is not None:
        return f"element {job.array_index} of array job {job.parent}"
    params = _params(job)
    return f"trial {job.trial} of sweep job {job.parent}" + (f": {params}" if params else "")


def _number(value) -> str | None:
    return None if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def _params(child: Job) -> str:
    return " ".join(f"{name}={_number(value)}" for name, value in (child.params or {}).items())


def _metric(key: str) -> Callable:
    return lambda child: _number((child.metric or {}).get(key))


ARRAY_CHILD_COLUMNS = [
    ("INDEX", lambda child: child.array_index),
    ("ID", lambda child: child.id),
    ("STATE", lambda child: child.state),
    ("RETRIES", lambda child: child.retries_used),
    ("FAILURE", lambda child: child.failure_class or None),
]
SWEEP_CHILD_COLUMNS = [
    ("RANK", lambda child: child.rank),
    ("TRIAL", lambda child: child.trial),
    ("ID", lambda child: child.id),
    ("STATE", lambda child: child.state),
    ("PARAMS", _params),
    ("BEST", _metric("best")),
    ("LAST", _metric("last")),
    ("STEP", _metric("step")),
]
CHILD_WIDE = [
    ("RESTARTS", lambda child: child.restarts_used),
    ("STARTED", lambda child: child.started_at),
    ("FINISHED", lambda child: child.finished_at),
]


def child_columns(children: Sequence[Child]) -> list:
    return SWEEP_CHILD_COLUMNS if any(child.trial is not None for child in children) else ARRAY_CHILD_COLUMNS


JOB_COLUMNS = [
    ("ID", lambda job: job.id),
    ("NAME", lambda job: job.name),
    ("TEAM", lambda job: job.team),
    ("STATE", lambda job: job.state),
    ("PRI", lambda job: job.priority),
    ("GPUS", lambda job: f"{job.gpu_count} {job.gpu_type}".strip() if job.gpu_count else "-"),
]
JOB_WIDE = [
    ("OWNER", lambda job: job.owner),
    ("SUBMITTED", lambda job: job.submitted_at),
    ("STARTED", lambda job: job.started_at),
    ("FINISHED", lambda job: job.finished_at),
]
JOBS_COLUMNS = [*JOB_COLUMNS, ("GROUP", group_cell)]
QUEUE_COLUMNS = [
    ("POS", lambda entry: entry.position),
    *JOB_COLUMNS,
    ("LIKELY START", lambda entry: entry.likely_start),
    ("REASON", lambda entry: entry.reason),
]
QUEUE_WIDE = [
    ("OWNER", lambda entry: entry.owner),
    ("LATEST START", lambda entry: entry.estimated_start),
    ("RESERVED", lambda entry: ",".join(entry.reserved_nodes)),
]
TASK_COLUMNS = [
    ("RANK", lambda task: task.rank),
    ("STATE", lambda task: task.state),
    ("NODE", lambda task: task.node),
    ("ATTEMPT", lambda task: task.attempt),
    ("EXIT", lambda task: task.exit_code),
]
EVENT_COLUMNS = [
    ("AT", lambda event: event.created_at),
    ("KIND", lambda event: event.kind),
    ("BY", lambda event: event.actor),
    ("FROM", lambda event: event.from_state),
    ("TO", lambda event: event.to_state),
    ("MESSAGE", lambda event: event.message or event.reason),
]
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
    ("ADMIN", lambda node: node.admin_state),
    ("GPUS", lambda node: f"{node.gpu_count} {node.gpu_type}".strip() if node.gpu_count else "-"),
    ("RACK", lambda node: node.rack),
]
NODE_WIDE = [
    ("ZONE", lambda node: node.zone),
    ("HEALTH", lambda node: node.health),
    ("REASON", lambda node: node.admin_reason),
]
TOKEN_COLUMNS = [
    ("ID", lambda token: token.id),
    ("NAME", lambda token: token.name),
    ("HINT", lambda token: token.hint),
    ("LAST USED", lambda token: token.last_used_at),
    ("EXPIRES", lambda token: token.expires_at),
    ("REVOKED", lambda token: token.revoked_at),
]


class Verbs(click.Group):
    """Refusals become their message and exit code 1, whichever verb raised them."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MlqError as error:
            for line in error.lines():
                click.echo(line, err=True)
            ctx.exit(EXIT_REFUSED)


def client(ctx: click.Context) -> Client:
    """The one SDK client of this invocation (`main`'s `obj["client"]` builds it; tests give a fake's)."""
    obj = ctx.find_root().obj
    if "sdk" not in obj:
        obj["sdk"] = obj["client"]()
    return obj["sdk"]


@click.group(cls=Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--server", envvar="MLQ_SERVER", help="the server's URL (default: MLQ_SERVER, then the config file)")
@click.pass_context
def main(ctx: click.Context, server: str | None):
    """mlq: submit and watch jobs on an mlqueue cluster.

    \b
    Example:
      mlq login --server https://mlqueue.example.com
      mlq submit job.yaml --set resources.gpu_count=16 --wait
      mlq queue --mine -o json
    """
    ctx.ensure_object(dict)
    ctx.obj.setdefault("client", lambda: Client(server=server))


# --- housekeeping ----------------------------------------------------------------------------


@main.command()
@click.option("--server", "login_server", help="the server's URL (default: the one configured)")
@click.option("--username", prompt=True)
@click.option("--password", prompt=True, hide_input=True)
@click.option("--name", default="mlq", show_default=True, help="the new token's name")
@click.pass_context
def login(ctx, login_server, username, password, name):
    """Ask for username and password, store a new token in the config file (0600).

    \b
    Example:
      mlq login --server https://mlqueue.example.com
    """
    sdk = client(ctx)
    token = sdk.login(username, password, name, server=login_server)
    click.echo(f"logged in to {sdk.server} as {username}; token {token.name} ({token.hint}) saved in {config_path()}")


@main.group(invoke_without_command=True)
@output_option
@click.pass_context
def tokens(ctx, output):
    """Your API tokens: list them, create one, revoke one.

    \b
    Example:
      mlq tokens
      mlq tokens create ci --expires-in-days 30
      mlq tokens revoke 7
    """
    if ctx.invoked_subcommand is None:
        emit(client(ctx).tokens(), output, TOKEN_COLUMNS)


@tokens.command("create")
@click.argument("name")
@click.option("--expires-in-days", type=click.IntRange(min=1))
@output_option
@click.pass_context
def tokens_create(ctx, name, expires_in_days, output):
    """Create a token NAME; it is shown once.

    \b
    Example:
      mlq tokens create ci --expires-in-days 30
    """
    token = client(ctx).create_token(name, expires_in_days)
    if output in ("json", "yaml"):
        emit(token, output, TOKEN_COLUMNS)
    else:
        click.echo(token.token)
        click.echo(f"token {token.name} ({token.hint}): shown once, store it now", err=True)


@tokens.command("revoke")
@click.argument("token_id", type=int)
@click.pass_context
def tokens_revoke(ctx, token_id):
    """Revoke token TOKEN_ID.

    \b
    Example:
      mlq tokens revoke 7
    """
    client(ctx).revoke_token(token_id)
    click.echo(f"revoked token {token_id}")


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell):
    """Print the shell completion script.

    \b
    Example:
      eval "$(mlq completion bash)"
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)(main, {}, "mlq", "_MLQ_COMPLETE")
    click.echo(completer.source())


# --- jobs ------------------------------------------------------------------------------------


@main.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="override a dotted field; VALUE is YAML: 16 is a number, '16' a string (env values are strings)",
)
@click.option("--array", type=ArrayIndices(), help=ARRAY_HELP)
@click.option(
    "--max-failures",
    type=click.IntRange(min=0),
    help="an array's or a sweep's children that may fail for good before the group fails (default 0)",
)
@click.option(
    "--sweep-seed", type=click.IntRange(0, 2**32 - 1), help="a sweep's seed: the same seed draws the same trials"
)
@click.option("--dry-run", is_flag=True, help="only say whether and where it could run")
@click.option("--wait", is_flag=True, help="wait for the end: exit 0 succeeded, 1 failed, 3 cancelled")
@click.option("--follow", is_flag=True, help="print rank 0's log as it runs (then as --wait)")
@output_option
@click.pass_context
def submit(ctx, spec, overrides, array, max_failures, sweep_seed, dry_run, wait, follow, output):
    """Submit the job spec in SPEC (YAML or JSON). A spec with an array: or sweep: block, or
    --array, makes a group: one parent job whose children are its elements or trials.

    \b
    Example:
      mlq submit job.yaml --set resources.gpu_count=16 --set "env.STEPS='100'" --wait
      mlq submit infer.yaml --array 0-199%16 --max-failures 5
      mlq submit sweep.yaml --sweep-seed 7
    """
    sdk = client(ctx)
    body = apply_overrides(load_spec(spec), overrides)
    body = with_group_options(body, array=array, max_failures=max_failures, sweep_seed=sweep_seed)
    if follow and (body.get("array") is not None or body.get("sweep") is not None):
        raise click.UsageError(FOLLOW_A_GROUP)
    if dry_run:
        verdict = sdk.dry_run(body)
        emit(verdict, output, [("VALID", lambda d: d.valid), ("CAN EVER RUN", lambda d: d.can_ever_run)])
        if output not in ("json", "yaml"):
            _print_explanation(verdict.raw)
        return
    job = sdk.submit(body)
    if output in ("json", "yaml") and not (wait or follow):
        emit(job, output, JOB_COLUMNS)
        return
    made = f"; {group_summary(job.group)}" if job.group else ""
    click.echo(f"submitted job {job.id} ({job.name}): {job.state}{made}", err=output in ("json", "yaml"))
    if follow:
        for line in sdk.logs(job, follow=True):
            click.echo(line)
    if wait or follow:
        done = sdk.wait(job)
        failure = f" ({done.failure_class})" if done.failure_class else ""
        report(done, output, JOB_COLUMNS, f"job {done.id} {done.state}{failure}")
        ctx.exit(outcome_code(done))


def outcome_code(job: Job) -> int:
    return {"SUCCEEDED": 0, "CANCELLED": EXIT_CANCELLED}.get(job.state, EXIT_FAILED)


@main.command()
@click.option("--team")
@click.option("--priority", type=click.Choice(["P0", "P1", "P2", "P3"]))
@click.option("--mine", is_flag=True, help="only jobs you submitted")
@output_option
@click.pass_context
def queue(ctx, team, priority, mine, output):
    """The queue in scheduling order, with each job's reason and forecast start.

    \b
    Example:
      mlq queue --mine -o json
    """
    sdk = client(ctx)
    entries = sdk.queue(team=team, priority=priority)
    if mine:
        me = _me(sdk)
        entries = [entry for entry in entries if entry.owner == me]
    emit(entries, output, QUEUE_COLUMNS, QUEUE_WIDE)


def _me(sdk: Client) -> str:
    """The caller's user name, as `mlq login` recorded it (or MLQ_USER)."""
    if not sdk.user:
        raise MlqError(0, NO_USER)
    return sdk.user


SINCE_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_to_iso(since: str) -> str:
    """`7d`, `12h`, `30m`, `2w` -> the ISO time that long ago; an ISO time as it is."""
    import datetime

    number, unit = since[:-1], since[-1:]
    if unit in SINCE_UNITS and number.isdigit():
        then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=int(number) * SINCE_UNITS[unit])
        return then.isoformat(timespec="seconds")
    try:
        datetime.datetime.fromisoformat(since)
    except ValueError:
        raise click.BadParameter("want 30m, 12h, 7d, 2w or an ISO time", param_hint="--since") from None
    return since


@main.command()
@click.option(
    "--state",
    type=click.Choice(["PENDING", "ASSIGNED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"], case_sensitive=False),
)
@click.option("--team")
@click.option("--mine", is_flag=True, help="only jobs you submitted")
@click.option("--since", help="submitted since: 30m, 12h, 7d, 2w or an ISO time")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option(
    "--children", "with_children", is_flag=True, help="list groups' children too (default: a group is its one row)"
)
@output_option
@click.pass_context
def jobs(ctx, state, team, mine, since, limit, with_children, output):
    """Job history, newest first. An array or sweep is one row with its children's counts
    (mlq children ID lists them).

    \b
    Example:
      mlq jobs --state failed --since 7d
    """
    filters = {
        "state": state.upper() if state else None,
        "team": team,
        "owner": _me(client(ctx)) if mine else None,
        "submitted_after": since_to_iso(since) if since else None,
        "top_level": None if with_children else True,
    }
    emit(client(ctx).jobs(limit=limit, **filters), output, JOBS_COLUMNS, JOB_WIDE)


@main.command()
@click.argument("job", type=int)
@click.option(
    "--children", "all_children", is_flag=True, help=f"a group: list every child (default: the first {STATUS_CHILDREN})"
)
@output_option
@click.pass_context
def status(ctx, job, all_children, output):
    """One job: its state, reason, and tasks (nodes, attempts). A group (array or sweep): its
    children by state and the children themselves (a sweep's best first by its metric).
    -o json/yaml is the job alone: mlq children ID -o json lists the children.

    \b
    Example:
      mlq status 42
    """
    found = client(ctx).get(job)
    if output in ("json", "yaml"):
        emit(found, output, JOB_COLUMNS)
        return
    emit(found, output, JOB_COLUMNS, JOB_WIDE)
    if found.group:
        _print_group(client(ctx), found, output, every=all_children)
    elif found.parent is not None:
        click.echo(f"\n{child_place(found)}")
    if found.reason:
        click.echo(f"\nwaiting: {found.reason}")
        if found.likely_start or found.estimated_start:
            click.echo(f"likely start {found.likely_start or '-'}, latest {found.estimated_start or '-'}")
    if found.tasks:
        click.echo()
        emit(list(found.tasks), output, TASK_COLUMNS)


def _print_group(sdk: Client, parent: Job, output: str, *, every: bool) -> None:
    """A group's summary line, then its children (the first STATUS_CHILDREN unless `every`)."""
    click.echo(f"\n{group_summary(parent.group)}")
    kids = sdk.children(parent)
    shown = kids if every else kids[:STATUS_CHILDREN]
    if shown:
        click.echo()
        emit(shown, output, child_columns(shown), CHILD_WIDE)
    if len(shown) < len(kids):
        click.echo(f"... and {len(kids) - len(shown)} more: mlq children {parent.id}")


@main.command()
@click.argument("job", type=int)
@output_option
@click.pass_context
def children(ctx, job, output):
    """A group's children: an array's elements by index, a sweep's trials best first by its
    metric (with their parameters, best and last value and latest step).

    \b
    Example:
      mlq children 42
      mlq children 42 -o json
    """
    kids = client(ctx).children(job)
    if not kids and output not in ("json", "yaml"):
        click.echo(NOT_A_GROUP.format(job=job), err=True)
        return
    emit(kids, output, child_columns(kids), CHILD_WIDE)


@main.command()
@click.argument("job", type=int)
@output_option
@click.pass_context
def why(ctx, job, output):
    """Why a job waits: the reason, the nodes' histogram, the forecast, what would help.

    \b
    Example:
      mlq why 42
    """
    found = client(ctx).why(job)
    if output in ("json", "yaml"):
        emit(found, output, [])
        return
    click.echo(f"job {found.job_id}: {found.state}")
    _print_explanation(found.raw)


def _text(value) -> str:
    if isinstance(value, dict):
        return value.get("message") or value.get("text") or ", ".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)


def _print_explanation(data: dict):
    """The reason, histogram, reservation, starts and suggestions of a why or dry-run answer."""
    if data.get("reason"):
        click.echo(f"reason: {_text(data['reason'])}")
    placement = data.get("placement")
    if placement:
        nodes = placement.get("nodes") if isinstance(placement, dict) else None
        if isinstance(nodes, list) and all(isinstance(node, dict) for node in nodes):
            # [{"node": "z1-r1-h100-01", "tasks": 1}, ...] -> "z1-r1-h100-01 (1 task), ..."
            placed = ", ".join(
                f"{node.get('node')} ({node.get('tasks')} task{'' if node.get('tasks') == 1 else 's'})"
                for node in nodes
            )
            click.echo(f"would go to: {placed}")
        else:
            click.echo(f"placement: {_text(placement)}")
    histogram = data.get("histogram")
    if histogram:
        # {"fit": "0/32", "rejections": [{"why": ..., "nodes": n}, ...]}, as the job page shows it
        click.echo(f"nodes that fit: {histogram.get('fit')}")
        for row in histogram.get("rejections") or []:
            click.echo(f"  {row.get('nodes')} {row.get('why')}")
    if data.get("reservation"):
        click.echo(f"reservation: {_text(data['reservation'])}")
    for key, label in (("likely_start", "likely start"), ("latest_start", "latest start")):
        if data.get(key):
            click.echo(f"{label}: {data[key]}")
    suggestions = data.get("suggestions") or []
    if suggestions:
        click.echo("what would help:")
        for suggestion in suggestions:
            click.echo(f"  - {_text(suggestion)}")


@main.command()
@click.argument("job", type=int)
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--attempt", type=click.IntRange(min=1), help="default: the latest")
@click.option("--stderr", is_flag=True, help="stderr instead of stdout")
@click.option(
    "-f", "--follow", is_flag=True, help="keep printing new lines as they arrive (streamed) until the job ends"
)
@click.pass_context
def logs(ctx, job, rank, attempt, stderr, follow):
    """A rank's log.

    \b
    Example:
      mlq logs 42 --rank 3 -f
    """
    for line in client(ctx).logs(job, rank=rank, attempt=attempt, stderr=stderr, follow=follow):
        click.echo(line)


@main.command()
@click.argument("job_ids", nargs=-1, type=int)
@click.option("--reason", default="", help="recorded with each cancel")
@click.option("--mine", is_flag=True, help="by filter: your jobs")
@click.option("--state", help="by filter: jobs in this state (e.g. pending)")
@click.option("--team", help="by filter: this team's jobs")
@output_option
@click.pass_context
def cancel(ctx, job_ids, reason, mine, state, team, output):
    """Cancel jobs by id, or every job a filter matches.

    \b
    Example:
      mlq cancel 41 42 --reason "wrong data"
      mlq cancel --mine --state pending
    """
    sdk = client(ctx)
    if job_ids and (mine or state or team):
        raise click.UsageError("give job ids or a filter (--mine/--state/--team), not both")
    if len(job_ids) == 1:
        before = sdk.get(job_ids[0]) if output not in ("json", "yaml") else None
        job = sdk.cancel(job_ids[0], reason=reason)
        if output in ("json", "yaml"):
            emit(job, output, JOB_COLUMNS)
        elif job.group:
            click.echo(group_cancelled(before, job))
        elif job.state == "CANCELLED":
            click.echo(f"job {job.id} cancelled")
        else:
            click.echo(f"job {job.id}: cancel requested; {job.state} until its tasks stop")
        return
    if job_ids:
        result = sdk.cancel(list(job_ids), reason=reason)
    elif mine or state or team:
        result = sdk.cancel_where(reason=reason, owner="me" if mine else None, state=state and state.upper(), team=team)
    else:
        raise click.UsageError(NOTHING_TO_CANCEL)
    if output in ("json", "yaml"):
        emit(result, output, [])
        return
    click.echo(f"cancelled: {' '.join(str(_text(item)) for item in result.cancelled) or 'none'}")
    for item in result.skipped:
        click.echo(f"skipped: {_text(item)}")


def group_cancelled(before: Job, after: Job) -> str:
    """What cancelling a group did to its children: those cancelled now (the difference in its
    CANCELLED count), and those still stopping on their nodes."""
    what = "elements" if after.group["kind"] == "array" else "trials"
    cancelled = after.group["cancelled"] - ((before.group or {}).get("cancelled") or 0)
    stopping = after.group["running"]
    line = f"job {after.id} ({after.group['kind']}): cancelled {cancelled} of its {after.group['count']} {what}"
    if stopping:
        line += f"; {stopping} stopping on their nodes"
    return f"{line}; {after.state}"


@main.command()
@click.argument("job", type=int)
@click.option("--reason", default="", help="shown as the job's pending reason while it is held")
@output_option
@click.pass_context
def hold(ctx, job, reason, output):
    """Hold a pending job: it is not started until released.

    \b
    Example:
      mlq hold 42 --reason "waiting for the new shards"
    """
    held = client(ctx).hold(job, reason=reason)
    report(held, output, JOB_COLUMNS, f"job {held.id} held by {held.raw.get('held_by_name', '')}")


@main.command()
@click.argument("job", type=int)
@output_option
@click.pass_context
def release(ctx, job, output):
    """Release a held job: the scheduler considers it again.

    \b
    Example:
      mlq release 42
    """
    released = client(ctx).release(job)
    report(released, output, JOB_COLUMNS, f"job {released.id} released")


@main.command()
@click.argument("job", type=int)
@click.option("--reason", default="", help="recorded with the stop")
@output_option
@click.pass_context
def requeue(ctx, job, reason, output):
    """Stop a running job gracefully and queue it again (no retry spent).

    \b
    Example:
      mlq requeue 42 --reason "picked up the fixed image"
    """
    requeued = client(ctx).requeue(job, reason=reason)
    report(
        requeued, output, JOB_COLUMNS, f"job {requeued.id}: requeue requested; {requeued.state} until its tasks stop"
    )


@main.command("set")
@click.argument("job", type=int)
@click.option("--priority", type=click.Choice(["P0", "P1", "P2", "P3"]))
@click.option("--max-runtime-hours", type=float)
@click.option("--name")
@output_option
@click.pass_context
def set_(ctx, job, priority, max_runtime_hours, name, output):
    """Change a submitted job: priority (within your rights), a lower max runtime, its name.

    \b
    Example:
      mlq set 42 --priority P1
    """
    if priority is None and max_runtime_hours is None and name is None:
        raise click.UsageError("give --priority, --max-runtime-hours or --name")
    changed = client(ctx).set(job, priority=priority, max_runtime_hours=max_runtime_hours, name=name)
    emit(changed, output, JOB_COLUMNS)


@main.command()
@click.argument("job", type=int)
@output_option
@click.pass_context
def events(ctx, job, output):
    """A job's timeline, oldest first.

    \b
    Example:
      mlq events 42
    """
    emit(client(ctx).events(job), output, EVENT_COLUMNS)


# --- teams and nodes -------------------------------------------------------------------------


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
        resource_class = resource if ":" in resource or resource == "cpu" else f"gpu:{resource}"
        changes.setdefault(resource_class, {})[field] = read_scalar(text, key)
    return changes


@main.command()
@click.argument("team")
@click.option("--set", "changes", multiple=True, metavar="CLASS=N", help="e.g. H100=64, H100.borrowing_limit=80")
@click.option("--reason", help="why (required with --set; audited)")
@output_option
@click.pass_context
def quota(ctx, team, changes, reason, output):
    """A team's quotas; leads change them with --set.

    \b
    Example:
      mlq quota vision
      mlq quota vision --set H100=64 --reason "new project"
    """
    sdk = client(ctx)
    if changes:
        if not reason:
            raise click.UsageError(QUOTA_NEEDS_REASON)
        emit(sdk.set_quota(team, parse_quota_changes(changes), reason), output, QUOTA_COLUMNS)
    else:
        emit(sdk.quota(team), output, QUOTA_COLUMNS)


@main.command()
@click.option("--state")
@click.option("--rack")
@click.option("--zone")
@click.option("--gpu-type")
@output_option
@click.pass_context
def nodes(ctx, state, rack, zone, gpu_type, output):
    """The cluster's nodes.

    \b
    Example:
      mlq nodes --state READY --rack r1
    """
    found = client(ctx).nodes(state=state, rack=rack, zone=zone, gpu_type=gpu_type)
    emit(found, output, NODE_COLUMNS, NODE_WIDE)


def _node_verb(action: str, example: str):
    @click.argument("node")
    @click.option("--reason", required=True, help="recorded in the audit log")
    @output_option
    @click.pass_context
    def verb(ctx, node, reason, output):
        emit(getattr(client(ctx), action)(node, reason), output, NODE_COLUMNS, NODE_WIDE)

    verb.__doc__ = f"{action.capitalize()} NODE (admins).\n\n    \b\n    Example:\n      {example}\n    "
    return main.command(action)(verb)


_node_verb("cordon", 'mlq cordon gpu-017 --reason "flaky NVLink"')
_node_verb("drain", 'mlq drain gpu-017 --reason "maintenance"')
_node_verb("uncordon", 'mlq uncordon gpu-017 --reason "repaired"')


if __name__ == "__main__":
    main()
