"""Submit a job, and the verbs that read jobs: queue, jobs, status, why, logs, events."""

from __future__ import annotations

import datetime
import json

import click

from mlqueue.cli.app import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    AnyCase,
    client,
    main,
    one_value,
    overridden,
    set_option,
    watching,
)
from mlqueue.cli.columns import (
    EVENT_COLUMNS,
    JOB_COLUMNS,
    JOB_WIDE,
    JOBS_COLUMNS,
    QUEUE_COLUMNS,
    QUEUE_WIDE,
    STALE_MARK,
    TASK_COLUMNS,
)
from mlqueue.cli.dry_run import print_dry_run, print_explanation, would_be_refused
from mlqueue.cli.groups import (
    ARRAY_HELP,
    FOLLOW_A_GROUP,
    STATUS_CHILDREN,
    ArrayIndices,
    child_place,
    group_summary,
    print_group,
    with_group_options,
)
from mlqueue.cli.output import emit, output_option, report
from mlqueue.cli.schedules import SCHEDULE_COLUMNS, created_line
from mlqueue.client import JOB_STATES, PRIORITIES, Client, Job, MlqError, Schedule, Submitted, load_specs
from mlqueue.client.sdk import BATCH_INDEX
from mlqueue.client.specs import is_json_lines

ONE_SPEC_ONLY = "--dry-run, --wait and --follow take one spec file (not several, nor a JSON Lines file)"
SUBMITTED_COLUMNS = [
    ("STATUS", lambda s: s.status),
    ("JOB", lambda s: s.id),
    ("CLIENT JOB ID", lambda s: s.client_job_id or ""),
    ("NAME", lambda s: s.name),
    ("STATE", lambda s: s.state),
]
SCHEDULE_NOT_A_JOB = (
    "a spec with a schedule: block makes a schedule, not a job: there is nothing to --wait for or --follow"
)


DRY_RUN_ALONE = "--dry-run submits nothing: --wait and --follow have no job to follow."
LOG_CAPPED = (
    "mlq: the {stream} of rank {rank}, attempt {attempt}, reached the {chars:,} characters the server keeps "
    "(MLQ_MAX_LOG_CHARS): what it printed after that was not stored."
)


