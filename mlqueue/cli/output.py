"""How verbs print: a table (or a wider one) for people, json or yaml for scripts."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence

import click

from mlqueue.client.specs import dump_yaml

OUTPUTS = click.Choice(["table", "wide", "json", "yaml"])


def output_option(function):
    return click.option(
        "-o", "--output", type=OUTPUTS, default="table", show_default=True, help="table, wide, or json/yaml for scripts"
    )(function)


def plain(value):
    """Results as plain data for json/yaml: a dataclass's server JSON as it came."""
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if dataclasses.is_dataclass(value):
        return value.raw
    return value


def emit(data, output: str, columns: Sequence[tuple[str, Callable]], wide: Sequence[tuple[str, Callable]] = ()):
    """Print `data` (one result or a list) as json, yaml, or a table of `columns` (+ `wide`)."""
    if output == "json":
        click.echo(json.dumps(plain(data), indent=2, sort_keys=True, default=str))
        return
    if output == "yaml":
        click.echo(dump_yaml(plain(data), sort_keys=True, default_flow_style=False).rstrip("\n"))
        return
    # Imported here: rich takes about 70 ms to import, which scripts asking for json or yaml never pay.
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


def as_text(value) -> str:
    """A value the server explains itself with, as one line: a dict's message (or text, or its items)."""
    if isinstance(value, dict):
        return value.get("message") or value.get("text") or ", ".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)
