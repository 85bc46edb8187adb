"""How `Client.submit_many` cuts specs into batch requests (POST /api/v1/jobs/batch)."""

import json
import math
from collections.abc import Iterator

BATCH_JOBS = 500
BATCH_BYTES = 200_000
BATCH_MADE = 10_000  # jobs made by one batch, children included (the server's bound is larger)
GROUPS = ("array", "sweep", "pipeline")


def batches(specs: list[dict]) -> Iterator[tuple[int, list[dict]]]:
    """(offset, specs) of each batch: at most BATCH_JOBS specs, BATCH_BYTES of JSON and
    BATCH_MADE jobs made, a group's children included (one larger spec goes alone, and the
    server says if it is too large)."""
    start, size, made = 0, 0, 0
    for index, spec in enumerate(specs):
        spec_size, spec_made = len(json.dumps(spec)) + 2, jobs_made(spec)
        full = index - start >= BATCH_JOBS or size + spec_size > BATCH_BYTES or made + spec_made > BATCH_MADE
        if index > start and full:
            yield start, specs[start:index]
            start, size, made = index, 0, 0
        size, made = size + spec_size, made + spec_made
    if start < len(specs):
        yield start, specs[start:]


def jobs_made(spec: dict) -> int:
    """About how many jobs a spec makes (the server counts exactly): itself and its children."""
    array, sweep, pipeline = (spec.get(block) if isinstance(spec.get(block), dict) else None for block in GROUPS)
    children = 0
    if array is not None:
        indices = array.get("indices")
        children = count_indices(indices) if isinstance(indices, str) else array.get("count")
    elif sweep is not None:
        children = sweep.get("max_trials") or math.prod(
            len(values) for values in (sweep.get("parameters") or {}).values() if isinstance(values, list)
        )
    elif pipeline is not None:
        children = len(pipeline.get("steps") or ())
    return 1 + (children if isinstance(children, int) and not isinstance(children, bool) else 0)


def count_indices(text: str) -> int:
    """Slurm's --array list ("0-199%16", "1,5,9-12", "0-98:2") counted, not built."""
    count = 0
    for part in text.split("%")[0].split(","):
        span, _, step = part.strip().partition(":")
        low, _, high = span.partition("-")
        try:
            count += (int(high or low) - int(low)) // int(step or 1) + 1
        except ValueError:
            return 0  # the server names what is wrong with it
    return count
