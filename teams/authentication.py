"""`Authorization: Bearer <token>` for the REST API.

Every API request authenticates, so each web process remembers the tokens it has accepted, by
digest, for MLQ_TOKEN_CACHE_S seconds, instead of reading the token and its user from Postgres
each time. Revocation still takes effect at once: revoking a token, changing or deleting a token
or a user (deactivating one included) writes a new token generation to the cache (Redis), and a
process that finds a generation other than the one it remembered under forgets every token it
knew. Expiry is checked at each request against the remembered expires_at. While Redis fails
each process reads its own memory (mlqueue/cache.py), so a change made through another process
then takes up to MLQ_TOKEN_CACHE_S seconds to reach this one."""

import copy
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from rest_framework import authentication, exceptions

from teams.models import ApiToken, hash_token

# last_used_at is for humans auditing tokens; minute resolution saves a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)
GENERATION_KEY = "api-tokens:generation"
MAX_REMEMBERED = 10_000  # tokens per process; past it, the memory starts again empty

INVALID_TOKEN = "Invalid or revoked token."
TOKEN_EXPIRED = "This token expired at {expired_at}; create a new one (mlq login or /account/tokens/)"


@dataclass(frozen=True, slots=True)
class _Remembered:
    token: ApiToken  # with its user
    generation: str | None
    until: float  # time.monotonic()


_remembered: dict[str, _Remembered] = {}  # by digest, in this process


def forget_api_tokens() -> None:
    """Every web process forgets the tokens it remembers, at its next request: call it whenever
    a token or a user changes. Now and again once the transaction commits: a process that read
    the row in between, before the change was visible, forgets it then."""
    _new_generation()
    transaction.on_commit(_new_generation)


def _new_generation() -> None:
    cache.set(GENERATION_KEY, secrets.token_hex(8), timeout=None)


def forget_on_change() -> None:
    """Tokens and users change through the admin and the shell too, not only through services."""
    from django.contrib.auth import get_user_model

    def forget(**_):
        forget_api_tokens()

    for model in (ApiToken, get_user_model()):
        post_save.connect(forget, sender=model, weak=False, dispatch_uid=f"forget-api-tokens-save-{model.__name__}")
        post_delete.connect(forget, sender=model, weak=False, dispatch_uid=f"forget-api-tokens-delete-{model.__name__}")


UNREAD = object()


def token_generation() -> str | None:
    return cache.get(GENERATION_KEY)


def accepted_token(digest: str, generation=UNREAD) -> ApiToken | None:
    """The unrevoked token with this digest, its user loaded; remembered for MLQ_TOKEN_CACHE_S.
    `generation`: token_generation() as read just before, for requests answered together."""
    if settings.MLQ_TOKEN_CACHE_S <= 0:
        return _read_token(digest)
    if generation is UNREAD:
        generation = token_generation()
    known = _remembered.get(digest)
    if known is not None and known.generation == generation and known.until > time.monotonic():
        return known.token
    if known is not None and known.generation != generation:
        _remembered.clear()
    # The generation is read before the row: a change committed in between leaves a newer
    # generation behind it, and the next request reads the row again.
    token = _read_token(digest)
    if token is not None:
        if len(_remembered) >= MAX_REMEMBERED:
            _remembered.clear()
        _remembered[digest] = _Remembered(token, generation, time.monotonic() + settings.MLQ_TOKEN_CACHE_S)
    return token


def _read_token(digest: str) -> ApiToken | None:
    return ApiToken.objects.select_related("user").filter(digest=digest, revoked_at__isnull=True).first()


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def __init__(self, generation=UNREAD):
        # The submit lane authenticates a group of requests with the generation read once.
        self.generation = generation

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("The token contains invalid characters.") from None
        return self.authenticate_token(raw)

    def authenticate_token(self, raw: str):
        token = accepted_token(hash_token(raw), self.generation)
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed(INVALID_TOKEN)
        now = timezone.now()
        if token.expired(now):
            expired_at = token.expires_at.astimezone(UTC).isoformat(timespec="seconds")
            raise exceptions.AuthenticationFailed(TOKEN_EXPIRED.format(expired_at=expired_at))
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        # A copy each: what a request notes on its user (permission caches) stays with it.
        return copy.copy(token.user), token

    def authenticate_header(self, request):
        return self.keyword
