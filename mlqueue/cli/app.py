"""The click group every verb hangs on: one SDK client per invocation, and a refusal from the
server as its message and exit code 1 whichever verb met it."""

from __future__ import annotations

import sys
from importlib import metadata

import click

from mlqueue.client import Client, MlqError
from mlqueue.client.specs import apply_overrides, parse_override

EXIT_REFUSED = 1
EXIT_FAILED = 1
EXIT_CANCELLED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C

INTERRUPTED = "mlq: interrupted"
INTERRUPTED_WATCHING = "mlq: interrupted; job {job} is still {state} (not cancelled)"
INTERRUPTED_UNSEEN = "mlq: interrupted; job {job} was not cancelled"  # its state could not be read
STATE_READ_S = 3.0  # how long Ctrl-C waits to read the state of a job whose log it followed
ONE_VALUE = "takes one value, given {count} times: {values}"


class Verbs(click.Group):
    """Refusals become their message and exit code 1, whichever verb raised them; Ctrl-C exits
    130, not click's `Aborted!` and 1, which `submit --wait` means as "the job failed"."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MlqError as error:
            for line in error.lines():
                click.echo(line, err=True)
            ctx.exit(EXIT_REFUSED)
        except KeyboardInterrupt:
            if sys.stderr.isatty():
                click.echo(err=True)  # off the line the terminal's `^C` is on
            click.echo(interrupted_line(ctx.obj or {}), err=True)
            ctx.exit(EXIT_INTERRUPTED)


def watching(ctx: click.Context, job_id: int, state: str | None = None) -> None:
    """Name the job this invocation waits for or follows (and its state as submitted), for what
    Ctrl-C says: the job goes on without it."""
    ctx.find_root().obj["watching"] = (job_id, state)


def interrupted_line(obj: dict) -> str:
    """What Ctrl-C stopped: the job watched and its state as last read. A followed log reads no
    state (and the submit's is stale once its lines come): then it is read once, briefly (QA:
    "job 311 was not cancelled" where the docs promise "is still RUNNING (not cancelled)")."""
    if "watching" not in obj:
        return INTERRUPTED
    job_id, state = obj["watching"]
    seen = obj["sdk"].last_read.get(job_id) if "sdk" in obj else None
    state = seen.state if seen else state or _state_now(obj.get("sdk"), job_id)
    return INTERRUPTED_WATCHING.format(job=job_id, state=state) if state else INTERRUPTED_UNSEEN.format(job=job_id)


def _state_now(sdk, job_id: int) -> str | None:
    """The job's state, or None where it cannot be read at once (no server, another Ctrl-C)."""
    if sdk is None:
        return None
    try:
        return sdk.state_now(job_id, timeout=STATE_READ_S)
    except (MlqError, KeyboardInterrupt):
        return None


class AnyCase(click.Choice):
    """A choice typed in any case (`p1`, `running`), whose refusal lists the choices as users
    type them, "P0, P1, P2, P3": click's own lists them casefolded ('p0', 'p1', ..., QA)."""

    def __init__(self, choices):
        super().__init__(choices, case_sensitive=False)

    def get_invalid_choice_message(self, value, ctx: click.Context | None) -> str:
        return NOT_A_CHOICE.format(value=value, choices=", ".join(map(str, self.choices)))


NOT_A_CHOICE = "{value!r} is not one of {choices}."


def one_value(ctx: click.Context, param: click.Parameter, values: tuple):
    """The value of an option declared `multiple` only to see it repeated: click keeps the last of a
    repeated one-value option silently, so a second is a usage error (exit 2)."""
    if len(values) > 1:
        raise click.BadParameter(ONE_VALUE.format(count=len(values), values=", ".join(map(str, values))))
    return values[0] if values else None


def version() -> str:
    """The installed package's version (`mlq --version`), or a word saying there is none to read."""
    try:
        return metadata.version("mlqueue")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def client(ctx: click.Context) -> Client:
    """The one SDK client of this invocation (`main`'s `obj["client"]` builds it; tests give a fake's)."""
    obj = ctx.find_root().obj
    if "sdk" not in obj:
        obj["sdk"] = obj["client"]()
    return obj["sdk"]


@click.group(cls=Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=version(), prog_name="mlq", message="%(prog)s %(version)s")
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


def checked_overrides(items: tuple[str, ...]) -> tuple[str, ...]:
    """--set items not of the shape KEY=VALUE, or whose VALUE is not YAML, are a usage error
    (exit 2), as the docs say."""
    for item in items:
        try:
            parse_override(item)
        except MlqError as error:
            raise click.BadParameter(error.detail, param_hint="--set") from None
    return items


def overridden(spec: dict, items: tuple[str, ...], where: str | None = None) -> dict:
    """The spec with its --set items applied; one that would pass through a value (`command.0=x`
    where command is a list) is a usage error (exit 2), naming the spec file when `where` is given."""
    try:
        return apply_overrides(spec, items)
    except MlqError as error:
        message = f"{where}: {error.detail}" if where else error.detail
        raise click.BadParameter(message, param_hint="--set") from None


def set_option(help_text: str):
    """`--set KEY=VALUE` (repeatable) into `overrides`, its items' shape checked (exit 2)."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        callback=lambda ctx, param, items: checked_overrides(items),
        help=help_text,
    )
