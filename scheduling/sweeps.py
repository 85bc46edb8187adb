"""A sweep's trials by their metric: each trial's best and last value, and the ranking (best
first by the sweep's goal) that the API's children list and the sweep page show."""

from django.db.models import Count, Max, Min, OuterRef, QuerySet, Subquery

from scheduling.core.early_stop import MINIMIZE
from scheduling.models import Job, JobMetric


def metric_summaries(job_ids: list[int], name: str, goal: str) -> dict[int, dict]:
    """job -> {name, best, best_step, last, step, reports} for jobs that reported `name`; two
    queries whatever the number of trials."""
    best = Min("value") if goal == MINIMIZE else Max("value")
    order = "value" if goal == MINIMIZE else "-value"
    series = JobMetric.objects.filter(job_id=OuterRef("job_id"), name=name)
    rows = (
        JobMetric.objects.filter(job_id__in=job_ids, name=name)
        .values("job_id")
        .annotate(
            best=best,
            step=Max("step"),
            reports=Count("id"),
            last=Subquery(series.order_by("-step", "-attempt", "-seq").values("value")[:1]),
            best_step=Subquery(series.order_by(order, "step").values("step")[:1]),
        )
        .order_by()
    )
    return {row.pop("job_id"): {"name": name, **row} for row in rows}


def ranking(trials: list[Job], summaries: dict[int, dict], goal: str) -> list[Job]:
    """Best first by the metric (trials without a report last), then by trial number."""
    sign = 1 if goal == MINIMIZE else -1

    def key(job: Job):
        found = summaries.get(job.pk)
        return (found is None, sign * found["best"] if found else 0.0, job.group_index)

    return sorted(trials, key=key)


def children(parent: Job) -> QuerySet[Job]:
    """The parent's children by index, with what their rows show (team, owner) in the same query."""
    return Job.objects.filter(parent=parent).select_related("team", "owner").order_by("group_index")


def ranked_children(parent: Job) -> tuple[list[Job], dict[int, dict], dict[int, int]]:
    """The parent's children in the order its page and the API list them (an array's by index,
    a sweep's best first when it has a metric), their metric summaries and their ranks."""
    kids = list(children(parent))
    metric = parent.group.get("metric") if parent.group else None
    if not metric:
        return kids, {}, {}
    summaries = metric_summaries([kid.pk for kid in kids], metric["name"], metric["goal"])
    kids = ranking(kids, summaries, metric["goal"])
    ranks = {kid.pk: place for place, kid in enumerate((k for k in kids if k.pk in summaries), start=1)}
    return kids, summaries, ranks
