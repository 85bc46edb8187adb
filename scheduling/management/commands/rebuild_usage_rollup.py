"""manage.py rebuild_usage_rollup: rebuild the usage reports' daily rollup from the ledger
(after a repair of the ledger's rows; idempotent). scheduling/rollup.py."""

from django.core.management.base import BaseCommand

from scheduling import rollup


class Command(BaseCommand):
    help = "Rebuild the usage rollup (UsageDay, UsageWaitDay) from the usage ledger's closed attempts."

    def handle(self, *args, **options):
        counts = rollup.do_rebuild()
        self.stdout.write(
            f"rolled up {counts['attempts']} closed attempts: {counts['days']} day rows, {counts['waits']} wait rows"
        )
