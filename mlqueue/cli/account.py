"""Who you are to the server: login, API tokens, and shell completion."""

import click

from mlqueue.cli.app import client, main
from mlqueue.cli.output import emit, output_option
from mlqueue.client import config_path

TOKEN_COLUMNS = [
    ("ID", lambda token: token.id),
    ("NAME", lambda token: token.name),
    ("HINT", lambda token: token.hint),
    ("LAST USED", lambda token: token.last_used_at),
    ("EXPIRES", lambda token: token.expires_at),
    ("REVOKED", lambda token: token.revoked_at),
]


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
    from click.shell_completion import get_completion_class  # only this verb needs it (~40 ms to import)

    completer = get_completion_class(shell)(main, {}, "mlq", "_MLQ_COMPLETE")
    click.echo(completer.source())
