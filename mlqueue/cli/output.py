"""How verbs print: a table (or a wider one) for people, json or yaml for scripts."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence

import click

from mlqueue.client.specs import dump_yaml

OUTPUTS = click.Choice(["table", "wide", "json", "yaml"])
EMPTY_CELL = "-"  # piped: an empty cell, as one field
COLUMN_GAP = "  "  # as rich's table has it, so that a table reads the same piped or not


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
    rows = data if isinstance(data, list | tuple) else [data]
    shown = [*columns, *(wide if output == "wide" else ())]
    cells = [["" if (cell := get(row)) is None else str(cell) for _, get in shown] for row in rows]
    if sys.stdout.isatty():
        _print_table([title for title, _ in shown], cells)
    else:
        _print_lines([title for title, _ in shown], cells)


def _print_table(titles: list[str], cells: list[list[str]]) -> None:
    """For a person at a terminal: rich's table, fitted to the window (long cells wrap)."""
    # Imported here: rich takes about 70 ms to import, which scripts asking for json or yaml never pay.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for title in titles:
        table.add_column(title, overflow="fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))  # as text: "[z1-r1]" is a value, not rich's markup
    Console().print(table)


def _print_lines(titles: list[str], cells: list[list[str]]) -> None:
    """For a pipe: a line per row, columns aligned by spaces, nothing wrapped or cut, so that
    `awk '{print $1}'` reads the first column of each row (a newline in a cell is a space)."""
    from rich.cells import cell_len  # a wide character takes two columns, as the terminal shows it

    # An empty cell is "-": as spaces alone it would shift awk's field numbers for the rest of the row.
    lines = [titles, *([" ".join(cell.splitlines()) or EMPTY_CELL for cell in row] for row in cells)]
    widths = [max(cell_len(line[column]) for line in lines) for column in range(len(titles))]
    for line in lines:
        padded = (cell + " " * (width - cell_len(cell)) for cell, width in zip(line, widths, strict=True))
        click.echo(COLUMN_GAP.join(padded).rstrip())


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
