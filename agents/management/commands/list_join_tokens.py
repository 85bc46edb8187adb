from django.core.management.base import BaseCommand
from django.utils import timezone

from agents.models import JoinToken


class Command(BaseCommand):
    help = "List join tokens: hint, name, uses, expiry, and whether each can still be used."

    def handle(self, *args, **options):
        now = timezone.now()
        for token in JoinToken.objects.all():
            self.stdout.write(
                f"{token.hint}…  {status(token, now):<8} uses {token.uses}/"
                f"{token.max_uses if token.max_uses is not None else '∞'}  "
                f"expires {token.expires_at.isoformat() if token.expires_at else 'never'}  "
                f"by {token.created_by}  {token.name}"
            )


def status(token: JoinToken, now) -> str:
    if token.revoked_at:
        return "revoked"
    if token.expires_at and token.expires_at <= now:
        return "expired"
    if token.max_uses is not None and token.uses >= token.max_uses:
        return "used up"
    return "usable"