@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@set_option(
    "override a dotted field; VALUE is YAML: 16 is a number, '16' a string (env values are strings; "
    "a secret_env value is taken as written)"
)
@click.option("--array", type=ArrayIndices(), help=ARRAY_HELP)
@click.option(
    "--max-failures",
    type=click.IntRange(min=0),
    help=(
        "an array's or a sweep's children that may fail for good before the group fails (an array: default 0; "
        "a sweep: default none set, it fails only when every trial fails)"
    ),
)
@click.option(
    "--sweep-seed", type=click.IntRange(0, 2**32 - 1), help="a sweep's seed: the same seed draws the same trials"
)
@click.option("--dry-run", is_flag=True, help="only say whether and where it could run: exit 1 if it never can")
@click.option("--wait", is_flag=True, help="wait for the end: exit 0 succeeded, 1 failed, 3 cancelled")
@click.option("--follow", is_flag=True, help="print rank 0's log as it runs (then as --wait)")
@output_option
@click.pass_context
def submit(ctx, specs, overrides, array, max_failures, sweep_seed, dry_run, wait, follow, output):
    """Submit the job spec in SPECS (YAML or JSON). A spec with an array:, sweep: or pipeline:
    block, or --array, makes a group: one parent job whose children are its elements, trials or
    steps. Several files, or a JSON Lines file (.jsonl: a spec per line), are submitted in
    batches (POST /api/v1/jobs/batch), --set and the group options applied to each spec.

    \b
    Example:
      mlq submit job.yaml --set resources.gpu_count=16 --set "env.STEPS='100'" --wait
      mlq submit infer.yaml --array 0-199%16 --max-failures 5
      mlq submit sweep.yaml --sweep-seed 7
      mlq submit examples/pipeline.yaml --wait
      mlq submit runs/*.yaml
      mlq submit sweep-by-hand.jsonl
    """
    if dry_run and (wait or follow):  # a dry run submits nothing to wait for
        raise click.UsageError(DRY_RUN_ALONE)
    sdk = client(ctx)
    loaded = load_specs(specs)
    if len(loaded) != 1 or len(specs) != 1 or is_json_lines(specs[0]):
        if dry_run or wait or follow:
            raise click.UsageError(ONE_SPEC_ONLY)
        groups = {"array": array, "max_failures": max_failures, "sweep_seed": sweep_seed}
        bodies = [
            with_group_options(overridden(body, overrides, where), **groups, where=where) for where, body in loaded
        ]
        ctx.exit(_submit_many(sdk, [where for where, _ in loaded], bodies, output))
    body = overridden(loaded[0][1], overrides)
    body = with_group_options(body, array=array, max_failures=max_failures, sweep_seed=sweep_seed)
    if follow and any(body.get(block) is not None for block in ("array", "sweep", "pipeline")):
        raise click.UsageError(FOLLOW_A_GROUP)
    if dry_run:
        verdict = sdk.dry_run(body)
        emit(verdict, output, [("VALID", lambda d: d.valid), ("CAN EVER RUN", lambda d: d.can_ever_run)])
        if output not in ("json", "yaml"):
            print_dry_run(verdict.raw)
        if would_be_refused(verdict.raw):
            ctx.exit(EXIT_FAILED)
        return
    if body.get("schedule") is not None and (wait or follow):
        raise click.UsageError(SCHEDULE_NOT_A_JOB)
    job = sdk.submit(body)
    if isinstance(job, Schedule):
        report(job, output, SCHEDULE_COLUMNS, f"{created_line(job)} (a schedule, not a job)")
        return
    if output in ("json", "yaml") and not (wait or follow):
        emit(job, output, JOB_COLUMNS)
        return
    made = f"; {group_summary(job.group)}" if job.group else ""
    click.echo(job_line(job.id, job.name, job.state, existing=job.existing) + made, err=output in ("json", "yaml"))
    watching(ctx, job.id, job.state)
    if follow:
        _follow(ctx, sdk, job)
    if wait or follow:
        done = sdk.wait(job)
        failure = f" ({done.failure_class})" if done.failure_class else ""
        report(done, output, JOB_COLUMNS, f"job {done.id} {done.state}{failure}")
        ctx.exit(outcome_code(done))


def _submit_many(sdk: Client, places: list[str], bodies: list[dict], output: str | None) -> int:
    """Submit in batches; a line per spec (or the outcomes as JSON/YAML). Exit 1 if any spec's
    client_job_id was taken by another spec (409), else 0."""
    try:
        outcomes = sdk.submit_many(bodies)
    except MlqError as refused:  # the fields too: the detail repeats the first of them, and is printed once
        fields = {_with_places(field, places): messages for field, messages in refused.fields.items()}
        raise MlqError(refused.status, _with_places(refused.detail, places), fields) from None
    if output in ("json", "yaml"):
        emit(outcomes, output, SUBMITTED_COLUMNS)
    else:
        for outcome in outcomes:
            click.echo(f"{places[outcome.index]}: {submitted_line(outcome)}")
    return EXIT_FAILED if any(outcome.status == 409 for outcome in outcomes) else 0


def _with_places(detail: str, places: list[str]) -> str:
    """A refusal naming `jobs[i]` says which file (and line) the spec came from."""
    found = BATCH_INDEX.search(detail)
    return f"{places[int(found[1])]}: {detail}" if found and int(found[1]) < len(places) else detail


def submitted_line(outcome: Submitted) -> str:
    if outcome.status in (200, 201):
        return job_line(outcome.id, outcome.name, outcome.state, existing=outcome.status == 200)
    return f"refused: {outcome.detail}"


def job_line(job_id: int, name: str, state: str, *, existing: bool) -> str:
    """What a submit did: made the job, or found it made before (the same client_job_id and spec: a 200)."""
    if existing:
        return f"job {job_id} ({name}) was submitted before with this spec: {state}"
    return f"submitted job {job_id} ({name}): {state}"


def outcome_code(job: Job) -> int:
    stopped = {state: EXIT_CANCELLED for state in ("CANCELLED", "EARLY_STOPPED", "SKIPPED")}  # not run to the end
    return {"SUCCEEDED": 0, **stopped}.get(job.state, EXIT_FAILED)


