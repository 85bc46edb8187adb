import getpass

from django.core.management.base import BaseCommand, CommandError

from agents.models import JoinToken
from agents.tokens import do_revoke_join_token

MIN_HINT = 8
HINT_TOO_SHORT = (
    "{hint!r} is too short to name a join token: give at least {least} of its first characters "
    "(create_join_token printed 12, e.g. mlqj_AbCdEfG); see manage.py list_join_tokens"
)
NO_SINGLE_MATCH = "no single join token starts with {hint!r} ({count} match): see manage.py list_join_tokens"


class Command(BaseCommand):
    help = "Revoke a join token, named by the first characters `create_join_token` printed (its hint)."

    def add_arguments(self, parser):
        parser.add_argument("hint", help="the token's first 12 characters, e.g. mlqj_AbCdEfG (at least 8)")

    def handle(self, *args, hint, **options):
        # Every token starts with "mlqj_": fewer characters would name many, or guess at one.
        if len(hint) < MIN_HINT:
            raise CommandError(HINT_TOO_SHORT.format(hint=hint, least=MIN_HINT))
        matches = list(JoinToken.objects.filter(hint__startswith=hint[:12]))
        if len(matches) != 1:
            raise CommandError(NO_SINGLE_MATCH.format(hint=hint, count=len(matches)))
        if not do_revoke_join_token(token=matches[0], revoked_by=f"manage.py ({getpass.getuser()})"):
            raise CommandError(f"join token {matches[0].hint}… was already revoked")
        self.stdout.write(f"revoked join token {matches[0].hint}…")
