"""The admin console at /nodes/, for site admins only: a heatmap of every node (one square
each, by zone and rack, colored by state and free GPUs) with filters in the URL, counts per
state, bulk cordon, drain and uncordon of a selection or of racks, summaries and recent
preemptions and failures; and a node's own page at /nodes/<name>/. The heatmap is a fragment
that re-fetches itself with the same filters. Actions go through the same validation and
audited services as the API."""

import math
from dataclasses import dataclass
from datetime import UTC

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html_join
from django.views.decorators.http import require_http_methods
from rest_framework.exceptions import APIException, ValidationError

from agents import console, node_filters, services
from agents.api import NO_TARGETS, NOT_AN_ADMIN, BulkActionSerializer, NodeActionSerializer, bulk_act
from mlqueue import date_fields
from scheduling import maintenance, node_health
from scheduling.models import MaintenanceWindow, Node, Task
from scheduling.states import ON_NODE
from teams.models import AuditEvent
from teams.selectors import is_site_admin

# Below this many matching nodes the console also lists them, one line each with a checkbox.
LIST_AT_MOST = 200
NODE_HISTORY = 100


@dataclass(frozen=True)
class ActionError:
    """Why an action was refused: shown in the action bar (or next to the node it was for)."""

    node: str
    message: str


def _admin_only(request) -> None:
    if not is_site_admin(request.user):
        raise PermissionDenied(NOT_AN_ADMIN if request.method == "POST" else "only site admins may see the nodes.")


@login_required
@require_http_methods(["GET", "POST"])
def page(request):
    """One URL serves the page, its self-refreshing heatmap fragment and the node actions."""
    _admin_only(request)
    if request.method == "POST":
        return _act(request)
    if request.headers.get("HX-Request") and request.GET.get("part") == "heatmap":
        # A 200 with the filters' errors in it: htmx swaps no 4xx (the full page says 400).
        return _fragment(request, _heatmap_context(request))
    return _full_page(request)


def _full_page(request, error: ActionError | None = None, status: int = 200):
    context = {
        **_heatmap_context(request, error),
        "section": "nodes",
        "gpu_classes": console.gpu_classes(),
        **console.scheduler_status(),
        "preemptions": console.recent_preemptions(),
        "failures": console.recent_failures(),
        "windows": maintenance.open_windows(),
    }
    status = 400 if context["filter_errors"] else status
    return render(request, "agents/nodes.html", context, status=status)


def _heatmap_context(request, error: ActionError | None = None, notice: str = "") -> dict:
    """The filtered racks; bad filter values show nothing but their error (naming the field)."""
    filters = node_filters.ConsoleFilter(request.GET, queryset=Node.objects.all())
    errors = {**node_filters.misused(request.GET), **{name: errs[0] for name, errs in filters.errors.items()}}
    racks = [] if errors else console.racks(filters.qs)
    matching = [node for rack in racks for node in rack.nodes]
    query = request.GET.copy()
    query.pop("part", None)
    sizes = _rack_sizes(racks) if _filtered(request.GET) else {}
    return {
        "racks": [(rack, squares(rack), sizes.get(rack.name), _names(rack) if sizes else "") for rack in racks],
        "matching": len(matching),
        "listed": matching if len(matching) <= LIST_AT_MOST else [],
        "list_at_most": LIST_AT_MOST,
        "state_counts": console.state_counts(racks),
        "unisolated": console.unisolated(racks),
        "filters": {name: request.GET.get(name, "") for name in node_filters.ConsoleFilter.base_filters},
        "states": request.GET.getlist("state"),
        "filter_errors": errors,
        "choices": node_filters.choices(),
        "query": query.urlencode(),
        "error": error,
        "notice": notice,
        "typed": _typed(request) if error else {},
    }


def _filtered(query) -> bool:
    """Whether the console shows part of the fleet: a filter with a value in the URL."""
    return any(value.strip() for name in node_filters.ConsoleFilter.base_filters for value in query.getlist(name))


def _names(rack: console.Rack) -> str:
    return " ".join(node.name for node in rack.nodes)  # a node's name has no space (agents/protocol.py)