@main.command()
@click.option("--team")
@click.option("--priority", type=AnyCase(PRIORITIES))
@click.option("--mine", is_flag=True, help="only jobs you submitted")
@output_option
@click.pass_context
def queue(ctx, team, priority, mine, output):
    """The queue in scheduling order, with each job's reason and forecast start.

    \b
    Example:
      mlq queue --mine -o json
    """
    # "me": the server knows whose the token is; the client may not (MLQ_SERVER and MLQ_TOKEN alone)
    entries = client(ctx).queue(team=team, priority=priority, owner="me" if mine else None)
    emit(entries, output, QUEUE_COLUMNS, QUEUE_WIDE)
    stale = next((entry for entry in entries if entry.estimated_start_stale), None)
    if stale and output in ("table", "wide"):  # on stderr: a pipe reading the rows gets the rows alone
        click.echo(STALE_STARTS.format(mark=STALE_MARK, as_of=stale.estimated_start_as_of or UNKNOWN_TIME), err=True)


SINCE_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def since_to_iso(since: str) -> str:
    """`7d`, `12h`, `30m`, `2w` -> the ISO time that long ago; an ISO time as it is."""
    number, unit = since[:-1], since[-1:]
    if unit in SINCE_UNITS and number.isdigit():
        try:
            then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=int(number) * SINCE_UNITS[unit])
        except OverflowError:  # before the year 1
            raise click.BadParameter(f"{since} ago is before the year 1", param_hint="--since") from None
        return then.isoformat(timespec="seconds")
    try:
        datetime.datetime.fromisoformat(since)
    except ValueError:
        raise click.BadParameter("want 30m, 12h, 7d, 2w or an ISO time", param_hint="--since") from None
    return since


