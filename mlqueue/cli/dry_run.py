"""How `mlq submit --dry-run` prints the API's answer (POST /api/v1/jobs/dry-run), and the
explanation lines it shares with `mlq why`: the reason, where it would go, the nodes' histogram,
the forecast starts and what would help.

The answer is one job's, with what makes the spec more than a job beside it: a group's settings
(`group`), a pipeline's steps each with its own verdict (`steps`), a schedule's timing and next
fire times (`schedule`), and what its client_job_id already names (`existing`)."""

from __future__ import annotations

import click

from mlqueue.cli.groups import group_summary
from mlqueue.cli.output import as_text

A_SCHEDULE = (
    "a schedule, not a job: a submit creates the schedule (cron '{cron}', {timezone}, concurrency {concurrency})"
)
NEXT_FIRES = "next fires: {fires}"
EACH_RUN = "each run (as if fired now):"
SEED_DRAWN = "seed {seed} was drawn for this dry run: --sweep-seed {seed} submits these trials"
PIPELINE = "a pipeline of {count} steps, each tried as if it were next:"
STEP_LINE = "step {name} ({shape}): {verdict}"
STEP_VERDICTS = {"never": "can never run", "now": "can run now", "waits": "would wait"}
# What a submit of the spec would answer where its client_job_id names a job already (`existing`).
WOULD_BE_REFUSED = "a submit would be refused ({status}): {message}"
WOULD_ANSWER = "a submit would create no job ({status}): {message}"


def never_runs(answer: dict) -> bool:
    """Whether a dry run says the spec can never run (a pipeline: any of its steps), as a submit
    would be refused: exit 1 then, like `sbatch --test-only`, so a script can test a spec."""
    answers = [answer, *(answer.get("steps") or [])]
    return any(isinstance(found, dict) and found.get("can_ever_run") is False for found in answers)


def would_be_refused(answer: dict) -> bool:
    """Whether a submit would be refused: it can never run (400), or its client_job_id names a
    job of another spec (409). `mlq submit --dry-run` exits 1 on either."""
    existing = answer.get("existing")
    return never_runs(answer) or (isinstance(existing, dict) and existing.get("status") == 409)


def print_dry_run(answer: dict) -> None:
    """The lines below the VALID / CAN EVER RUN row, for a person."""
    existing = answer.get("existing")
    if isinstance(existing, dict):
        line = WOULD_BE_REFUSED if existing.get("status") == 409 else WOULD_ANSWER
        click.echo(line.format(status=existing.get("status"), message=existing.get("message")))
    if isinstance(answer.get("schedule"), dict):
        _print_schedule(answer["schedule"])
    _print_group_preview(answer.get("group"))
    steps = answer.get("steps")
    if isinstance(steps, list) and steps:
        click.echo(PIPELINE.format(count=len(steps)))
        for step in steps:
            _print_step(step)
        return
    print_explanation(answer)


def _print_schedule(schedule: dict) -> None:
    """The spec makes a schedule: its timing and next fire times; what follows is one run's."""
    fields = ("cron", "timezone", "concurrency")
    click.echo(A_SCHEDULE.format(**{field: schedule.get(field, "-") for field in fields}))
    fires = schedule.get("next_fires") or []
    if fires:
        click.echo(NEXT_FIRES.format(fires=", ".join(map(str, fires))))
    click.echo(EACH_RUN)


def _print_step(step: dict) -> None:
    """`step train (1 x 1 H100): would wait`, then its explanation, indented."""
    if step.get("can_ever_run") is False:
        verdict = STEP_VERDICTS["never"]
    else:
        verdict = STEP_VERDICTS["now" if step.get("placement") else "waits"]
    click.echo(STEP_LINE.format(name=step.get("step"), shape=step.get("shape"), verdict=verdict))
    for line in explanation_lines(step):
        click.echo(f"  {line}")


def _print_group_preview(group: dict | None) -> None:
    """A dry run's group: its size and settings, a random sweep's first trials (and the seed
    that draws them: a grid's trials are its parameters' every combination, whatever the seed);
    what follows is one child's placement or reason."""
    if not group:
        return
    click.echo(f"group: {group_summary(group).rsplit(': ', 1)[0]}")  # its settings, no children yet
    if group.get("indices"):
        click.echo(f"indices: {group['indices']}")
    if group.get("seed_drawn") and group.get("method") == "random":
        click.echo(SEED_DRAWN.format(seed=group["seed"]))
    for trial in group.get("trials") or []:
        params = " ".join(f"{name}={value}" for name, value in trial["params"].items())
        click.echo(f"  trial {trial['trial']}: {params}")
    if len(group.get("trials") or []) < group["count"] and group.get("trials"):
        click.echo(f"  ... {group['count'] - len(group['trials'])} more")
    click.echo("each child (one shown):")


def print_explanation(data: dict, starts_note: str = "") -> None:
    for line in explanation_lines(data, starts_note):
        click.echo(line)


def explanation_lines(data: dict, starts_note: str = "") -> list[str]:
    """The reason, placement, histogram, reservation, starts (each followed by `starts_note`: a
    stale forecast says so on each line it gives) and suggestions of a why or dry-run answer."""
    lines = []
    if data.get("reason"):
        reason = data["reason"]
        field = reason.get("field") if isinstance(reason, dict) else None  # a never-fits verdict's: what to change
        lines.append(f"reason: {as_text(reason)}" + (f" (change {field})" if field else ""))
    if data.get("placement"):
        lines.append(_placement_line(data["placement"]))
    histogram = data.get("histogram")
    if histogram:
        # {"fit": "0/32", "rejections": [{"why": ..., "nodes": n}, ...]}, as the job page shows it
        lines.append(f"nodes that fit: {histogram.get('fit')}")
        lines.extend(f"  {row.get('nodes')} {row.get('why')}" for row in histogram.get("rejections") or [])
    if data.get("reservation"):
        lines.append(f"reservation: {as_text(data['reservation'])}")
    for key, label in (("likely_start", "likely start"), ("latest_start", "latest start")):
        if data.get(key):
            lines.append(f"{label}: {data[key]}{starts_note}")
    suggestions = data.get("suggestions") or []
    if suggestions:
        lines.append("what would help:")
        lines.extend(f"  - {as_text(suggestion)}" for suggestion in suggestions)
    return lines


def _placement_line(placement) -> str:
    """[{"node": "z1-r1-h100-01", "tasks": 1}, ...] -> "would go to: z1-r1-h100-01 (1 task), ..."."""
    nodes = placement.get("nodes") if isinstance(placement, dict) else None
    if not (isinstance(nodes, list) and all(isinstance(node, dict) for node in nodes)):
        return f"placement: {as_text(placement)}"
    placed = ", ".join(
        f"{node.get('node')} ({node.get('tasks')} task{'' if node.get('tasks') == 1 else 's'})" for node in nodes
    )
    return f"would go to: {placed}"
