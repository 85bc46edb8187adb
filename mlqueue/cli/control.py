"""The verbs that change a submitted job: cancel, hold, release, requeue, set."""

import click

from mlqueue.cli.app import EXIT_REFUSED, AnyCase, client, main
from mlqueue.cli.columns import JOB_COLUMNS
from mlqueue.cli.groups import group_cancelled
from mlqueue.cli.output import as_text, emit, output_option, report
from mlqueue.client import JOB_STATES, PRIORITIES

# The server's words for a job that ended otherwise (scheduling/services.py ALREADY_ENDED).
ALREADY_CANCELLED = "job {job} already ended CANCELLED; there is nothing to cancel."

ALREADY_HELD = "job {job} was already held by {by} ({why}): nothing changed"
NOTHING_TO_CANCEL = "name jobs to cancel, or --mine / --state / --team to cancel by filter"
STOPPING = "cancel requested: CANCELLED once their tasks stop"


@main.command()
@click.argument("job_ids", nargs=-1, type=int)
@click.option("--reason", default="", help="recorded with each cancel")
@click.option("--mine", is_flag=True, help="by filter: your jobs")
@click.option("--state", type=AnyCase(JOB_STATES), help="by filter: jobs in this state")
@click.option("--team", help="by filter: this team's jobs")
@output_option
@click.pass_context
def cancel(ctx, job_ids, reason, mine, state, team, output):
    """Cancel jobs by id, or every job a filter matches. Exits 1 when any job was not cancelled
    (unknown, already ended, not yours): each is a `skipped:` line on stderr.

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
        if before is not None and before.state == "CANCELLED":  # as an ended job's 409: nothing was cancelled now
            click.echo(ALREADY_CANCELLED.format(job=before.id), err=True)
            ctx.exit(EXIT_REFUSED)
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
    else:
        done = [item for item in result.cancelled if item not in result.stopping]
        if done or not result.stopping:
            click.echo(f"cancelled: {' '.join(str(as_text(item)) for item in done) or 'none'}")
        if result.stopping:
            click.echo(f"stopping: {' '.join(map(str, result.stopping))} ({STOPPING})")
        for item in result.skipped:
            click.echo(f"skipped: {as_text(item)}", err=True)
    if result.skipped:  # as scancel: a job named and not cancelled is a failure a script must see
        ctx.exit(EXIT_REFUSED)


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
    by, why = held.raw.get("held_by_name", ""), held.raw.get("held_reason", "")
    # A hold of a held job changes nothing, its reason neither: say so when the reason shows it.
    already = bool(reason) and why != reason
    said = (
        ALREADY_HELD.format(job=held.id, by=by, why=why or "no reason given")
        if already
        else f"job {held.id} held by {by}"
    )
    report(held, output, JOB_COLUMNS, said)


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
    said = f"job {released.id} released"
    if released.raw.get("held") and released.raw.get("parent"):  # its own hold released, its group's stands
        by, why = released.raw.get("held_by_name", ""), released.raw.get("held_reason", "") or "no reason given"
        said += f" from its own hold; still held with its group, job {released.raw.get('parent')} (by {by}: {why})"
    report(released, output, JOB_COLUMNS, said)


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
@click.option("--priority", type=AnyCase(PRIORITIES))
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
