import getpass

from django.core.management.base import BaseCommand, CommandError

from agents.models import JoinToken
from agents.tokens import do_revoke_join_token


class Command(BaseCommand):
    help = "Revoke a join token, named by the first characters `create_join_token` printed (its hint)."

    def add_arguments(self, parser):
        parser.add_argument("hint", help="the token's first 12 characters, e.g. mlqj_AbCdEfG")

    def handle(self, *args, hint, **options):
        matches = list(JoinToken.objects.filter(hint__startswith=hint[:12])) if len(hint) >= 8 else []
        if len(matches) != 1:
            raise CommandError(
                f"no single join token starts with {hint!r} (give at least 8 characters; "
                f"{len(matches)} match): see manage.py list_join_tokens"
            )
        if not do_revoke_join_token(token=matches[0], revoked_by=f"manage.py ({getpass.getuser()})"):
            raise CommandError(f"join token {matches[0].hint}… was already revoked")
        self.stdout.write(f"revoked join token {matches[0].hint}…")
