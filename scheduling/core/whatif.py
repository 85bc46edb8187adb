"""What would let a waiting job start sooner: the same job reshaped, tried against the cluster
as it is now. Each suggestion is one change a user can make to the spec."""

import math
from collections.abc import Callable
from dataclasses import replace

from scheduling.core.maintenance import Windows
from scheduling.core.model import JobShape, Topology
from scheduling.core.placement import Limit, plan
from scheduling.core.state import ClusterState


def fits_now(state: ClusterState, shape: JobShape, limit: Limit | None = None) -> bool:
    """`limit`: the maintenance windows' (`Windows.limit`) for the job's end, if any."""
    return plan(state, shape, limit) is not None


def suggestions(
    state: ClusterState,
    shape: JobShape,
    gpu_types: list[str],
    *,
    most: int = 4,
    limit: Limit | None = None,
    allowed: Callable[[JobShape], bool] | None = None,
) -> list[str]:
    """Spec changes under which the job would fit on the free room right now, in the order a
    user would least mind: smaller tasks, a looser topology, another GPU type, fewer GPUs (the
    most tasks that fit now). `allowed`: whether the team's quota lets a reshaped job start (QA:
    "fits now on A100" for a team with no A100 to borrow)."""
    found = []
    for change, reshaped in _variants(shape, gpu_types, lambda candidate: fits_now(state, candidate, limit)):
        if fits_now(state, reshaped, limit) and (allowed is None or allowed(reshaped)):
            found.append(change)
        if len(found) == most:
            break
    return found


def before_window(state: ClusterState, shape: JobShape, windows: Windows, *, now: float, end_at: float) -> str | None:
    """The longest time limit under which the job, kept off room by a maintenance window it
    would run into, starts now: "fits now with a time limit of at most 1.5 h (ending before
    maintenance #7)". A job ending later is kept off more nodes, so the room it fits in only
    shrinks as its end moves out: the latest window start (before its own end) by which it
    fits is found by bisection, then the limit is up to the first window on the nodes it takes
    there (that window is one of those starts, or later)."""
    if plan(state, shape, windows.limit(end_at, None)) is not None:
        return None
    chosen = _latest_fit(state, shape, windows, [start for start in windows.starts if now < start < end_at])
    window = windows.first_on([slot.name for slot, _ in chosen], end_at) if chosen else None
    hours = math.floor((window.start_at - now) / 36) / 100 if window is not None else 0
    if hours <= 0:
        return None
    return f"fits now with a time limit of at most {hours:g} h (ending before maintenance #{window.window_id})"


def _latest_fit(state: ClusterState, shape: JobShape, windows: Windows, ends: list[float]):
    """The placement of a job ending at the latest of `ends` (ascending) at which it fits, or None."""
    chosen, low, high = None, 0, len(ends)
    while low < high:
        middle = (low + high) // 2
        found = plan(state, shape, windows.limit(ends[middle], None))
        if found is None:
            high = middle
        else:
            chosen, low = found, middle + 1
    return chosen


def _variants(shape: JobShape, gpu_types: list[str], fits):
    """Each change with the job as it would be; `fits` tells whether a reshaped job fits now
    (the fewer-tasks change is the most tasks that do)."""
    if shape.gpu_type:
        per_task = shape.gpus_per_task // 2
        while per_task >= 1:
            if shape.gpu_count % per_task == 0:
                gpus = "1 GPU" if per_task == 1 else f"{per_task} GPUs"
                yield (
                    f"fits now with {gpus} per task ({shape.gpu_count // per_task} tasks)",
                    replace(shape, gpus_per_task=per_task, tasks=shape.gpu_count // per_task),
                )
                break
            per_task //= 2
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        yield "fits now with topology_hint prefer_same_rack", replace(shape, topology=Topology.PREFER_SAME_RACK)
    if shape.node_selector:
        yield "fits now without its node_selector", replace(shape, node_selector={})
    if shape.image:
        yield "fits now without its image (on the node itself)", replace(shape, image=False)
    for other in gpu_types:
        if shape.gpu_type and other != shape.gpu_type:
            yield f"fits now on {other}", replace(shape, gpu_type=other)
    fewer = _most_tasks_fitting(shape, fits)
    if fewer:
        tasks = "1 task" if fewer == 1 else f"{fewer} tasks"
        yield f"fits now with {fewer * shape.units_per_task} {shape.unit_name} ({tasks})", replace(shape, tasks=fewer)


def _most_tasks_fitting(shape: JobShape, fits) -> int:
    """The most tasks, fewer than the job's, that fit now (0: not even one). A job that fits
    with n tasks of a shape fits with fewer (a subset of its placement), so by bisection."""
    low, high = 0, shape.tasks - 1  # low fits, or is 0
    while low < high:
        middle = (low + high + 1) // 2
        if fits(replace(shape, tasks=middle)):
            low = middle
        else:
            high = middle - 1
    return low
