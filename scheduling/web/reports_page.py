"""The reports page (/reports/): usage, waits, lost work and cost from the usage ledger, as
charts (the vendored Chart.js, drawn by static/js/reports.js from the configurations built
here) with the same numbers in a table under each.

Everyone signed in may open it and sees what the usage API would show them (accounting.
visible_to): a lead or member their teams, an admin every team. A time range (whole UTC
days, both ends included) and a team narrow it; days up to 62 days, weeks beyond."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from rest_framework.exceptions import PermissionDenied, ValidationError

from scheduling import accounting
from scheduling.accounting import EARLIEST, LATEST, TOO_EARLY, TOO_LATE, UsageQuery, UsageReport
from scheduling.forecast_accuracy import WeekAccuracy, forecast_accuracy_by_week
from scheduling.models import LostCause, Node
from scheduling.web.forecast_accuracy_api import teams_for
from teams.models import AuditEvent, EventKind, Quota, Team
from teams.selectors import is_site_admin, team_ids_of

COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]
DAYS_BY_DAY = 62
DEFAULT_DAYS = 30
TOP_USERS = 10
MAX_DAYS = 5 * 366
RANGE_TOO_LONG = f"a report covers at most {MAX_DAYS} days."
TO_BEFORE_FROM = "must not be before from."


class ReportFilters(forms.Form):
    """The page's query string: `from` and `to` (dates), `team` (a team the viewer may see)."""

    start = forms.DateField(required=False)
    end = forms.DateField(required=False)
    team = forms.ChoiceField(required=False)

    def __init__(self, data, *, teams: list[str], today):
        super().__init__({"start": data.get("from"), "end": data.get("to"), "team": data.get("team", "")})
        self.fields["team"].choices = [("", "all my teams"), *((name, name) for name in teams)]
        self.today = today

    def clean(self):
        data = super().clean()
        end = data.get("end") or self.today
        if end < EARLIEST.date() + timedelta(days=DEFAULT_DAYS):
            self.add_error("end", TOO_EARLY)
            return data
        start = data.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start < EARLIEST.date():
            self.add_error("start", TOO_EARLY)
        elif max(start, end) >= LATEST.date():
            self.add_error("end" if end >= LATEST.date() else "start", TOO_LATE)
        elif end < start:
            self.add_error("end", TO_BEFORE_FROM)
        elif (end - start).days >= MAX_DAYS:
            self.add_error("start", RANGE_TOO_LONG)
        return {**data, "start": start, "end": end}


@dataclass
class Section:
    """One chart and its table."""

    id: str
    title: str
    note: str
    chart: dict
    columns: list[str]
    rows: list[list] = field(default_factory=list)


@login_required
@require_GET
def page(request):
    now = timezone.now()
    teams = _visible_teams(request.user)
    filters = ReportFilters(request.GET, teams=teams, today=now.astimezone(UTC).date())
    context = {"section": "reports", "filters": filters, "teams": teams, "currency": settings.MLQ_CURRENCY}
    if not filters.is_valid():
        errors = {
            ("from" if name == "start" else "to" if name == "end" else name): e for name, e in filters.errors.items()
        }
        typed = {"from": request.GET.get("from", ""), "to": request.GET.get("to", "")}  # kept, beside the error
        return render(request, "scheduling/reports.html", {**context, **typed, "errors": errors}, status=400)
    data = filters.cleaned_data
    start = datetime.combine(data["start"], time(), tzinfo=UTC)
    end = datetime.combine(data["end"] + timedelta(days=1), time(), tzinfo=UTC)
    base = {"start": start, "end": end, "now": now, "visible": accounting.visible_to(request.user)}
    base["team"] = data["team"] or None
    bucket = "day" if (end - start).days <= DAYS_BY_DAY else "week"
    sections = build_sections(base, bucket, admin=is_site_admin(request.user))
    # The forecast's accuracy as the API shows it (leads and admins only): the chosen team, else
    # every team the viewer leads and those below them (an admin: all, even teams with no member).
    try:
        chosen = teams_for(request.user, data["team"] or None)
    except (PermissionDenied, ValidationError):  # a member, or a team the viewer does not lead
        pass
    else:
        sections.append(forecast_accuracy(forecast_accuracy_by_week(start, end, chosen)))
    period = {"from": data["start"].isoformat(), "to": data["end"].isoformat(), "bucket": bucket}
    return render(request, "scheduling/reports.html", {**context, "sections": sections, **period})