def _rack_sizes(racks: list[console.Rack]) -> dict[str, int]:
    """Each shown rack's node count in all, filters aside (one query): a filtered rack's label
    says how many of its nodes are shown, its tick picking those alone (`_picked`)."""
    rows = Node.objects.filter(rack__in={rack.name for rack in racks}).values("rack").annotate(n=Count("id"))
    return {row["rack"]: row["n"] for row in rows}


def _typed(request) -> dict:
    """What the refused bulk form held (reason, window, ticked racks and nodes), put back in it
    beside the error, so a refusal costs no retyping. A single node's refusal fills nothing:
    its reason was not typed in the bulk bar."""
    if request.method != "POST" or request.POST.get("node"):
        return {}
    fields = {name: request.POST.get(name, "") for name in ("reason", "starts_at", "hours")}
    return {**fields, "racks": set(request.POST.getlist("racks")), "nodes": set(request.POST.getlist("nodes"))}


def squares(rack: console.Rack) -> str:
    """A rack's node squares, built here rather than in a template loop: at 2,500 nodes the
    loop alone took most of the page's render time."""
    return format_html_join(
        "",
        '<a class="cell n-{} {}{}" id="node-{}" data-state="{}" href="/nodes/{}/" title="{}">{}</a>',
        (
            (
                node.state,
                node.level,
                " unisolated" if node.unisolated else "",
                node.name,
                node.state,
                node.name,
                node.title,
                node.free if node.gpu_type else "",
            )
            for node in rack.nodes
        ),
    )


def _act(request):
    """A bulk action (`nodes` and/or `racks`), or one node's (`node`). Invalid input changes
    nothing and says which field is wrong; otherwise htmx gets the re-rendered heatmap, a
    plain form post a redirect."""
    if request.POST.get("node"):
        return _act_on_one(request)
    if request.POST.get("action") == "maintenance":
        return _schedule_window(request)
    if request.POST.get("action") == "cancel_maintenance":
        return _cancel_window(request)
    picked = _picked(request)
    if isinstance(picked, ActionError):
        return _refused(request, picked)
    names, racks = picked
    body = BulkActionSerializer(
        data={
            "action": request.POST.get("action", ""),
            "reason": request.POST.get("reason", ""),
            "names": names,
            "racks": racks,
        }
    )
    if not body.is_valid():
        return _refused(request, ActionError("", _first_errors(body.errors, CONSOLE_FIELDS)))
    action, done, unchanged = bulk_act(body.validated_data, request.user)
    verb = {"drain_wait": "draining (tasks may finish)", "uncordon": "uncordoned"}.get(action, action + "ed")
    said = f"{len(done)} node{'s' if len(done) != 1 else ''} {verb}" + (f": {_some(done)}." if done else ".")
    if unchanged:
        said += f" {ALREADY[action]}, left as they were: {_some(unchanged)}."
    return _done(request, said)


SHOWN_IN = "shown-in:{rack}"  # the hidden field of a filtered rack's shown nodes (heatmap.html)
NONE_SHOWN = "racks: no node of rack {racks} was shown under these filters: reload the console."


def _picked(request) -> tuple[list[str], list[str]] | ActionError:
    """The ticked (nodes, racks), as the bulk API takes them. Unfiltered, a rack's tick is the
    whole rack. Under a filter it is the rack's nodes the heatmap showed, posted beside it
    (SHOWN_IN), so the rack's label, which counts those, is what is acted on: on
    `?state=DRAINING` a rack labelled 1 cordoned its 3 READY nodes that were not shown (QA)."""
    names, racks = request.POST.getlist("nodes"), request.POST.getlist("racks")
    if not racks or not _filtered(request.GET):
        return names, racks
    posted = (value for rack in racks for value in request.POST.getlist(SHOWN_IN.format(rack=rack)))
    shown = {name for value in posted for name in value.split()}
    found = dict(Node.objects.filter(name__in=shown, rack__in=racks).values_list("name", "rack"))
    if missing := sorted(set(racks) - set(found.values())):
        return ActionError("", NONE_SHOWN.format(racks=", ".join(missing)))
    return sorted({*names, *found}), []


