"""Metrics jobs report (`mlqueue.report`, shipped by their agents as `metric` events): kept one
row per value (`JobMetric`), at most MLQ_MAX_METRIC_REPORTS reports per task attempt, and read
back as series for the API and the job page. docs/job-metrics.md has the whole path."""

from collections import defaultdict
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, QuerySet, Window
from django.db.models.functions import Mod, RowNumber

from mlqueue.parsers import replace_bad_text
from scheduling.models import Job, JobMetric
from teams.models import AuditEvent, EventKind

CAPPED = "METRICS_CAPPED"
CAPPED_MESSAGE = (
    "rank {rank} attempt {attempt}: metric reports past line {cap:,} of its metrics file are not kept; "
    "the file on the node has them"
)
SKIPPED = "METRICS_SKIPPED"
SKIPPED_MESSAGE = "rank {rank} attempt {attempt}: line {line} of its metrics file skipped: {why}"
SKIPPED_LAST = "; later bad lines are skipped too, without a word here (the node agent's log counts them)"
# What one answer holds: points per series (job and name), and points in all.
POINTS_PER_SERIES = 5_000
POINTS_PER_ANSWER = 50_000


def do_record_metrics(events: list[dict], *, now) -> int:
    """Store the reports of `metric` events already known to be their node's (agents/ingest.py),
    in one insert; a report the agent sends again (it resends what it is not sure arrived) is
    dropped by the constraint on (job, rank, attempt, seq, name). Only the first
    MLQ_MAX_METRIC_REPORTS lines of an attempt's metrics file are kept (a report's `seq` is its
    line, so the cap costs no count and a resend is judged as its first sending was); past it the
    job's timeline says so, once. The jobs, and the parents of those in a group, get
    `metrics_changed_at` stamped (the early-stop rule looks only after new reports). Returns how
    many reports were offered for storing."""
    cap = settings.MLQ_MAX_METRIC_REPORTS
    kept = [event for event in events if event["seq"] <= cap]
    capped = sorted({_attempt_key(event) for event in events if event["seq"] > cap})
    rows = [row for event in kept for row in _rows(event, now=now)]
    with transaction.atomic():
        JobMetric.objects.bulk_create(rows, ignore_conflicts=True)
        if rows:
            _stamp({row.job_id for row in rows}, now=now)
        for key in capped:
            _note_cap(key, cap, now=now)
    return len(kept)


def _attempt_key(event: dict) -> tuple[int, int, int]:
    return event["job_id"], event["rank"], event["attempt"]


def _rows(event: dict, *, now) -> list[JobMetric]:
    at = datetime.fromtimestamp(event["time"], UTC)
    return [
        JobMetric(
            job_id=event["job_id"],
            rank=event["rank"],
            attempt=event["attempt"],
            seq=event["seq"],
            step=event["step"],
            name=name,
            value=value,
            reported_at=at,
            created_at=now,
        )
        for name, value in event["values"].items()
    ]


def _stamp(job_ids: set[int], *, now) -> None:
    parents = Job.objects.filter(pk__in=job_ids, parent__isnull=False).values_list("parent_id", flat=True)
    Job.objects.filter(Q(pk__in=job_ids) | Q(pk__in=list(parents))).update(metrics_changed_at=now)


def _note_cap(key: tuple[int, int, int], cap: int, *, now) -> None:
    """Once per attempt: the reports past the cap are not kept (the file on the node has them)."""
    job_id, rank, attempt = key
    if AuditEvent.objects.filter(job_id=job_id, reason=CAPPED, data__rank=rank, data__attempt=attempt).exists():
        return
    AuditEvent.objects.create(
        job_id=job_id,
        kind=EventKind.TRANSITION,
        actor_name="mlqueue",
        reason=CAPPED,
        message=CAPPED_MESSAGE.format(rank=rank, attempt=attempt, cap=cap),
        data={"rank": rank, "attempt": attempt},
        created_at=now,
    )


def note_skipped(event: dict, *, node_name: str, now) -> None:
    """A bad line of an attempt's metrics file (one of the first few its agent sends): on the
    job's timeline, where its owner looks (QA: NaN and string values vanished, said only in the
    node agent's log). A resent one is recorded once."""
    job_id, rank, attempt, line = event["job_id"], event["rank"], event["attempt"], event["seq"]
    sent = AuditEvent.objects.filter(job_id=job_id, reason=SKIPPED, data__rank=rank, data__attempt=attempt)
    if sent.filter(data__line=line).exists():
        return
    why = replace_bad_text(event["data"])[:500]
    message = SKIPPED_MESSAGE.format(rank=rank, attempt=attempt, line=line, why=why)
    AuditEvent.objects.create(
        job_id=job_id,
        kind=EventKind.TRANSITION,
        actor_name=f"agent:{node_name}",
        reason=SKIPPED,
        message=message + (SKIPPED_LAST if event.get("last") else ""),
        data={"rank": rank, "attempt": attempt, "line": line},
        created_at=now,
    )


