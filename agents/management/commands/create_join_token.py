import getpass
import re
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from agents.tokens import do_create_join_token

DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_EXPIRY = timedelta(days=3650)  # ten years; for longer, no --expires (valid until revoked)
MAX_USES = 2**31 - 1  # the column's range (a PostgreSQL integer)
TOO_LONG = "--expires {text!r}: at most 3650d (ten years); leave --expires out for a token valid until revoked"
TOO_MANY_USES = "--max-uses {uses}: at most {most}; leave --max-uses out for no limit"


def parse_duration(text: str) -> timedelta:
    """ "24h" -> 24 hours; s, m, h and d; at most MAX_EXPIRY."""
    match = DURATION.match(text.strip())
    if not match or int(match[1]) == 0:
        raise CommandError(f"--expires {text!r}: use a positive number with s, m, h or d, e.g. 24h or 7d")
    if int(match[1]) * SECONDS[match[2]] > MAX_EXPIRY.total_seconds():
        raise CommandError(TOO_LONG.format(text=text))
    return timedelta(**{UNITS[match[2]]: int(match[1])})


class Command(BaseCommand):
    help = (
        "Create a join token that lets new node agents register, and print it (it is shown only once; only "
        "its hash is kept). Give it to agents in a 0600 file (--token-file) or MLQ_AGENT_JOIN_TOKEN."
    )

    def add_arguments(self, parser):
        parser.add_argument("--name", default="", help="what it is for, e.g. 'rack z2-r3 install'")
        parser.add_argument("--expires", help="how long it is valid, e.g. 24h, 7d (default: until revoked)")
        parser.add_argument("--max-uses", type=int, help="how many nodes may register with it (default: no limit)")

    def handle(self, *args, name, expires, max_uses, **options):
        if max_uses is not None and max_uses < 1:
            raise CommandError("--max-uses must be at least 1")
        if max_uses is not None and max_uses > MAX_USES:
            raise CommandError(TOO_MANY_USES.format(uses=max_uses, most=MAX_USES))
        expires_at = timezone.now() + parse_duration(expires) if expires else None
        token, raw = do_create_join_token(
            created_by=f"manage.py ({getpass.getuser()})", name=name[:100], expires_at=expires_at, max_uses=max_uses
        )
        self.stdout.write(raw)
        self.stderr.write(
            f"join token {token.hint}… created; expires "
            f"{expires_at.isoformat() if expires_at else 'never'}; "
            f"{max_uses if max_uses is not None else 'unlimited'} use(s). "
            f"Revoke it with: manage.py revoke_join_token {token.hint}"
        )