def _visible_teams(user) -> list[str]:
    teams = Team.objects.all() if is_site_admin(user) else Team.objects.filter(pk__in=team_ids_of(user))
    return list(teams.order_by("name").values_list("name", flat=True))


def build_sections(base: dict, bucket: str, *, admin: bool = False) -> list[Section]:
    """`admin`: the viewer may see every team's usage, so the report of all teams (no `team`)
    is the cluster's, and with a team chosen the cluster's utilization is shown beside it."""

    def report(*group_by, **scope) -> UsageReport:
        return accounting.usage_report(UsageQuery(**{**base, **scope}, group_by=group_by))

    buckets = _bucket_starts(base["start"], base["end"], bucket)
    by_team = report("team")
    whole = admin and base["team"] is None
    scope = None if whole else base["team"] or "your teams"
    cluster = report("resource_class", bucket, team=None) if admin and not whole else None
    return [
        gpu_hours_over_time(report("team", bucket), buckets, bucket, base),
        utilization_over_time(report("resource_class", bucket), buckets, bucket, base, scope=scope, cluster=cluster),
        queue_waits(report("team", "priority")),
        lost_work(by_team),
        top_users(report("owner")),
        cost_by_team(by_team),
    ]


def _bucket_starts(start: datetime, end: datetime, bucket: str) -> list[str]:
    starts = {
        accounting.bucket_start(a, bucket) for a, _, _ in accounting.stretches(start, end, bucket=bucket, cuts=())
    }
    return [at.date().isoformat() for at in sorted(starts)]


def _series(report: UsageReport, figure) -> dict[str, dict[str, float]]:
    """first key -> {bucket: figure(row)}."""
    series: dict[str, dict[str, float]] = defaultdict(dict)
    for row in report.rows:
        series[row.key[0]][row.key[1]] = figure(row)
    return series


def _line(label: str, values: list, index: int, **style) -> dict:
    color = COLORS[index % len(COLORS)]
    return {"label": label, "data": values, "borderColor": color, "backgroundColor": color, "tension": 0, **style}


def _chart(kind: str, labels: list, datasets: list, y: str, *, stacked: bool = False) -> dict:
    axis = {"stacked": stacked}
    return {
        "type": kind,
        "data": {"labels": labels, "datasets": datasets},
        "options": {
            "animation": False,
            "maintainAspectRatio": False,
            "scales": {"x": axis, "y": {**axis, "beginAtZero": True, "title": {"display": True, "text": y}}},
        },
    }


def bucket_hours(first: str, bucket: str, base: dict) -> float:
    """The hours of the bucket starting `first` inside the report's range and up to now: a week
    cut by the range's first or last day, or the day under way, counts only its part."""
    start = datetime.fromisoformat(first).replace(tzinfo=UTC)
    end = min(start + timedelta(days=1 if bucket == "day" else 7), base["end"], base["now"])
    return max(0.0, (end - max(start, base["start"])).total_seconds() / 3600)


