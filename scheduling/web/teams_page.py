"""The teams page: the team tree with each team's quotas and use, the fair-share table, and
in-place quota edits for leads.

The page owns a single route (/teams/), so the same view serves its htmx parts, chosen by
query parameters (one quota row, read or edit; the fair-share table), and takes the edits as
POSTs. Who sees and edits what follows the API (teams/api.py): every signed-in user reads every
team's numbers while MLQ_QUOTAS_PUBLIC is on (members only when off), leads edit."""

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpResponse, HttpResponseBadRequest, HttpResponseForbidden
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_http_methods
from rest_framework.exceptions import ValidationError

from mlqueue.api_errors import flatten_errors
from scheduling.usage import ClassUsage, ClusterUsage, TeamUsage, cluster_usage
from scheduling.web.whatif_page import form_context
from teams.api import NOT_A_LEAD, NOT_A_MEMBER
from teams.models import AuditEvent, EventKind, Quota, Role, Team
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
from teams.serializers import QuotaChangeSerializer, QuotaPatchSerializer
from teams.services import do_update_quotas, lock_quota_tree

QUOTA_FIELDS = ("guaranteed", "borrowing_limit", "weight")
NOTHING_CHANGED = "these are the current values: change one to save."
# A field the user changed that someone else changed too since the form was drawn (QA: an
# admin's cut was undone, and logged as the lead's). The form then holds the new values.
CHANGED_SINCE = (
    "changed since you opened it: {field} is now {now} (by {who}), not {seen}. Your {typed} is kept: save again "
    "to set it over theirs."
)
FORM_OUT_OF_DATE = "this form's original values are missing or not numbers: cancel and edit again."
SEEN = "seen_"  # the form's hidden copy of each value as it was drawn: seen_guaranteed, ...


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
    return _render_row(request, view, row, editing=editing, values=values, seen=values)


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
        seen = _seen(request, rclass)
        with transaction.atomic():
            lock_quota_tree(team)  # the quota compared below is the one the service then changes
            changes = _changed(team, rclass, body.validated_data["quotas"][rclass], seen)
            do_update_quotas(
                team=team, changes={rclass: changes}, user=request.user, reason=body.validated_data["reason"]
            )
    except ChangedSince as since:
        return _form_changed_since(request, team, rclass, since)
    except ValidationError as exc:
        return _form_with_errors(request, team, rclass, flatten_errors(exc.detail))
    view, row, _ = _row_of(request.user, team, rclass)
    response = _render_row(request, view, row, editing=False, saved=True)
    response["HX-Trigger"] = "quotas-changed"  # the fair-share table refreshes itself
    return response


class ChangedSince(Exception):
    """Fields the user changed that were changed by someone else since the form was drawn: the
    form comes back with those messages, what the user changed (`typed`) and, for the rest, the
    quota as it is now."""

    def __init__(self, errors: dict[str, list[str]], typed: dict[str, object]):
        super().__init__(errors)
        self.errors, self.typed = errors, typed


def _seen(request, rclass: str) -> dict | None:
    """The values the form was drawn with (its hidden `seen_*` fields), parsed as the quota's;
    None from a form without them (a script posting the three values)."""
    raw = {name: request.POST[SEEN + name] for name in QUOTA_FIELDS if request.POST.get(SEEN + name, "").strip()}
    if not raw:
        return None
    parsed = QuotaChangeSerializer(data=raw)
    if len(raw) < len(QUOTA_FIELDS) or not parsed.is_valid():
        raise ValidationError({f"quotas.{rclass}": [FORM_OUT_OF_DATE]})
    return parsed.validated_data


def _changed(team: Team, rclass: str, fields: dict, seen: dict | None) -> dict:
    """The fields the user changed from the values the form was drawn with (`seen`), so the
    audit log says what they changed and a field someone else changed meanwhile is left as
    they set it; ChangedSince if both changed one. The form sends all three, where an API
    client sends only what it means to change. Without `seen`: those that differ from the row."""
    current = Quota.objects.filter(team=team, resource_class=rclass).first()
    if current is None:
        return fields  # adding the quota: every field, even at its default, is the change
    now = {name: getattr(current, name) for name in QUOTA_FIELDS}
    base = seen if seen is not None else now
    changes = {name: value for name, value in fields.items() if base[name] != value and now[name] != value}
    clashes = {name: value for name, value in changes.items() if seen is not None and now[name] != seen[name]}
    if clashes:
        raise ChangedSince(_clash_messages(team, rclass, clashes, now, seen), changes)
    if not changes:
        raise ValidationError({f"quotas.{rclass}": [NOTHING_CHANGED]})
    return changes


def _clash_messages(team: Team, rclass: str, clashes: dict, now: dict, seen: dict) -> dict[str, list[str]]:
    return {
        name: [
            CHANGED_SINCE.format(
                field=name, now=now[name], who=_changed_by(team, rclass, name), seen=seen[name], typed=typed
            )
        ]
        for name, typed in clashes.items()
    }


def _changed_by(team: Team, rclass: str, field: str) -> str:
    """Who last set the field, from the audit log ("someone" if it does not say)."""
    event = (
        AuditEvent.objects.filter(
            team=team, kind=EventKind.QUOTA_CHANGED, data__resource_class=rclass, data__after__has_key=field
        )
        .order_by("-created_at", "-id")
        .first()
    )
    return event.actor_name if event and event.actor_name else "someone"


def _form_changed_since(request, team: Team, rclass: str, since: ChangedSince):
    """The form again, drawn from the quota as it is now (its `seen` too, so saving again sets
    what the user typed over the other change, knowingly), with what they typed where it clashed."""
    view, row, _ = _row_of(request.user, team, rclass)
    row = row or ClassUsage.unused(rclass)
    now = {name: getattr(row, name) for name in QUOTA_FIELDS}
    values = {
        **now,
        **{name: request.POST.get(name, "") for name in since.typed},
        "reason": request.POST.get("reason", ""),
    }
    return _render_row(request, view, row, editing=True, errors=since.errors, values=values, seen=now)


def _form_with_errors(request, team: Team, rclass: str, fields: dict[str, list[str]]):
    """Errors keyed by the form's input names; the rest (unknown class, nothing given) by `row`."""
    errors = {}
    for path, messages in fields.items():
        name = path.rsplit(".", 1)[-1]
        errors.setdefault(name if name in (*QUOTA_FIELDS, "reason") else "row", []).extend(messages)
    view, row, _ = _row_of(request.user, team, rclass)
    row = row or ClassUsage.unused(rclass)
    values = {name: request.POST.get(name, "") for name in (*QUOTA_FIELDS, "reason")}
    seen = {name: request.POST.get(SEEN + name, "") for name in QUOTA_FIELDS}
    return _render_row(request, view, row, editing=True, errors=errors, values=values, seen=seen)
