"""`mlq metrics JOB`: what a job reported with `mlqueue.report` (docs/job-metrics.md), each
series' last value in a table, or the API's series as they come (-o json|yaml)."""

from __future__ import annotations

import click

from mlqueue.cli.app import client, main
from mlqueue.cli.output import emit, output_option

# Each series thinned to about this many points over its whole run, its last kept: the table's
# last value is the series' last, however long the run (the API's `spread`).
SPREAD = 5000
NO_METRICS = "job {job} has reported no metrics{which} (a job reports them with mlqueue.report(step=..., loss=...))"

METRIC_COLUMNS = [
    ("NAME", lambda row: row["name"]),
    ("STEPS", lambda row: f"{row['points'][0]['step']}-{row['points'][-1]['step']}"),
    ("LAST", lambda row: f"{row['points'][-1]['value']:.6g}"),
    ("MIN", lambda row: f"{min(p['value'] for p in row['points']):.6g}"),
    ("MAX", lambda row: f"{max(p['value'] for p in row['points']):.6g}"),
]
METRIC_WIDE = [
    ("ATTEMPT", lambda row: row["points"][-1]["attempt"]),
    ("RANK", lambda row: row["points"][-1]["rank"]),
    ("AT", lambda row: row["points"][-1]["time"]),
]
CHILD_COLUMN = [("JOB", lambda row: row["job"])]


@main.command()
@click.argument("job", type=int)
@click.option("--name", help="one metric")
@click.option("--rank", type=click.IntRange(min=0), help="one rank's reports")
@click.option("--attempt", type=click.IntRange(min=1), help="one attempt's reports")
@output_option
@click.pass_context
def metrics(ctx, job, name, rank, attempt, output):
    """A job's metrics: each one's last value, the steps it spans, and its least and greatest
    value (of about 5,000 points spread over the run: a longer run's extremes are those of
    the points read). A group: each child's. -o json|yaml: the API's answer.

    \b
    Example:
      mlq metrics 42
      mlq metrics 42 --name val_loss --rank 0 -o json
    """
    scripted = output in ("json", "yaml")  # a script gets every point (paged by the API's after_step)
    answer = client(ctx).metrics(job, name, rank=rank, attempt=attempt, spread=None if scripted else SPREAD)
    if scripted:
        emit(answer, output, [])
        return
    rows = _rows(job, answer)
    if not rows:
        which = f" named {name}" if name else ""
        click.echo(NO_METRICS.format(job=job, which=which), err=True)
        return
    columns = CHILD_COLUMN + METRIC_COLUMNS if answer.get("children") else METRIC_COLUMNS
    emit(rows, output, columns, METRIC_WIDE)


def _rows(job: int, answer: dict) -> list[dict]:
    """A row per series with points: a group's per child (by id), else the job's, by name."""
    found = answer.get("children") or {str(job): answer.get("series") or {}}
    return [
        {"job": int(child), "name": metric, "points": points}
        for child, series in sorted(found.items(), key=lambda item: int(item[0]))
        for metric, points in sorted(series.items())
        if points
    ]
