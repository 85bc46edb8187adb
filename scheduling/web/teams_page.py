"""The teams page: the team tree with each team's quotas and use, the fair-share table, and
in-place quota edits for leads.

The page owns a single route (/teams/), so the same view serves its htmx parts, chosen by
query parameters (one quota row, read or edit; the fair-share table), and takes the edits as
POSTs. Who sees and edits what follows the API (teams/api.py): every signed-in user reads every
team's numbers while MLQ_QUOTAS_PUBLIC is on (members only when off), leads edit."""

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_http_methods
from rest_framework.exceptions import ValidationError

from mlqueue.api_errors import flatten_errors
from scheduling.usage import ClassUsage, ClusterUsage, TeamUsage, cluster_usage
from scheduling.web.whatif_page import form_context
from teams.api import NOT_A_LEAD, NOT_A_MEMBER
from teams.models import Quota, Role, Team
from teams.resources import unknown_class_message
from teams.selectors import (
    can_edit_quotas,
    can_rank_among_siblings,
    can_read_quotas,
    descendant_ids,
    is_site_admin,
    quota_readable_ids,
    quota_team_names,
    roles_of,
)
from teams.serializers import QuotaPatchSerializer
from teams.services import do_update_quotas

QUOTA_FIELDS = ("guaranteed", "borrowing_limit", "weight")
NOTHING_CHANGED = "these are the current values: change one to save."


@dataclass(frozen=True)
class TeamView:
    """A team as this viewer sees it: numbers where the viewer may read them (teams.selectors.
    can_read_quotas), edit controls only for leads."""

    usage: TeamUsage
    visible: bool
    editable: bool
    role: str | None = None  # the viewer's own membership, if any
    addable: tuple[str, ...] = ()  # classes a lead may add a quota for: known, not yet a row

    @property
    def name(self) -> str:
        return self.usage.name

    @property
    def indent_px(self) -> int:
        return 8 + 22 * self.usage.depth


@login_required
@require_http_methods(["GET", "POST"])
def page(request):
    if request.method == "POST":
        return _save_quota(request)
    if request.GET.get("part") == "fair-share":
        return render(request, "teams/fair_share.html", _page_context(request.user, cluster_usage()))
    if "resource_class" in request.GET:
        return _quota_row(request)
    context = {**_page_context(request.user, cluster_usage()), "section": "teams"}
    return render(request, "teams/page.html", {**context, **form_context(quota_team_names(request.user))})


def _page_context(user, usage: ClusterUsage) -> dict:
    roles = roles_of(user)
    everything = is_site_admin(user)
    readable = quota_readable_ids(user)
    editable = _editable_ids(usage, roles) if not everything else set()
    teams = [
        TeamView(
            team,
            readable is None or team.id in readable,
            everything or team.id in editable,
            roles.get(team.name),
            _addable(usage, team),
        )
        for team in usage.teams
    ]
    return {"usage": usage, "teams": teams, "leads": sorted(name for name, role in roles.items() if role == Role.LEAD)}


def _addable(usage: ClusterUsage, team: TeamUsage) -> tuple[str, ...]:
    shown = {row.resource_class for row in team.classes}
    return tuple(rclass for rclass in usage.known_classes if rclass not in shown)


def _editable_ids(usage: ClusterUsage, roles: dict[str, str]) -> set[int]:
    """can_edit_quotas for every team in a query or two: the teams the viewer leads and all
    teams below them."""
    leads = {team.id for team in usage.teams if roles.get(team.name) == Role.LEAD}
    return leads | descendant_ids(leads)


