"""The job page's group section (templates/scheduling/_group.html): for a group's parent, its
settings, its children by state and a table of them; for a sweep, the trials ranked by its
metric, every trial's curve on one chart and the best trial's parameters; for a child, the
group it belongs to. Reads only, in a number of queries that does not grow with the children."""

from dataclasses import dataclass

from django.db.models import Count, F, Window
from django.db.models.functions import Mod, RowNumber

from scheduling.group_state import MEMBERS
from scheduling.groups import summary
from scheduling.models import GroupKind, Job, JobMetric, JobState
from scheduling.pipelines import layers
from scheduling.sweeps import ranked_children

# The children the page's table lists (a group may have 10,000); the API lists them all.
CHILD_ROWS = 500
# The chart: the best-ranked trials' curves, each thinned to about this many points.
CHART_TRIALS = 20
CHART_POINTS = 200


@dataclass(frozen=True)
class ChildRow:
    job: Job
    metric: dict | None  # a sweep trial's {best, best_step, last, step, reports}
    rank: int | None  # its place by the sweep's metric (1 = best)

    @property
    def label(self) -> str:
        if self.job.step_name:
            return f"step {self.job.step_name}"
        return f"element {self.job.group_index}" if self.job.params is None else f"trial {self.job.group_index}"

    @property
    def params_text(self) -> str:
        return params_text(self.job.params)

    @property
    def early_stopped(self) -> bool:
        return self.job.state == JobState.EARLY_STOPPED


def params_text(params: dict | None) -> str:
    """{"lr": 0.001, "batch_size": 32} -> "lr=0.001, batch_size=32"."""
    return ", ".join(f"{name}={value}" for name, value in (params or {}).items())


def group_section(job: Job) -> dict:
    """The section's context: {"group": ...} for a parent, {"member_of": ...} for a child, {}
    for a job in no group."""
    if job.group_kind:
        return {"group": parent_section(job)}
    if job.parent_id:
        parent = Job.objects.only("id", "name", "group_kind").get(pk=job.parent_id)
        what = MEMBERS[parent.group_kind]
        index = job.step_name or job.group_index
        return {"member_of": {"parent": parent, "what": what, "index": index, "params": params_text(job.params)}}
    return {}


def parent_section(parent: Job) -> dict:
    """A parent's section: its summary, its first CHILD_ROWS children in ranked order and, for a
    sweep whose trials reported its metric, the best trial and the chart of the best-ranked."""
    kids, summaries, ranks = ranked_children(parent)
    rows = [ChildRow(kid, summaries.get(kid.pk), ranks.get(kid.pk)) for kid in kids]
    found = {
        "summary": summary(parent),
        "rows": rows[:CHILD_ROWS],
        "total": len(rows),
        "what": MEMBERS[parent.group_kind] + "s",
        "metric": parent.group.get("metric"),
    }
    if parent.group_kind == GroupKind.PIPELINE:
        found["dag"] = dag(parent.group["steps"], kids)
    if found["metric"] and summaries:
        ranked = [row for row in rows if row.rank is not None]
        found["best"] = ranked[0]
        found["chart"] = chart_data(ranked[:CHART_TRIALS], found["metric"])
    return found


def chart_data(rows: list[ChildRow], metric: dict) -> dict:
    """What the sweep's chart draws: one series of the metric per trial, best first."""
    curves = metric_curves([row.job.pk for row in rows], metric["name"])
    return {
        "metric": metric["name"],
        "goal": metric["goal"],
        "series": [
            {
                "job": row.job.pk,
                "label": f"trial {row.job.group_index}" + (f" ({row.params_text})" if row.job.params else ""),
                "rank": row.rank,
                "stopped": row.early_stopped,
                "points": curves.get(row.job.pk, []),
            }
            for row in rows
        ],
    }


def metric_curves(job_ids: list[int], name: str, *, points: int = CHART_POINTS) -> dict[int, list[list]]:
    """job -> [[step, value], ...] of metric `name`, in step order, thinned in the database to
    about `points` per job (every k-th report, counted back from the last, which is always
    kept): one query whatever the number of reports."""
    order = [F("step").asc(), F("attempt").asc(), F("seq").asc()]
    rows = (
        JobMetric.objects.filter(job_id__in=job_ids, name=name)
        .annotate(
            n=Window(RowNumber(), partition_by=[F("job_id")], order_by=order),
            total=Window(Count("id"), partition_by=[F("job_id")]),
        )
        .annotate(kept=Mod(F("total") - F("n"), F("total") / points + 1))
        .filter(kept=0)
        .order_by("job_id", "step", "attempt", "seq")
        .values_list("job_id", "step", "value")
    )
    found: dict[int, list[list]] = {}
    for job_id, step, value in rows:
        found.setdefault(job_id, []).append([step, value])
    return found


# The pipeline's drawing: a box per step, laid out left to right by layer (pipelines.layers).
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 46, 56, 18, 8
# A box's fill and text by its step's state (the badges' colours, static/css/mlqueue.css).
STATE_COLOURS = {
    "PENDING": ("#fff4e0", "#8a5a00"),
    "ASSIGNED": ("#e6efff", "#2a4fb0"),
    "RUNNING": ("#e3f6ea", "#176b3a"),
    "SUCCEEDED": ("#e9f7ef", "#1f8a4c"),
    "FAILED": ("#fdecea", "#a3271b"),
    "CANCELLED": ("#eeeeee", "#555555"),
    "PREEMPTED": ("#f3e8ff", "#6b2fb3"),
    "SKIPPED": ("#f4f4f4", "#888888"),
}


def dag(steps: list[dict], kids: list[Job]) -> dict:
    """The pipeline's DAG as the page's SVG draws it: each step's box (its position, job, state and
    colours) and each edge (a curve from the step before to the step after, dashed unless
    `when: success`, labelled with its `when`)."""
    by_index = {kid.group_index: kid for kid in kids}
    place: dict[int, tuple[int, int]] = {}
    for column, layer in enumerate(layers(steps)):
        for row, index in enumerate(layer):
            place[index] = (PAD + column * (BOX_W + GAP_X), PAD + row * (BOX_H + GAP_Y))
    boxes = [_box(step, by_index.get(index), place[index]) for index, step in enumerate(steps)]
    names = {step["name"]: index for index, step in enumerate(steps)}
    edges = [
        _edge(place[names[before]], place[index], step["when"])
        for index, step in enumerate(steps)
        for before in step["after"]
    ]
    return {
        "boxes": boxes,
        "edges": edges,
        "width": max(x for x, _ in place.values()) + BOX_W + PAD,
        "height": max(y for _, y in place.values()) + BOX_H + PAD,
        "box_w": BOX_W,
        "box_h": BOX_H,
    }


def _box(step: dict, kid: Job | None, at: tuple[int, int]) -> dict:
    state = kid.state if kid else "PENDING"
    fill, ink = STATE_COLOURS.get(state, STATE_COLOURS["PENDING"])
    return {"name": step["name"], "job": kid, "state": state, "x": at[0], "y": at[1], "fill": fill, "ink": ink}


def _edge(start: tuple[int, int], end: tuple[int, int], when: str) -> dict:
    x1, y1 = start[0] + BOX_W, start[1] + BOX_H // 2
    x2, y2 = end[0], end[1] + BOX_H // 2
    middle = (x1 + x2) // 2
    return {
        "path": f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2 - 4},{y2}",
        "when": when,
        "dashed": when != "success",
        "label_x": middle,
        "label_y": (y1 + y2) // 2 - 4,
    }
