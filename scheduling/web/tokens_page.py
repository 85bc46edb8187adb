"""Your API tokens (/account/tokens/): the list (name, hint, created, last used, expires,
revoked), a form that creates one and shows it once, and a revoke button per token. A site
admin also sees every user's tokens, or one user's with `?user=NAME` (as `GET /api/v1/tokens`
takes it), and may revoke any of them.

The same rules and services as the API (teams/api.py): a new token's raw value is only in
the response to the POST that created it, never stored in the session or a message, and the
response is not cached."""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from mlqueue.api_errors import flatten_errors
from teams.api import NO_SUCH_TOKEN, NO_SUCH_USER, ONLY_ADMINS_LIST_OTHERS
from teams.models import ApiToken
from teams.selectors import is_site_admin, token_for, tokens_of
from teams.serializers import MAX_TOKEN_DAYS, TOKEN_NAME_LENGTH, TokenCreateSerializer
from teams.services import do_create_token, do_revoke_token

REVOKED = "Token {hint}… ({name}) revoked: it no longer works."
REVOKED_OF = "Token {hint}… ({name}) of {owner} revoked: it no longer works."
# An admin's list of every user's tokens shows the newest this many (?user= narrows it).
ALL_TOKENS_SHOWN = 500
TEXT = "text/plain; charset=utf-8"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def page(request):
    if request.method == "POST" and "revoke" in request.POST:
        return _revoke(request)
    if request.method == "POST":
        return _create(request)
    return _render(request)


def _create(request):
    days = request.POST.get("expires_in_days", "").strip()
    # The form's text as the API's JSON carries it: digits as a number (the field takes no string);
    # a run of digits too long to read is a number as far above the limit (its refusal names the limit).
    if days.isascii() and days.isdecimal():
        days = int(days) if len(days) <= 18 else 10**18
    data = {"name": request.POST.get("name", ""), "expires_in_days": None if days == "" else days}
    body = TokenCreateSerializer(data=data)
    if not body.is_valid():
        return _render(request, errors=flatten_errors(body.errors), typed=request.POST, status=400)
    fields = body.validated_data
    token, raw = do_create_token(user=request.user, name=fields["name"], expires_in_days=fields["expires_in_days"])
    return _render(request, created=token, raw=raw)


def _revoke(request):
    token_id = request.POST["revoke"]
    token = token_for(request.user, int(token_id)) if token_id.isdecimal() and token_id.isascii() else None
    if token is None:
        return HttpResponseNotFound(NO_SUCH_TOKEN.format(token_id=token_id), content_type=TEXT)
    do_revoke_token(token=token, actor=request.user)
    done = REVOKED if token.user_id == request.user.pk else REVOKED_OF
    messages.success(request, done.format(hint=token.hint, name=token.name, owner=token.user.get_username()))
    shown = request.POST.get("user", "")  # an admin's list stays on the user it showed
    return redirect(reverse("account-tokens") + (f"?{urlencode({'user': shown})}" if shown else ""))


def _render(request, *, status: int = 200, **extra):
    listed = _others_tokens(request)
    if isinstance(listed, HttpResponse):
        return listed
    context = {
        "section": "tokens",
        "tokens": tokens_of(request.user),
        "name_length": TOKEN_NAME_LENGTH,
        "max_days": MAX_TOKEN_DAYS,
        "errors": {},
        "typed": {},
        **listed,
        **extra,
    }
    template = "scheduling/tokens_admin.html" if listed else "teams/tokens.html"
    return render(request, template, context, status=status)


def _others_tokens(request) -> dict | HttpResponse:
    """For a site admin: every user's tokens, newest first, or those of `?user=NAME` (a 404 for
    no such user). Anyone else gets {} (their own list only), or a 403 for another's name."""
    name = request.GET.get("user", "")
    if not is_site_admin(request.user):
        if name and name != request.user.get_username():
            return HttpResponseForbidden(ONLY_ADMINS_LIST_OTHERS, content_type=TEXT)
        return {}
    tokens = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
    if name:
        owner = get_user_model().objects.filter(username=name).first()
        if owner is None:
            return HttpResponseNotFound(NO_SUCH_USER.format(name=name[:150]), content_type=TEXT)
        tokens = tokens.filter(user=owner)
    return {"all_tokens": tokens[:ALL_TOKENS_SHOWN], "all_count": tokens.count(), "owner_filter": name}
