"""`Authorization: Bearer <token>` for the REST API."""

from datetime import UTC, timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from teams.models import ApiToken, hash_token

# last_used_at is for humans auditing tokens; minute resolution saves a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)

INVALID_TOKEN = "Invalid or revoked token."
TOKEN_EXPIRED = "This token expired at {expired_at}; create a new one (mlq login or /account/tokens/)"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

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
        token = ApiToken.objects.select_related("user").filter(digest=hash_token(raw), revoked_at__isnull=True).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed(INVALID_TOKEN)
        now = timezone.now()
        if token.expired(now):
            expired_at = token.expires_at.astimezone(UTC).isoformat(timespec="seconds")
            raise exceptions.AuthenticationFailed(TOKEN_EXPIRED.format(expired_at=expired_at))
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
