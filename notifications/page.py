"""Your notifications (/account/notifications/): the default subscription (events, webhook,
email), the webhook secret with a button that rotates it, and the delivery log. The same
serializer and services as the API (notifications/api.py)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from mlqueue.api_errors import flatten_errors
from notifications.models import Event
from notifications.selectors import deliveries_of
from notifications.services import do_rotate_secret, do_update_settings, settings_of
from notifications.spec import NotificationSettingsSerializer

SAVED = "Saved: jobs without a notify block of their own now notify you as set here."
ROTATED = "A new secret is in force: webhooks sent from now on are signed with it."
LOG_ROWS = 50


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def page(request):
    if request.method == "POST" and "rotate" in request.POST:
        do_rotate_secret(user=request.user)
        messages.success(request, ROTATED)
        return redirect("account-notifications")
    if request.method == "POST":
        return _save(request)
    return _render(request)


def _save(request):
    data = {
        "on": request.POST.getlist("on"),
        "webhook": request.POST.get("webhook", "").strip(),
        "email": request.POST.get("email") == "on",
    }
    body = NotificationSettingsSerializer(data=data, context={"user": request.user})
    if not body.is_valid():
        return _render(request, errors=flatten_errors(body.errors), typed=data, status=400)
    do_update_settings(user=request.user, **body.validated_data)
    messages.success(request, SAVED)
    return redirect("account-notifications")


def _render(request, *, status: int = 200, errors=None, typed=None):
    current = settings_of(request.user)
    shown = typed or {"on": current.on, "webhook": current.webhook, "email": current.email}
    context = {
        "section": "notifications",
        "current": current,
        "shown": shown,
        "events": [(event.value, event.label) for event in Event],
        "deliveries": deliveries_of(request.user)[:LOG_ROWS],
        "errors": errors or {},
    }
    return render(request, "notifications/account.html", context, status=status)
