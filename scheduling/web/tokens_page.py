"""Your API tokens (/account/tokens/): the list (name, hint, created, last used, expires,
revoked), a form that creates one and shows it once, and a revoke button per token.

The same rules and services as the API (teams/api.py): a new token's raw value is only in
the response to the POST that created it, never stored in the session or a message, and the
response is not cached."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseNotFound
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from mlqueue.api_errors import flatten_errors
from teams.api import NO_SUCH_TOKEN
from teams.selectors import token_for, tokens_of
from teams.serializers import MAX_TOKEN_DAYS, TOKEN_NAME_LENGTH, TokenCreateSerializer
from teams.services import do_create_token, do_revoke_token

REVOKED = "Token {hint}… ({name}) revoked: it no longer works."


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
    body = TokenCreateSerializer(data={"name": request.POST.get("name", ""), "expires_in_days": days or None})
    if not body.is_valid():
        return _render(request, errors=flatten_errors(body.errors), typed=request.POST, status=400)
    fields = body.validated_data
    token, raw = do_create_token(user=request.user, name=fields["name"], expires_in_days=fields["expires_in_days"])
    return _render(request, created=token, raw=raw)


def _revoke(request):
    token_id = request.POST["revoke"]
    token = token_for(request.user, int(token_id)) if token_id.isdecimal() and token_id.isascii() else None
    if token is None:
        return HttpResponseNotFound(NO_SUCH_TOKEN.format(token_id=token_id), content_type="text/plain; charset=utf-8")
    do_revoke_token(token=token, actor=request.user)
    messages.success(request, REVOKED.format(hint=token.hint, name=token.name))
    return redirect("account-tokens")


def _render(request, *, status: int = 200, **extra):
    context = {
        "section": "tokens",
        "tokens": tokens_of(request.user),
        "name_length": TOKEN_NAME_LENGTH,
        "max_days": MAX_TOKEN_DAYS,
        "errors": {},
        "typed": {},
        **extra,
    }
    return render(request, "teams/tokens.html", context, status=status)