@main.command()
@click.option(
    "--state",
    multiple=True,
    type=AnyCase(JOB_STATES),
    help="jobs in this state; repeat for several",
)
@click.option("--team", multiple=True, callback=one_value, help="this team's jobs (a division's: its teams')")
@click.option("--mine", is_flag=True, help="only jobs you submitted")
@click.option("--since", multiple=True, callback=one_value, help="submitted since: 30m, 12h, 7d, 2w or an ISO time")
@click.option("--limit", type=click.IntRange(min=1), multiple=True, default=[50], show_default=True, callback=one_value)
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
      mlq jobs --state running --state pending --mine
    """
    filters = {
        "state": [found.upper() for found in state] or None,  # the API takes ?state=A&state=B
        "team": team,
        "owner": "me" if mine else None,
        "submitted_after": since_to_iso(since) if since else None,
        "top_level": None if with_children else True,
    }
    emit(client(ctx).jobs(limit=limit, **filters), output, JOBS_COLUMNS, JOB_WIDE)


FORECAST_AS_OF = " (as of {as_of})"
FORECAST_STALE = " (STALE: forecast as of {as_of}, not refreshed since)"
STALE_STARTS = "{mark} after a start: STALE: forecast as of {as_of}, not refreshed since"
UNKNOWN_TIME = "an unknown time"


def forecast_age(found) -> str:
    """ " (as of <when the forecast's snapshot was taken>)", or that the forecast is stale."""
    if not found.estimated_start_as_of:
        return ""
    if found.estimated_start_stale:
        return stale_note(found)
    return FORECAST_AS_OF.format(as_of=found.estimated_start_as_of)


def stopping_line(stopping) -> str:
    """A running job being stopped (the API's `stopping`): why, and when its ranks are SIGKILLed
    unless they exit first."""
    if not isinstance(stopping, dict):
        return ""
    why = ": ".join(str(part) for part in (stopping.get("cause"), stopping.get("message")) if part)
    kill_at = stopping.get("kill_at")
    if stopping.get("signal") == "SIGKILL":
        when = "SIGKILL sent" + (f" at {kill_at}" if kill_at else "")
    else:
        when = f"SIGTERM sent at {stopping.get('requested_at')}"
        when += f", SIGKILL at {kill_at} unless it exits first" if kill_at else ""
    return f"stopping: {why} ({when})"


def capacity_line(capacity) -> str:
    """A job on its nodes (the API's `capacity`): on its team's guarantee, or on borrowed
    capacity a reclaim may take back; "" otherwise (and from a server older than the field)."""
    if not isinstance(capacity, dict) or not capacity.get("message"):
        return ""
    return f"capacity: {capacity['message']}"


def stale_note(found) -> str:
    """That the forecast starts are stale, with when they were made, or "" while they are fresh
    (and from a server older than these fields: neither is there)."""
    if not found.estimated_start_stale:
        return ""
    return FORECAST_STALE.format(as_of=found.estimated_start_as_of or UNKNOWN_TIME)


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
        print_group(client(ctx), found, output, every=all_children)
    elif found.parent is not None:
        click.echo(f"\n{child_place(found)}")
    if found.stopping:
        click.echo(f"\n{stopping_line(found.stopping)}")
    if runs_on := capacity_line(found.raw.get("capacity")):
        click.echo(f"\n{runs_on}")
    if found.state in ENDED_SHORT:  # not run to its end: say why, as `mlq why` does
        ended = client(ctx).why(job).ended
        if ended:
            click.echo(f"\n{ended_line(ended)}")
    if found.reason:
        click.echo(f"\nwaiting: {found.reason}")
        if found.likely_start or found.estimated_start:
            click.echo(
                f"likely start {found.likely_start or '-'}, latest {found.estimated_start or '-'}{forecast_age(found)}"
            )
    if found.tasks:
        click.echo()
        emit(list(found.tasks), output, TASK_COLUMNS)


# The finished states `mlq status` says the end of (SUCCEEDED needs no why; a FAILED job awaiting
# its retry has not ended: the API answers no `ended` for it).
ENDED_SHORT = ("FAILED", "CANCELLED", "EARLY_STOPPED", "SKIPPED")


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
    child = found.raw.get("child_id")
    click.echo(f"job {found.job_id}: {found.state}" + (f" (as its first waiting child, job {child})" if child else ""))
    if found.stopping:
        click.echo(stopping_line(found.stopping))
    if runs_on := capacity_line(found.raw.get("capacity")):
        click.echo(runs_on)
    if found.ended:
        click.echo(ended_line(found.ended))
    print_explanation(found.raw, starts_note=stale_note(found))


def ended_line(ended: dict) -> str:
    """`ended CANCELLED at 2026-12-05T07:04:16Z by scheduler (DEPENDENCY): dependency 114 ended ...`."""
    by = f" by {ended['by']}" if ended.get("by") else ""
    reason = f" ({ended['reason']})" if ended.get("reason") and ended.get("reason") != ended.get("state") else ""
    message = f": {ended['message']}" if ended.get("message") else ""
    return f"ended {ended.get('state')} at {ended.get('at') or '-'}{by}{reason}{message}"


@main.command()
@click.argument("job", type=int)
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--attempt", type=click.IntRange(min=1), help="default: the latest")
@click.option("--stderr", is_flag=True, help="stderr instead of stdout")
@click.option(
    "-f", "--follow", is_flag=True, help="keep printing new lines as they arrive (streamed) until the job ends"
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text, or json for scripts: a JSON object a line (job_id, rank, attempt, stream, line)",
)
@click.pass_context
def logs(ctx, job, rank, attempt, stderr, follow, output):
    """A rank's log. -o json is JSON Lines, not one document, so that -f streams it too.

    \b
    Example:
      mlq logs 42 --rank 3 -f
      mlq logs 42 -o json | jq -r 'select(.attempt == 2) | .line'
    """
    stream = "stderr" if stderr else "stdout"
    watching(ctx, job)
    sdk = client(ctx)
    for made, line in sdk.log_lines(job, rank=rank, attempt=attempt, stderr=stderr, follow=follow):
        if output == "json":
            row = {"job_id": job, "rank": rank, "attempt": made, "stream": stream, "line": line}
            click.echo(json.dumps(row, sort_keys=True))
        else:
            click.echo(line)
    capped = getattr(sdk, "log_capped", None)  # the last chunk read said the stream was capped
    if capped:
        click.echo(LOG_CAPPED.format(stream=stream, rank=rank, **capped), err=True)


def _follow(ctx: click.Context, sdk, job) -> None:
    """The submitted job's log, to its end. Once its lines come it has run: the state it was
    submitted in is no longer what Ctrl-C may name (QA: 'still PENDING' while it printed)."""
    for count, line in enumerate(sdk.logs(job, follow=True)):
        if not count:
            watching(ctx, job.id)
        click.echo(line)


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
