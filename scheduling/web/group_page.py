"""The job page's group section (templates/scheduling/_group.html): for a group's parent, its
settings, its children by state and a table of them; for a sweep, the trials ranked by its
metric, every trial's curve on one chart and the best trial's parameters; for a child, the
group it belongs to. Reads only, in a number of queries that does not grow with the children."""

from dataclasses import dataclass

from django.db.models import Count, F, Window
from django.db.models.functions import Mod, RowNumber

from scheduling.groups import summary
from scheduling.models import GroupKind, Job, JobMetric, JobState
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
        what = "element" if parent.group_kind == GroupKind.ARRAY else "trial"
        return {
            "member_of": {"parent": parent, "what": what, "index": job.group_index, "params": params_text(job.params)}
        }
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
        "what": "elements" if parent.group_kind == GroupKind.ARRAY else "trials",
        "metric": parent.group.get("metric"),
    }
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