# --- reads ------------------------------------------------------------------------------------


def metric_series(
    job_ids: list[int],
    *,
    name: str | None = None,
    rank: int | None = None,
    attempt: int | None = None,
    after_step: int | None = None,
    spread: int | None = None,
    per_series: int = POINTS_PER_SERIES,
    total: int = POINTS_PER_ANSWER,
) -> tuple[dict[int, dict[str, list[dict]]], list[dict]]:
    """job -> name -> points {step, value, time, attempt, rank}, ordered by step (then attempt,
    rank, report), at most `per_series` points per job and name and `total` in all; and the
    series cut short or left out ({job_id, name}), which continue with `after_step` = their last
    step (a series left out: from its start). `spread`: a series longer than that is thinned to
    every k-th point, its last one kept, at most `spread` + 1 points over the whole run (a chart
    of a long run: the first points alone stopped at step 4,999 while it trained on, found by
    QA). One query; two when the answer's bound is reached (the series past it are named too)."""
    rows = _matching(job_ids, name=name, rank=rank, attempt=attempt, after_step=after_step)
    order = [F("step"), F("attempt"), F("rank"), F("seq")]
    series_of = [F("job_id"), F("name")]
    numbered = rows.annotate(place=Window(RowNumber(), partition_by=series_of, order_by=order))
    if spread is not None:  # at most spread + 1 points a series: no bound by place past that
        numbered, per_series = _spread(numbered, series_of, spread), total
    # One row past each bound is read, so that a series cut short can be told from one that fits.
    found = (
        numbered.filter(place__lte=per_series + 1)
        .order_by("job_id", "name", "step", "attempt", "rank", "seq")
        .values_list("job_id", "name", "step", "value", "reported_at", "attempt", "rank", "place")[: total + 1]
    )
    series: dict[int, dict[str, list[dict]]] = defaultdict(dict)
    cut: list[dict] = []
    for count, (job_id, metric, step, value, at, point_attempt, point_rank, place) in enumerate(found):
        if place > per_series or count >= total:
            if {"job_id": job_id, "name": metric} not in cut:
                cut.append({"job_id": job_id, "name": metric})
            continue
        time = at.isoformat() if at else None
        point = {"step": step, "value": value, "time": time, "attempt": point_attempt, "rank": point_rank}
        series[job_id].setdefault(metric, []).append(point)
    if len(found) > total:  # the series after the one cut at the bound were not read: name them too
        keys = rows.order_by("job_id", "name").values_list("job_id", "name").distinct()
        left = [{"job_id": j, "name": n} for j, n in keys if n not in series.get(j, {})]
        cut += [key for key in left if key not in cut]
    return dict(series), cut


def _spread(numbered: QuerySet[JobMetric], series_of: list, points: int) -> QuerySet[JobMetric]:
    """Each series' points 1, 1 + k, 1 + 2k, ... and its last, k = ceil(length / points): the
    whole run at about `points` points, in the database (a long run's 100,000 reports are not
    read to be thrown away)."""
    length = Window(Count("*"), partition_by=series_of)
    stride = (F("length") + (points - 1)) / points  # integers: a division that rounds down
    sized = numbered.annotate(length=length).annotate(offset=Mod(F("place") - 1, stride))
    return sized.filter(Q(offset=0) | Q(place=F("length")))


def _matching(job_ids: list[int], *, name, rank, attempt, after_step) -> QuerySet[JobMetric]:
    """The jobs' reports, narrowed by each filter given (None: not filtered by it)."""
    rows = JobMetric.objects.filter(job_id__in=job_ids)
    if name is not None:
        rows = rows.filter(name=name)
    if rank is not None:
        rows = rows.filter(rank=rank)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    if after_step is not None:
        rows = rows.filter(step__gt=after_step)
    return rows


def longer_than(job_id: int, points: int) -> bool:
    """Whether any of the job's series has more than `points` points (its chart is thinned)."""
    counts = JobMetric.objects.filter(job_id=job_id).values("name").annotate(points=Count("*"))
    return counts.filter(points__gt=points).exists()


def last_values(job_id: int) -> list[dict]:
    """Each metric's last point (the highest step, then the latest attempt, rank and report):
    the job page's table, whatever the chart's bound. One query."""
    latest = [F("step").desc(), F("attempt").desc(), F("rank").desc(), F("seq").desc()]
    rows = (
        JobMetric.objects.filter(job_id=job_id)
        .annotate(place=Window(RowNumber(), partition_by=[F("name")], order_by=latest))
        .filter(place=1)
        .order_by("name")
        .values("name", "step", "value", "attempt", "rank")
    )
    return list(rows)
