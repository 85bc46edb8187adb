"""`mlq node NAME`: one node as its console page shows it (admins): its row, its GPUs' latest
telemetry, the tasks on it, its maintenance windows and its latest history."""

from __future__ import annotations

import click

from mlqueue.cli.app import client, main
from mlqueue.cli.cluster import NODE_COLUMNS, NODE_WIDE
from mlqueue.cli.maintenance import EVENT_COLUMNS
from mlqueue.cli.output import EMPTY_CELL, emit, output_option
from mlqueue.client import Node

GPU_COLUMNS = [
    ("GPU", lambda gpu: gpu["index"]),
    ("UTIL %", lambda gpu: gpu.get("utilization")),
    ("MEMORY MB", lambda gpu: _used_of(gpu)),
    ("TEMP C", lambda gpu: gpu.get("temperature_c")),
    ("EXCLUDED", lambda gpu: gpu.get("excluded") or EMPTY_CELL),
    ("WARNINGS", lambda gpu: "; ".join(gpu.get("warnings") or ()) or EMPTY_CELL),
]
TASK_COLUMNS = [
    ("JOB", lambda task: task["job_id"]),
    ("NAME", lambda task: task["job_name"]),
    ("TEAM", lambda task: task["team"]),
    ("RANK", lambda task: task["rank"]),
    ("STATE", lambda task: task["state"]),
    ("GPUS", lambda task: ",".join(map(str, task["gpu_indices"])) or EMPTY_CELL),
    ("STARTED", lambda task: task["started_at"]),
]


def _used_of(gpu: dict) -> str | None:
    if gpu.get("memory_used_mb") is None:
        return None
    total = gpu.get("memory_total_mb")
    return f"{gpu['memory_used_mb']}/{total}" if total else str(gpu["memory_used_mb"])


def telemetry_line(telemetry: dict | None) -> str:
    """`telemetry: NVML, 3 s ago; health check FAILING exit 1: ...` or why there is none."""
    if telemetry is None:
        return "telemetry: none from this node's agent yet (or its last sample expired)"
    age = telemetry.get("age_s")
    line = f"telemetry: {(telemetry.get('provider') or '?').upper()}" + (f", {age:g} s ago" if age is not None else "")
    if telemetry.get("error"):
        line += f"; error: {telemetry['error']}"
    if check := telemetry.get("check"):
        line += f"; health check {check.get('status')}"
        line += f" exit {check['exit_code']}" if check.get("exit_code") is not None else ""
        line += f": {check['output']}" if check.get("output") else ""
    return line


@main.command()
@click.argument("name")
@click.option("--history", type=click.IntRange(0, 500), default=10, show_default=True, help="how many events")
@output_option
@click.pass_context
def node(ctx, name, history, output):
    """One node (admins): its state, its GPUs' telemetry, its tasks, its maintenance windows
    and its latest events (cordons, drains, faults, maintenance: who and why).
    -o json/yaml is the node as the API answers it, its events under `events`.

    \b
    Example:
      mlq node gpu-017
      mlq node gpu-017 --history 50
    """
    sdk = client(ctx)
    found = sdk.node(name)
    events = sdk.node_events(name, limit=history) if history else []
    if output in ("json", "yaml"):
        emit({**found, "events": events}, output, [])
        return
    emit(Node.from_json(found), output, NODE_COLUMNS, NODE_WIDE)
    if found.get("state_reason") or found.get("admin_reason"):
        click.echo(f"\nwhy: {found.get('admin_reason') or found.get('state_reason')}")
    click.echo(f"\n{telemetry_line(found.get('telemetry'))}")
    if found.get("telemetry") and found["telemetry"].get("gpus"):
        emit(found["telemetry"]["gpus"], output, GPU_COLUMNS)
    click.echo(f"\ntasks: {len(found['placed'])}" if found["placed"] else "\ntasks: none")
    if found["placed"]:
        emit(found["placed"], output, TASK_COLUMNS)
    for window in found["maintenance"]:
        click.echo(
            f"\nmaintenance #{window['id']}: {window['state']}, {window['starts_at']} to {window['ends_at']}: "
            f"{window['reason']}"
        )
    if events:
        click.echo(f"\nlatest {len(events)} event(s), newest first:")
        emit(events, output, EVENT_COLUMNS)