def guarantee_steps(teams: list[str], base: dict) -> dict[str, list[tuple[datetime, int]]]:
    """Each team's guaranteed GPUs (all its GPU classes) from the report's start to now, as
    steps [(from, GPUs), ...]: today's quotas, and before each quota change since the start
    the guarantee it replaced (the audit log's QUOTA_CHANGED keeps `before` and `after`; a quota
    added had none, 0). Two queries, whatever the number of teams and changes."""
    current: dict[tuple[str, str], int] = {}
    for team, rclass, gpus in Quota.objects.filter(team__name__in=teams, resource_class__startswith="gpu:").values_list(
        "team__name", "resource_class", "guaranteed"
    ):
        current[team, rclass] = gpus
    changes = defaultdict(list)  # (team, class) -> [(at, the guarantee before it)], oldest first
    events = AuditEvent.objects.filter(
        kind=EventKind.QUOTA_CHANGED,
        team__name__in=teams,
        created_at__gt=base["start"],
        data__resource_class__startswith="gpu:",
    ).order_by("created_at", "id")
    for team, at, data in events.values_list("team__name", "created_at", "data"):
        if "guaranteed" in data.get("after", {}):  # a change of its weight or borrowing owes nothing new
            changes[team, data["resource_class"]].append((at, data.get("before", {}).get("guaranteed", 0)))
    steps = defaultdict(lambda: defaultdict(int))  # team -> {from: GPUs added (or taken) then}
    for team, rclass in current.keys() | changes.keys():
        held = [*changes.get((team, rclass), []), (None, current.get((team, rclass), 0))]
        previous = 0
        for i, (_, gpus) in enumerate(held):  # each value holds from the change before it
            since = EARLIEST if i == 0 else held[i - 1][0]
            steps[team][since] += gpus - previous
            previous = gpus
    return {team: _running_total(deltas) for team, deltas in steps.items()}


def _running_total(deltas: dict[datetime, int]) -> list[tuple[datetime, int]]:
    total, found = 0, []
    for at in sorted(deltas):
        total += deltas[at]
        found.append((at, total))
    return found


def owed_hours(steps: list[tuple[datetime, int]], first: str, bucket: str, base: dict) -> float:
    """The GPU-hours `steps` guarantee in the bucket starting `first`, inside the report's range
    and up to now (as `bucket_hours`), each part at the guarantee then in force."""
    begins = datetime.fromisoformat(first).replace(tzinfo=UTC)
    start = max(begins, base["start"])
    end = min(begins + timedelta(days=1 if bucket == "day" else 7), base["end"], base["now"])
    owed = 0.0
    for i, (since, gpus) in enumerate(steps):
        until = steps[i + 1][0] if i + 1 < len(steps) else end
        seconds = (min(until, end) - max(since, start)).total_seconds()
        owed += gpus * max(0.0, seconds) / 3600
    return owed


def gpu_hours_over_time(report: UsageReport, buckets: list[str], bucket: str, base: dict) -> Section:
    """Each team's GPU-hours per bucket against its guarantee: its guaranteed GPUs x the
    bucket's hours in the range, at the quotas in force then (`guarantee_steps`)."""
    used = _series(report, lambda row: row.gpu_hours)
    teams = sorted(used)
    steps = guarantee_steps(teams, base)
    owed = {team: [round(owed_hours(steps.get(team, []), b, bucket, base), 1) for b in buckets] for team in teams}
    owed = {team: hours for team, hours in owed.items() if any(hours)}
    datasets = []
    section = Section("gpu-hours", f"GPU-hours by team, by {bucket}", "", {}, [bucket, *teams])
    for i, team in enumerate(teams):
        datasets.append(_line(team, [round(used[team].get(b, 0.0), 1) for b in buckets], i))
        if team in owed:
            datasets.append(_line(f"{team} guarantee", owed[team], i, borderDash=[6, 4], pointRadius=0))
    section.chart = _chart("line", buckets, datasets, "GPU-hours")
    section.note = (
        f"Dashed: the team's guaranteed GPUs (its GPU quotas as they were then) x the hours of each {bucket} "
        "in the range, up to now."
    )
    section.columns += [f"{team} guarantee" for team in owed]
    for j, b in enumerate(buckets):
        guarantees = [owed[team][j] for team in owed]
        section.rows.append([b, *(round(used[team].get(b, 0.0), 1) for team in teams), *guarantees])
    return section


def _capacity() -> dict[str, int]:
    """Each class's size now: GPUs of its nodes, CPUs of the CPU nodes (the ledger keeps no
    history of the fleet)."""
    capacity: dict[str, int] = defaultdict(int)
    for gpu_type, gpus, cpus in Node.objects.values_list("gpu_type", "gpu_count", "cpu_count"):
        capacity[f"gpu:{gpu_type}" if gpu_type else "cpu"] += gpus if gpu_type else cpus
    return capacity


