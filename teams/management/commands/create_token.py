from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from teams.models import ApiToken


class Command(BaseCommand):
    help = "Issue a new API token for USERNAME and print it (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the token is for, e.g. 'laptop CLI'")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        _, raw = ApiToken.issue(user=user, name=name)
        self.stdout.write(raw)