# The nodes a bulk action left as they were, by action (a cordon again said "Already in service").
ALREADY = {
    "cordon": "Already cordoned for that reason",
    "drain": "Already draining for that reason",
    "drain_wait": "Already draining for that reason",
    "uncordon": "Already in service",
}


def _some(nodes: list) -> str:
    """Up to five names, then how many more."""
    return ", ".join(node.name for node in nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")


NOT_A_TIME = "a date and time (UTC), e.g. 2026-12-02T02:00."
NOT_HOURS = "a number of hours, e.g. 4."


def _schedule_window(request):
    """A maintenance window on the selection: one rack alone is named as the rack, anything
    else as its nodes (the racks' and the picked ones)."""
    picked = _picked(request)
    if isinstance(picked, ActionError):
        return _refused(request, picked)
    names, racks = picked
    if not racks and not names:
        return _refused(request, ActionError("", "nodes: select the racks or nodes the window is for."))
    raw = request.POST.get("starts_at", "").strip()
    try:
        starts_at = parse_datetime(raw or "-")
    except ValueError as exc:  # the shape of one, but no such day or time: 2026-02-30T02:00
        # The API's words for an offset out of range (+25:00), not Python's timedelta (QA).
        why = date_fields.bad_offset(raw) or date_fields.no_such_day(raw, exc)
        return _refused(request, ActionError("", f"starts_at: {why}"))
    if starts_at is None:
        return _refused(request, ActionError("", f"starts_at: {NOT_A_TIME}"))
    try:
        hours = float(request.POST.get("hours", ""))
    except ValueError:
        hours = math.nan
    if not math.isfinite(hours):  # "nan", "inf" and "1e400" parse as floats
        return _refused(request, ActionError("", f"hours: {NOT_HOURS}"))
    in_racks = dict(Node.objects.filter(rack__in=racks).values_list("name", "rack"))
    if empty := sorted(set(racks) - set(in_racks.values())):  # as the bulk actions refuse it
        refusal = {"rack": [maintenance.NO_NODE_IN.format(kind="rack", name=", ".join(empty))]}
        return _refused(request, ActionError("", _first_errors(refusal, WINDOW_FIELDS)))
    if racks and not names and len(racks) == 1:
        target = {"rack": racks[0]}
    else:
        target = {"names": sorted({*names, *in_racks})}
    try:
        window = maintenance.do_schedule_window(
            user=request.user,
            **target,
            starts_at=starts_at if starts_at.tzinfo else starts_at.replace(tzinfo=UTC),
            duration_hours=hours,
            reason=request.POST.get("reason", "").strip(),
        )
    except ValidationError as refusal:
        return _refused(request, ActionError("", _first_errors(refusal.detail, WINDOW_FIELDS)))
    starts, ends = (moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M") for moment in (window.starts_at, window.ends_at))
    return _done(
        request, f"maintenance #{window.pk} scheduled: {window.target}, {starts} to {ends} UTC: {window.reason}."
    )


def _cancel_window(request):
    window_id = request.POST.get("window", "")
    if not window_id.isascii() or not window_id.isdigit() or len(window_id) > 18:
        return _refused(request, ActionError("", f"window: not a window id: {window_id[:40]!r}."))
    window = MaintenanceWindow.objects.filter(pk=int(window_id)).first()
    if window is None:  # said on the console, as every other refusal there, not a bare 404 page
        return _refused(request, ActionError("", f"window: there is no maintenance window #{int(window_id)}."))
    try:
        # The state the admin saw: a "Cancel" drawn before the window started must not end it
        # mid-maintenance, its rack back in service (QA).
        maintenance.do_cancel_window(window=window, user=request.user, seen=request.POST.get("seen") or None)
    except APIException as refusal:
        return _refused(request, ActionError("", str(refusal.detail)))
    return _done(request, f"maintenance #{window.pk} cancelled.")


def _act_on_one(request):
    name = request.POST.get("node", "")
    node = Node.objects.filter(name=name).first()
    if node is None:  # said on the console, as every other refusal there, not a bare 404 page
        return _refused(request, ActionError("", f"node: {maintenance.NO_SUCH_NODES.format(names=name[:253])}"))
    action = request.POST.get("action", "")
    if action not in services.NODE_ACTIONS:
        return _refused(
            request,
            ActionError(node.name, f"action: unknown action {action!r}: {', '.join(services.NODE_ACTIONS)}."),
        )
    body = NodeActionSerializer(data={"reason": request.POST.get("reason", "")})
    if not body.is_valid():
        return _refused(request, ActionError(node.name, _first_errors(body.errors)))
    done = services.NODE_ACTIONS[action](node, request.user, body.validated_data["reason"])
    node.refresh_from_db()
    notice = f"{node.name} is now {node.state}."
    if action == "reset_token":
        notice = (
            f"{node.name}'s token is reset: its agent must join again (a join token), once its tasks are requeued."
            if done
            else NO_TOKEN_TO_RESET.format(node=node.name)
        )
    if request.POST.get("from") == "node":
        messages.success(request, notice)
        return redirect("node-page", name=node.name)
    return _done(request, notice)


NO_TOKEN_TO_RESET = "{node} has no token to reset (reset already, no agent has joined since): nothing changed."


# The bulk API's fields by the console form's names (its checkboxes are `nodes` and `racks`).
CONSOLE_FIELDS = {"names": "nodes", "rack": "racks"}
# The maintenance service's fields by the "Schedule window" form's names.
WINDOW_FIELDS = {**CONSOLE_FIELDS, "duration_hours": "hours"}
NOTHING_PICKED = "tick the nodes or racks to act on first."


def _first_errors(errors: dict, names: dict[str, str] | None = None) -> str:
    """ "field: message; ...", with the fields as the form names them (`names`)."""
    names = names or {}
    said = []
    for name, errs in errors.items():
        message = NOTHING_PICKED if errs[0] == NO_TARGETS else errs[0]
        said.append(f"{names.get(name, name)}: {message}")
    return "; ".join(said)


def _fragment(request, context: dict) -> HttpResponse:
    """The heatmap, and the maintenance windows swapped in beside it (htmx's out-of-band swap):
    the list showed a window that had started as SCHEDULED, its Cancel ready to end it, and a
    window just scheduled only after a reload (QA)."""
    windows = {"windows": maintenance.open_windows(), "cancel": True, "out_of_band": True}
    return HttpResponse(
        render_to_string("agents/heatmap.html", context, request)
        + render_to_string("agents/maintenance_windows.html", windows, request)
    )


def _done(request, notice: str):
    if request.headers.get("HX-Request"):
        return _fragment(request, _heatmap_context(request, notice=notice))
    messages.success(request, notice)
    return redirect(reverse("nodes-page") + (f"?{request.GET.urlencode()}" if request.GET else ""))


def _refused(request, error: ActionError):
    if request.POST.get("from") == "node" and error.node:
        messages.error(request, error.message)
        return redirect("node-page", name=error.node)
    if request.headers.get("HX-Request"):  # a 200: htmx 2 swaps no 4xx, and #action-error would never show
        return _fragment(request, _heatmap_context(request, error))
    return _full_page(request, error, status=400)


@login_required
@require_http_methods(["GET"])
def node_page(request, name: str):
    """One node: inventory, labels, health, its GPUs, running tasks and its history."""
    _admin_only(request)
    node = get_object_or_404(Node, name=name)
    tasks = (
        Task.objects.filter(node=node, state__in=ON_NODE)
        .order_by("job_id", "rank")
        .values("job_id", "job__name", "job__team__name", "rank", "state", "gpu_indices", "started_at")
    )
    events = AuditEvent.objects.filter(node=node).order_by("-created_at", "-id")[:NODE_HISTORY]
    context = {
        "section": "nodes",
        "node": node,
        "cells": console.gpu_cells(node) if node.gpu_type else [],
        **_health_context(node),
        "tasks": list(tasks),
        "events": events.values("created_at", "kind", "actor_name", "reason", "message"),
        "windows": maintenance.open_windows(node_name=node.name),
    }
    return render(request, "agents/node.html", context)


def _health_context(node: Node) -> dict:
    """The node's latest telemetry sample (Redis): a row per GPU, the health check, its age."""
    sample, age, rows = node_health.latest_of(node)
    return {"sample": sample, "sample_age_s": age, "gpu_rows": rows}
