"""Arrays, sweeps and pipelines (issues 16, 17) in mlq: --array's syntax, the group options put in a spec, a group
in a line, its children's columns, and `mlq children`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import click

from mlqueue.cli.app import client, main
from mlqueue.cli.output import emit, output_option
from mlqueue.client import Child, Client, Job, MlqError

ARRAY_PART = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?\Z")
ARRAY_HELP = (
    "make the job an array, as Slurm's --array: indices 0-199, 1,5,9-12 or 0-98:2 (every second), then %N to run "
    "at most N at once (0-199%16). A lone number is that one index (--array 7 reruns element 7): 200 elements "
    "are 0-199"
)
BAD_ARRAY_PART = "{part!r} is not an index or a range: write indices such as 0-199, 1,5,9-12 or 0-98:2, then %N"
ARRAY_BACKWARDS = "{part!r} runs backwards: write the lower index first"
ARRAY_STEP = "{part!r}: the step after ':' is at least 1"
ARRAY_PARALLELISM = "{limit!r} after % is the most elements at once: a whole number, at least 1"
ARRAY_AND_GROUP = "--array makes the job an array, but the spec has a {kind}: block: a job is one or the other"
MAX_FAILURES_NEEDS_GROUP = (
    "--max-failures is for an array or a sweep: give --array, or a spec with an array: or sweep: block"
)
SEED_NEEDS_SWEEP = "--sweep-seed is for a sweep: the spec has no sweep: block"
FAILURES_LOWERED = (
    "{where}--array {indices} makes {elements}: the spec's max_failures {kept} is lowered to {lowered} "
    "(fewer than the elements; --max-failures sets it)"
)
COUNTED_UP_TO = 1_000_000  # indices counted; an array larger still is the server's to refuse
FOLLOW_A_GROUP = "--follow prints one job's log; a group's children each have theirs (mlq logs CHILD_ID): use --wait"
NOT_A_GROUP = "job {job} has no children: it is not an array, a sweep or a pipeline"
STATUS_CHILDREN = 20  # children `mlq status` lists before pointing at `mlq children`
SUMMARY_COLUMNS = ("running", "pending", "succeeded", "failed", "cancelled", "early_stopped", "skipped")


def parse_array(text: str) -> dict:
    """`0-199%16` -> {"indices": "0-199", "parallelism": 16}, Slurm's --array syntax: comma-separated
    indices and ranges (`1,5,9-12`, `0-98:2` every second), then `%N` the most at once (no `%`: the
    spec's parallelism, else all). ValueError with the message when malformed; how many elements is
    the server's to bound."""
    listed, percent, limit = text.replace(" ", "").partition("%")
    for part in listed.split(","):
        match = ARRAY_PART.match(part)
        if not match:
            raise ValueError(BAD_ARRAY_PART.format(part=part))
        if match[2] is not None and int(match[2]) < int(match[1]):
            raise ValueError(ARRAY_BACKWARDS.format(part=part))
        if match[3] is not None and int(match[3]) < 1:
            raise ValueError(ARRAY_STEP.format(part=part))
    found = {"indices": listed}
    if percent:
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError(ARRAY_PARALLELISM.format(limit=limit))
        found["parallelism"] = int(limit)
    return found


class ArrayIndices(click.ParamType):
    """--array's value, checked by parse_array: a malformed one is a usage error naming the part."""

    name = "INDICES[%N]"

    def convert(self, value, param, ctx):
        if isinstance(value, dict):
            return value
        try:
            return parse_array(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


def with_group_options(
    spec: dict, *, array: dict | None, max_failures: int | None, sweep_seed: int | None, where: str | None = None
) -> dict:
    """The spec with --array, --max-failures and --sweep-seed put in its group block. --array
    replaces the block's elements (count or indices) and, with %N, its parallelism; the file's
    max_failures stays unless --max-failures is given, lowered to the new elements less one
    (said on stderr, naming the spec file `where`)."""
    out = dict(spec)
    if array is not None:
        for kind in ("sweep", "pipeline"):
            if out.get(kind) is not None:
                raise click.UsageError(ARRAY_AND_GROUP.format(kind=kind))
        kept = {key: value for key, value in (out.get("array") or {}).items() if key not in ("count", "indices")}
        out["array"] = {**kept, **array}
        if max_failures is None:
            out["array"] = _failures_within(out["array"], where)
    kind = "array" if out.get("array") is not None else "sweep" if out.get("sweep") is not None else None
    if max_failures is not None:
        if kind is None:
            raise click.UsageError(MAX_FAILURES_NEEDS_GROUP)
        out[kind] = {**out[kind], "max_failures": max_failures}
    if sweep_seed is not None:
        if kind != "sweep":
            raise click.UsageError(SEED_NEEDS_SWEEP)
        out["sweep"] = {**out["sweep"], "seed": sweep_seed}
    return out


def _failures_within(block: dict, where: str | None) -> dict:
    """The array block with the file's max_failures lowered below its elements: `--array 7` reruns
    one shard of an array whose file lets 5 fail, which the server refuses (1 element, 5 may fail)."""
    kept = block.get("max_failures")
    elements = element_count(block)
    if isinstance(kept, bool) or not isinstance(kept, int) or elements is None or kept < elements:
        return block
    lowered = max(elements - 1, 0)
    made = "1 element" if elements == 1 else f"{elements} elements"
    indices, place = block.get("indices", block.get("count")), f"{where}: " if where else ""
    said = FAILURES_LOWERED.format(where=place, indices=indices, elements=made, kept=kept, lowered=lowered)
    click.echo(said, err=True)
    return {**block, "max_failures": lowered}


def element_count(block: dict) -> int | None:
    """How many elements an array block makes: its count, or the distinct indices its `indices`
    name (as the server counts them); None when it cannot tell or past COUNTED_UP_TO."""
    if "indices" not in block:
        count = block.get("count")
        return count if isinstance(count, int) and not isinstance(count, bool) else None
    found: set[int] = set()
    for part in str(block["indices"]).replace(" ", "").split(","):
        match = ARRAY_PART.match(part)
        if not match:
            return None
        low, high, step = int(match[1]), int(match[2] or match[1]), int(match[3] or 1)
        if step < 1 or high < low or (high - low) // step + 1 + len(found) > COUNTED_UP_TO:
            return None
        found.update(range(low, high + 1, step))
    return len(found)


def group_counts(group: dict) -> str:
    """`3 running, 5 pending, 4 succeeded`: a group's children by state, the empty states left out."""
    counts = [f"{group[column]} {column.replace('_', ' ')}" for column in SUMMARY_COLUMNS if group.get(column)]
    return ", ".join(counts) or "no children"


def children_noun(group: dict) -> str:
    """`elements`, `trials` or `steps` for a group's children, in the singular for one."""
    noun = {"array": "element", "sweep": "trial"}.get(group["kind"], "step")
    return noun if group["count"] == 1 else f"{noun}s"


def group_summary(group: dict) -> str:
    """A group in a line: `array of 12 elements, at most 3 at once, 1 may fail: 3 running, 9 pending`."""
    size = f"{group['kind']} of {group['count']} {children_noun(group)}"
    if group["kind"] == "pipeline":
        return f"{size} (run directory {group.get('run_dir')}): {group_counts(group)}"
    head = f"{size}, at most {group['parallelism']} at once"
    if group.get("max_failures"):
        head += f", {group['max_failures']} may fail"
    if group["kind"] == "sweep":
        head += f" ({group.get('method')}, seed {group.get('seed')}"
        metric = group.get("metric")
        head += f", {metric['goal']} {metric['name']})" if metric else ")"
    return f"{head}: {group_counts(group)}"


def group_cell(job: Job) -> str | None:
    """The jobs list's GROUP column: a parent's kind, size and counts; a child's place in its group."""
    if job.group:
        return f"{job.group['kind']} of {job.group['count']}: {group_counts(job.group)}"
    if job.parent is not None:
        place = f"[{job.array_index}]" if job.array_index is not None else f"trial {job.trial}"
        if job.step:
            place = f"step {job.step}"
        return f"job {job.parent} {place}"
    return None


def child_place(job: Job) -> str:
    """`element 4 of array job 42`, `trial 3 of sweep job 43: lr=0.001 batch_size=32`."""
    if job.step:
        return f"step {job.step} of pipeline job {job.parent}"
    if job.array_index is not None:
        return f"element {job.array_index} of array job {job.parent}"
    params = _params(job)
    return f"trial {job.trial} of sweep job {job.parent}" + (f": {params}" if params else "")


def _number(value) -> str | None:
    return None if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def trial_value(value) -> str:
    """A parameter as its trial receives it (scheduling/sweep_params.py's as_text): true/false,
    a float's shortest exact form, the rest as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _params(child: Job) -> str:
    return " ".join(f"{name}={trial_value(value)}" for name, value in (child.params or {}).items())


def _metric(key: str) -> Callable:
    return lambda child: _number((child.metric or {}).get(key))


ARRAY_CHILD_COLUMNS = [
    ("INDEX", lambda child: child.array_index),
    ("ID", lambda child: child.id),
    ("STATE", lambda child: child.state),
    ("RETRIES", lambda child: child.retries_used),
    ("FAILURE", lambda child: child.failure_class or None),
]
SWEEP_CHILD_COLUMNS = [
    ("RANK", lambda child: child.rank),
    ("TRIAL", lambda child: child.trial),
    ("ID", lambda child: child.id),
    ("STATE", lambda child: child.state),
    ("PARAMS", _params),
    ("BEST", _metric("best")),
    ("LAST", _metric("last")),
    ("STEP", _metric("step")),
]
PIPELINE_CHILD_COLUMNS = [
    ("STEP", lambda child: child.step),
    ("ID", lambda child: child.id),
    ("STATE", lambda child: child.state),
    ("AFTER", lambda child: ", ".join(child.after or ()) or None),
    ("WHEN", lambda child: child.when),
    ("FAILURE", lambda child: child.failure_class or None),
]
CHILD_WIDE = [
    ("RESTARTS", lambda child: child.restarts_used),
    ("STARTED", lambda child: child.started_at),
    ("FINISHED", lambda child: child.finished_at),
]


def child_columns(children: Sequence[Child]) -> list:
    if any(child.step for child in children):
        return PIPELINE_CHILD_COLUMNS
    return SWEEP_CHILD_COLUMNS if any(child.trial is not None for child in children) else ARRAY_CHILD_COLUMNS


def print_group(sdk: Client, parent: Job, output: str, *, every: bool) -> None:
    """A group's summary line, then its children (the first STATUS_CHILDREN unless `every`)."""
    click.echo(f"\n{group_summary(parent.group)}")
    kids = sdk.children(parent)
    shown = kids if every else kids[:STATUS_CHILDREN]
    if shown:
        click.echo()
        emit(shown, output, child_columns(shown), CHILD_WIDE)
    if len(shown) < len(kids):
        click.echo(f"... and {len(kids) - len(shown)} more: mlq children {parent.id}")


@main.command()
@click.argument("job", type=int)
@output_option
@click.pass_context
def children(ctx, job, output):
    """A group's children: an array's elements by index, a sweep's trials best first by its
    metric (with their parameters, best and last value and latest step), a pipeline's steps in
    order (with the steps each comes after, and when).

    \b
    Example:
      mlq children 42
      mlq children 42 -o json
    """
    kids = client(ctx).children(job)
    if not kids:  # a group's children are made with it: none means it is not a group
        raise MlqError(0, NOT_A_GROUP.format(job=job))
    emit(kids, output, child_columns(kids), CHILD_WIDE)


def group_cancelled(before: Job, after: Job) -> str:
    """What cancelling a group did to its children: those cancelled now (the difference in its
    CANCELLED count), and those still stopping on their nodes."""
    cancelled = after.group["cancelled"] - ((before.group or {}).get("cancelled") or 0)
    stopping = after.group["running"]
    size = f"{after.group['count']} {children_noun(after.group)}"
    line = f"job {after.id} ({after.group['kind']}): cancelled {cancelled} of its {size}"
    if stopping:
        line += f"; {stopping} stopping on their nodes"
    return f"{line}; {after.state}"