def _shares(report: UsageReport, capacity: dict, classes: list, buckets: list[str], bucket: str, base: dict) -> list:
    """Per bucket, each class's GPU-hours (CPU-hours for cpu) in `report` over its size x the
    bucket's hours (up to now, for the bucket under way), in percent."""
    rows = {row.key: row for row in report.rows}
    table = []
    for b in buckets:
        hours = bucket_hours(b, bucket, base)
        cells = []
        for rclass in classes:
            row = rows.get((rclass, b))
            used = (row.cpu_hours if rclass == "cpu" else row.gpu_hours) if row else 0.0
            size = capacity.get(rclass, 0) * hours
            cells.append(round(100 * used / size, 1) if size else None)
        table.append(cells)
    return table


def utilization_over_time(
    report: UsageReport,
    buckets: list[str],
    bucket: str,
    base: dict,
    *,
    scope: str | None = None,
    cluster: UsageReport | None = None,
) -> Section:
    """Share of each class's capacity in use per bucket. `scope`: None when `report` is every
    team's (the class's utilization); else whose usage it is ("your teams", a team), and the
    section says it is their share of the class, not its utilization (QA: a lead read her teams'
    30% as the H100s' utilization). `cluster`: every team's, shown beside it, for an admin."""
    capacity = _capacity()
    rows = [*report.rows, *(cluster.rows if cluster else ())]
    classes = sorted({row.key[0] for row in rows} | {c for c, size in capacity.items() if size})
    table = _shares(report, capacity, classes, buckets, bucket, base)
    overall = _shares(cluster, capacity, classes, buckets, bucket, base) if cluster else [[] for _ in buckets]
    # Each column says its figures are percents (QA: 0.3 was read as 30%).
    heads = [f"{rclass} (%)" for rclass in classes]
    section = Section("utilization", f"Utilization by resource class, by {bucket}", "", {}, [bucket, *heads])
    section.note = (
        f"Of each class's current size (GPUs, or the CPU nodes' cores for cpu), over the hours of each {bucket}."
    )
    axis = "% in use"
    if scope is not None:
        whose = "Your teams'" if scope == "your teams" else f"{scope}'s"
        section.title = f"{whose} share of each resource class's capacity, by {bucket}"
        section.note = (
            f"GPU-hours (CPU-hours for cpu) of {scope} over each class's current size x the hours of each {bucket}: "
            "not the class's utilization, which counts every team's use."
        )
        axis = f"% of the class's capacity used by {scope}"
    if cluster:
        section.columns += [f"{rclass} (all teams, %)" for rclass in classes]
        section.note += " Dashed, and the columns marked (all teams, %): the class's utilization."
    section.rows = [[b, *mine, *every] for b, mine, every in zip(buckets, table, overall, strict=True)]
    datasets = [_line(rclass, [r[i] for r in table], i) for i, rclass in enumerate(classes)]
    for i, rclass in enumerate(classes if cluster else ()):
        datasets.append(_line(f"{rclass} (all teams)", [r[i] for r in overall], i, borderDash=[6, 4], pointRadius=0))
    section.chart = _chart("line", buckets, datasets, axis)
    return section


def queue_waits(report: UsageReport) -> Section:
    """p50 and p95 queue wait (minutes) of the attempts that started, by team and priority."""
    section = Section(
        "waits", "Queue wait by team and priority", "", {}, ["team", "priority", "started", "p50 (min)", "p95 (min)"]
    )
    section.note = "Attempts that started in the range; a requeued attempt waits from its previous attempt's end."
    labels, p50, p95 = [], [], []
    for row in report.rows:
        if not row.started:
            continue
        team, priority = row.key
        minutes = [None if s is None else round(s / 60, 1) for s in (row.wait_p50_s, row.wait_p95_s)]
        section.rows.append([team, priority, row.started, *minutes])
        labels.append(f"{team} {priority}")
        p50.append(minutes[0])
        p95.append(minutes[1])
    section.chart = _chart("bar", labels, [_line("p50", p50, 0), _line("p95", p95, 1)], "minutes")
    return section


CAUSES = tuple(LostCause.values)  # every cause the ledger writes, a column each


