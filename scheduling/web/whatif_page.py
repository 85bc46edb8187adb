"""The teams page's what-if panel: a lead previews a quota change on the cluster's own history
(scheduling/whatif.py) before saving it.

POST /teams/what-if/ starts a preview (validated as the API does: scheduling/web/whatif_api.py)
and answers with the panel; its result part polls GET /teams/what-if/{id}/ every second
(htmx: `hx-trigger="load delay:1s"` on each fragment while the preview runs) and, once done,
shows each team's figures now and as proposed."""

import re
from dataclasses import dataclass
from datetime import date, timedelta

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from rest_framework.exceptions import PermissionDenied, ValidationError

from mlqueue.api_errors import flatten_errors
from scheduling.core.model import CPU_CLASS
from scheduling.models import PreviewState, QuotaPreview
from scheduling.sim.history import CPU_ONLY, NEVER_STARTED, NO_USEFUL_WORK
from scheduling.web.post_only import post_only
from scheduling.web.queue import short_duration
from scheduling.web.whatif_api import NO_SUCH_PREVIEW, start_preview
from scheduling.whatif import QUOTA_FIELDS, preview_for, proposal_summary
from teams.resources import known_classes
from teams.selectors import quota_team_names

LEFT_OUT = {NEVER_STARTED: "placed but withdrawn before they ran", CPU_ONLY: "CPU jobs", NO_USEFUL_WORK: "no work kept"}
FORM_FIELDS = ("team", "resource_class", *QUOTA_FIELDS, "from", "to")
DEFAULT_DAYS = 7  # today and the six days before it
DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
# (figure, heading, how it reads, lower is better, an average over finished jobs)
FIGURES = (
    ("avg_wait_s", "Avg wait", short_duration, True, True),
    ("p95_wait_s", "p95 wait", short_duration, True, True),
    ("avg_jct_s", "Avg JCT", short_duration, True, True),
    ("gpu_hours_lost", "GPU-h lost", lambda v: f"{v:,.1f}", True, False),
    ("share", "Share of GPU-h", lambda v: f"{v:.1%}", False, False),
    ("unfinished", "Unfinished", str, True, False),
)
NONE_FINISHED = "—"  # an average over no finished jobs: no figure, neither better nor worse


@dataclass(frozen=True)
class Cell:
    now: str
    proposed: str
    trend: str  # "better", "worse" or "": for the page's colours


@dataclass(frozen=True)
class TeamRow:
    team: str
    jobs: int
    cells: tuple[Cell, ...]
    changed: bool  # the team whose quota the preview changes


def form_context(previewable: list[str], *, values: dict | None = None, errors: dict | None = None) -> dict:
    """The panel's form: the teams the viewer may preview for, the known classes, and the last
    week as the default window."""
    today = timezone.now().date()
    defaults = {"from": (today - timedelta(days=DEFAULT_DAYS - 1)).isoformat(), "to": today.isoformat()}
    return {
        "previewable": previewable,
        "classes": [rclass for rclass in known_classes() if rclass != CPU_CLASS],  # GPU jobs are replayed
        "values": {**defaults, **(values or {})},
        "errors": errors or {},
    }


@login_required
@post_only("teams-page")
def start(request):
    """Start a preview; the panel again, with the result part polling, or the form's errors
    beside its fields (400; 200 to htmx, which swaps only 2xx answers)."""
    typed = {name: request.POST.get(name, "").strip() for name in FORM_FIELDS}
    asked = {name: value for name, value in typed.items() if value}
    if "to" in asked:
        asked["to"] = _day_after(asked["to"])
    try:
        preview = start_preview(request.user, asked)
    except PermissionDenied as exc:
        return HttpResponseForbidden(str(exc.detail), content_type="text/plain")
    except ValidationError as exc:
        errors = {path.split(".")[-1]: messages for path, messages in flatten_errors(exc.detail).items()}
        context = form_context(_previewable(request), values=typed, errors=errors)
        return render(request, "teams/what_if.html", context, status=200 if request.headers.get("HX-Request") else 400)
    context = form_context(_previewable(request), values=typed)
    return render(request, "teams/what_if.html", {**context, **result_context(preview)})


@login_required
@require_GET
def result(request, preview_id: int):
    preview = preview_for(request.user, preview_id)
    if preview is None:
        raise Http404(NO_SUCH_PREVIEW.format(id=preview_id))
    return render(request, "teams/what_if_result.html", result_context(preview))


def result_context(preview: QuotaPreview) -> dict:
    running = preview.state in (PreviewState.QUEUED, PreviewState.RUNNING)
    context = {"preview": preview, "running": running, "changes": proposal_summary(preview)}
    if preview.state == PreviewState.DONE:
        context["rows"] = team_rows(preview)
        context["skipped"] = [(count, LEFT_OUT[why]) for why, count in sorted(preview.result["skipped"].items())]
        cluster = preview.result["cluster"]
        context["cluster"] = _cells(cluster["current"], cluster["proposed"], share="utilization")
        context["figures"] = [figure[1] for figure in FIGURES]
    return context


def team_rows(preview: QuotaPreview) -> list[TeamRow]:
    """Each team's figures now and as proposed; the team the preview changes first."""
    changed = preview.team.name
    rows = [
        TeamRow(row["team"], row["current"]["jobs"], _cells(row["current"], row["proposed"]), row["team"] == changed)
        for row in preview.result["teams"]
    ]
    return sorted(rows, key=lambda row: (not row.changed, row.team))


def _cells(now: dict, proposed: dict, *, share: str = "share") -> tuple[Cell, ...]:
    """The figures' cells; the cluster's row shows its utilization where a team's shows its share.
    A side where no job finished has no average wait or JCT (the summary's 0.0 is not a figure):
    "—", and the cell is neither better nor worse."""
    cells = []
    for key, _, text, lower, over_finished in FIGURES:
        key = share if key == "share" else key
        if over_finished and not (now.get("finished", 1) and proposed.get("finished", 1)):
            show = [NONE_FINISHED if not side.get("finished", 1) else text(side[key]) for side in (now, proposed)]
            cells.append(Cell(show[0], show[1], ""))
        else:
            cells.append(_cell(now[key], proposed[key], text, lower))
    return tuple(cells)


def _cell(now: float, proposed: float, text, lower_is_better: bool) -> Cell:
    if abs(proposed - now) <= 0.005 * max(abs(now), 1e-9):
        trend = ""
    else:
        trend = "better" if (proposed < now) == lower_is_better else "worse"
    return Cell(text(now), text(proposed), trend)


def _day_after(value: str) -> str:
    """The form's "to" day is included, as on the reports page: the day after it. A day that does
    not exist (2026-13-01) or has no day after (9999-12-31) is left as typed, for the API's own
    check to name it beside the field."""
    if not DATE_ONLY.fullmatch(value):
        return value
    try:
        return (date.fromisoformat(value) + timedelta(days=1)).isoformat()
    except (ValueError, OverflowError):
        return value


def _previewable(request) -> list[str]:
    return quota_team_names(request.user)
