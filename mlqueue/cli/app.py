"""The click group every verb hangs on: one SDK client per invocation, and a refusal from the
server as its message and exit code 1 whichever verb met it."""

from __future__ import annotations

import click

from mlqueue.client import Client, MlqError
from mlqueue.client.specs import apply_overrides, parse_override

EXIT_REFUSED = 1
EXIT_FAILED = 1
EXIT_CANCELLED = 3


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
