"""manage.py export_trace --from 2026-04-01 --to 2026-04-08 [--out FILE]

The usage ledger's jobs submitted in [from, to) as a trace in the generic format
`python -m bench.replay --trace FILE` reads (scheduling/sim/trace.py): one row per job, submit
times in seconds from `--from`. What a job's duration is, and which jobs are left out:
scheduling/sim/history.py (docs/what-if.md)."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from scheduling.history import export_window
from scheduling.sim.trace import write_generic

MOMENT_HELP = "YYYY-MM-DD (midnight) or an ISO 8601 date-time; UTC unless it names an offset"


def parse_moment(option: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(f"{option} {text!r}: expected {MOMENT_HELP}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Write the usage ledger's jobs submitted in a window as a trace for bench/replay.py."

    def add_arguments(self, parser):
        parser.add_argument("--from", dest="start", required=True, help=f"first submit time kept: {MOMENT_HELP}")
        parser.add_argument("--to", dest="end", required=True, help="submit times before this are kept")
        parser.add_argument("--out", help="the CSV file to write (default: standard output)")

    def handle(self, *args, start, end, out, **options):
        start, end = parse_moment("--from", start), parse_moment("--to", end)
        if end <= start:
            raise CommandError(f"--to {end.isoformat()} must be after --from {start.isoformat()}")
        export = export_window(start, end, as_of=min(timezone.now(), end))
        try:
            handle = open(out, "w", newline="") if out else self.stdout
        except OSError as exc:
            raise CommandError(f"--out {out}: {exc.strerror}") from None
        try:
            written = write_generic(export.jobs, handle)
        finally:
            if out:
                handle.close()
        left_out = ", ".join(f"{count} {why.replace('_', ' ')}" for why, count in sorted(export.skipped.items()))
        self.stderr.write(
            f"{written} jobs submitted from {start.isoformat()} to {end.isoformat()}"
            + (f" (left out: {left_out})" if left_out else "")
            + (f" -> {out}" if out else "")
        )