def lost_work(report: UsageReport) -> Section:
    """Preemptions, and GPU-hours lost since the last confirmed checkpoint, by team and cause."""
    section = Section(
        "lost",
        "Preemptions and lost GPU-hours by team and cause",
        "",
        {},
        ["team", "preempted", *CAUSES, "lost GPU-hours"],
    )
    section.note = (
        "Work since the last checkpoint every rank confirmed (or the start) when an attempt ended so. preemption: "
        "for a job of a higher priority; quota_reclaim: for a team taking back capacity it is guaranteed; "
        "reclaim: a spot node taken back (docs/usage.md)."
    )
    teams = [row.key[0] for row in report.rows]
    for row in report.rows:
        lost = [row.lost_gpu_hours.get(cause, 0.0) for cause in CAUSES]
        section.rows.append([row.key[0], row.preempted, *lost, row.lost_total])
    datasets = [
        _line(cause, [r[2 + i] for r in section.rows], i)
        for i, cause in enumerate(CAUSES)
        if any(r[2 + i] for r in section.rows)
    ]
    section.chart = _chart("bar", teams, datasets, "lost GPU-hours", stacked=True)
    return section


def _hours(row) -> tuple[float, float]:
    return round(row.gpu_hours, 1), round(row.cpu_hours, 1)


def top_users(report: UsageReport) -> Section:
    rows = sorted(report.rows, key=lambda row: (-row.gpu_hours, -row.cpu_hours, row.key))[:TOP_USERS]
    section = Section(
        "top-users",
        f"Top {TOP_USERS} users by GPU-hours",
        "",
        {},
        ["user", "GPU-hours", "CPU-hours", "cost", "lost GPU-hours"],
    )
    section.rows = [[row.key[0], *_hours(row), row.cost, round(row.lost_total, 1)] for row in rows]
    section.chart = _chart(
        "bar", [r[0] for r in section.rows], [_line("GPU-hours", [r[1] for r in section.rows], 0)], "GPU-hours"
    )
    return section


def cost_by_team(report: UsageReport) -> Section:
    section = Section(
        "cost", "Cost by team", "", {}, ["team", "GPU-hours", "CPU-hours", f"cost ({settings.MLQ_CURRENCY})"]
    )
    section.note = "Each hour at the price its class had then (admins set prices: /api/v1/prices, or the admin site)."
    section.rows = [[row.key[0], *_hours(row), row.cost] for row in report.rows]
    section.chart = _chart(
        "bar", [r[0] for r in section.rows], [_line("cost", [r[3] for r in section.rows], 2)], settings.MLQ_CURRENCY
    )
    section.rows.append(["total", *_hours(report.total), report.total.cost])
    return section


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 1)


def _percent(share: float | None) -> float | None:
    return None if share is None else round(100 * share, 1)


def forecast_accuracy(weeks: list[WeekAccuracy]) -> Section:
    """Per ISO week, the start forecast against the real start (scheduling/forecast_accuracy.py):
    the median error of each job's first forecast and of its last before it started, and how
    often a job started at or before its "at the latest" bound."""
    section = Section(
        "forecast",
        "Start forecast accuracy by week",
        "",
        {},
        [
            "week",
            "jobs",
            "first forecast: median error (min)",
            "last forecast: median error (min)",
            "first: started by its bound (%)",
            "last: started by its bound (%)",
        ],
    )
    section.note = (
        "Jobs counted in the week they first started; the error is from the likely start (or the "
        '"at the latest" bound where there is no likely one).'
    )
    if not any(week.jobs for week in weeks):
        return section  # "nothing in this range"
    for week in weeks:
        section.rows.append(
            [
                week.week.isoformat(),
                week.jobs,
                _minutes(week.first_median_error_s),
                _minutes(week.last_median_error_s),
                _percent(week.first_within_bound),
                _percent(week.last_within_bound),
            ]
        )
    labels = [row[0] for row in section.rows]
    datasets = [
        _line("first forecast", [row[2] for row in section.rows], 0),
        _line("last forecast", [row[3] for row in section.rows], 1),
    ]
    section.chart = _chart("line", labels, datasets, "median error (minutes)")
    return section
