"""The admin console at /nodes/, for site admins only: the GPU heatmap by rack (a fragment
that re-fetches itself), summaries, recent preemptions and failures, and cordon, drain and
uncordon. Actions post back to this page (htmx swaps the heatmap) and go through the same
validation and audited services as the API."""

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from agents import console, services
from agents.api import NOT_AN_ADMIN, NodeActionSerializer
from scheduling.models import Node
from teams.selectors import is_site_admin


@dataclass(frozen=True)
class ActionError:
    """Why an action was refused, shown next to the node it was for."""

    node: str
    message: str


@login_required
@require_http_methods(["GET", "POST"])
def page(request):
    """One URL serves the page, its self-refreshing heatmap fragment and the node actions."""
    if not is_site_admin(request.user):
        raise PermissionDenied(NOT_AN_ADMIN if request.method == "POST" else "only site admins may see the nodes.")
    if request.method == "POST":
        return _act(request)
    if request.headers.get("HX-Request") and request.GET.get("part") == "heatmap":
        return render(request, "agents/heatmap.html", _heatmap_context())
    return _full_page(request)


def _full_page(request, error: ActionError | None = None):
    context = {
        **_heatmap_context(error),
        "section": "nodes",
        "gpu_classes": console.gpu_classes(),
        **console.scheduler_status(),
        "preemptions": console.recent_preemptions(),
        "failures": console.recent_failures(),
    }
    return render(request, "agents/nodes.html", context)


def _heatmap_context(error: ActionError | None = None, notice: str = "") -> dict:
    racks = console.racks()
    return {
        "racks": racks,
        "state_counts": console.state_counts(racks),
        "unisolated": console.unisolated(racks),
        "error": error,
        "notice": notice,
    }


def _act(request):
    """Cordon, drain or uncordon one node. Invalid input changes nothing and is shown next
    to the node; otherwise htmx gets the re-rendered heatmap, a plain form post a redirect."""
    node = get_object_or_404(Node, name=request.POST.get("node", ""))
    action = request.POST.get("action", "")
    if action not in services.NODE_ACTIONS:
        return _refused(
            request, ActionError(node.name, f"unknown action {action!r}: cordon, drain, uncordon or reset_token.")
        )
    body = NodeActionSerializer(data={"reason": request.POST.get("reason", "")})
    if not body.is_valid():
        return _refused(
            request, ActionError(node.name, "; ".join(f"{name}: {errors[0]}" for name, errors in body.errors.items()))
        )
    services.NODE_ACTIONS[action](node, request.user, body.validated_data["reason"])
    notice = (
        f"{node.name}'s token is reset: its agent must join again (a join token), once its tasks are requeued."
        if action == "reset_token"
        else f"{node.name} is now {node.state}."
    )
    if request.headers.get("HX-Request"):
        return render(request, "agents/heatmap.html", _heatmap_context(notice=notice))
    messages.success(request, notice)
    return redirect("nodes-page")


def _refused(request, error: ActionError):
    if request.headers.get("HX-Request"):
        return render(request, "agents/heatmap.html", _heatmap_context(error))
    return _full_page(request, error)