def _quota_row(request):
    """One quota row for htmx: read-only (`Cancel`), or as a form (`edit=1`, leads only). A
    known class the team has no row for yet is an empty form (adding a quota), and nothing
    once cancelled."""
    team = get_object_or_404(Team.objects.select_related("parent"), name=request.GET.get("team", ""))
    editing = request.GET.get("edit") == "1"
    if editing and not can_edit_quotas(request.user, team):
        return HttpResponseForbidden(NOT_A_LEAD.format(team=team.name), content_type="text/plain")
    if not can_read_quotas(request.user, team):
        return HttpResponseForbidden(NOT_A_MEMBER.format(team=team.name), content_type="text/plain")
    rclass = request.GET.get("resource_class", "")
    view, row, known = _row_of(request.user, team, rclass)
    if row is None and rclass not in known:
        return HttpResponseBadRequest(
            f"resource_class: {unknown_class_message(rclass, known)}", content_type="text/plain"
        )
    if row is None and not editing:
        return HttpResponse("")
    row = row or ClassUsage.unused(rclass)
    values = {name: getattr(row, name) for name in QUOTA_FIELDS}
    return _render_row(request, view, row, editing=editing, values=values)


def _row_of(user, team: Team, rclass: str) -> tuple[TeamView, ClassUsage | None, tuple[str, ...]]:
    """The team as `user` sees it, its row in `rclass` if it has one, and the known classes."""
    usage = cluster_usage()
    mine = usage.team(team.name)
    view = TeamView(mine, True, can_edit_quotas(user, team))
    return view, mine.get(rclass), usage.known_classes


def _render_row(request, view: TeamView, row: ClassUsage, *, editing: bool, **extra):
    template = "teams/quota_edit_row.html" if editing else "teams/quota_row.html"
    if editing:  # a team's own lead sees its weight, set from the team above (teams/quota_rules.py)
        team = Team.objects.select_related("parent").get(name=view.name)
        extra["weight_from_above"] = not can_rank_among_siblings(request.user, team)
    return render(request, template, {"team": view, "row": row, **extra})


def _save_quota(request):
    """Validate as the API does (QuotaPatchSerializer), save through the audited service, and
    answer with the row: saved, or back in its form with the errors beside the fields."""
    team = get_object_or_404(Team.objects.select_related("parent"), name=request.POST.get("team", ""))
    if not can_edit_quotas(request.user, team):
        return HttpResponseForbidden(NOT_A_LEAD.format(team=team.name), content_type="text/plain")
    rclass = request.POST.get("resource_class", "")
    posted = {name: request.POST[name] for name in QUOTA_FIELDS if request.POST.get(name, "").strip()}
    body = QuotaPatchSerializer(data={"reason": request.POST.get("reason", ""), "quotas": {rclass: posted}})
    try:
        body.is_valid(raise_exception=True)
        changes = _changed(team, rclass, body.validated_data["quotas"][rclass])
        do_update_quotas(team=team, changes={rclass: changes}, user=request.user, reason=body.validated_data["reason"])
    except ValidationError as exc:
        return _form_with_errors(request, team, rclass, flatten_errors(exc.detail))
    view, row, _ = _row_of(request.user, team, rclass)
    response = _render_row(request, view, row, editing=False, saved=True)
    response["HX-Trigger"] = "quotas-changed"  # the fair-share table refreshes itself
    return response


def _changed(team: Team, rclass: str, fields: dict) -> dict:
    """Only the fields that differ from the stored quota, so the audit log says what changed.
    The form sends all three, where an API client sends only what it means to change."""
    current = Quota.objects.filter(team=team, resource_class=rclass).first()
    if current is None:
        return fields
    changes = {name: value for name, value in fields.items() if getattr(current, name) != value}
    if not changes:
        raise ValidationError({f"quotas.{rclass}": [NOTHING_CHANGED]})
    return changes


def _form_with_errors(request, team: Team, rclass: str, fields: dict[str, list[str]]):
    """Errors keyed by the form's input names; the rest (unknown class, nothing given) by `row`."""
    errors = {}
    for path, messages in fields.items():
        name = path.rsplit(".", 1)[-1]
        errors.setdefault(name if name in (*QUOTA_FIELDS, "reason") else "row", []).extend(messages)
    view, row, _ = _row_of(request.user, team, rclass)
    row = row or ClassUsage.unused(rclass)
    values = {name: request.POST.get(name, "") for name in (*QUOTA_FIELDS, "reason")}
    return _render_row(request, view, row, editing=True, errors=errors, values=values)
