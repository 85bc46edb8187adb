"""`mlq notifications`: the log of your notifications' deliveries (docs/notifications.md)."""

import click

from mlqueue.cli.app import AnyCase, client, main
from mlqueue.cli.output import emit, output_option

STATUSES = ("PENDING", "SENDING", "DELIVERED", "FAILED", "REFUSED")
EVENTS = ("started", "succeeded", "failed", "preempted", "cancelled", "early_stopped")  # scheduling/notify_spec.py
DELIVERY_COLUMNS = [
    ("CREATED", lambda d: d.created_at),
    ("JOB", lambda d: d.job),
    ("EVENT", lambda d: d.event),
    ("TO", lambda d: f"{d.channel} {d.target}"),
    ("STATUS", lambda d: d.status),
    ("ATTEMPTS", lambda d: d.attempts),
    (
        "LAST ANSWER",
        lambda d: " ".join(p for p in (f"HTTP {d.last_status_code}" if d.last_status_code else "", d.last_error) if p),
    ),
]


def reason_cell(delivery) -> str:
    """What the notification said happened: "RECLAIM: preempted for job 35 (...); lost ..."."""
    reason = delivery.payload.get("reason") if isinstance(delivery.payload, dict) else None
    if not isinstance(reason, dict):
        return ""
    return ": ".join(str(part) for part in (reason.get("code"), reason.get("message")) if part)


DELIVERY_WIDE = [
    ("NEXT TRY", lambda d: d.next_try_at if d.status == "PENDING" else ""),
    ("DELIVERED", lambda d: d.delivered_at),
    ("ID", lambda d: d.id),
    ("REASON", reason_cell),
]


@main.command()
@click.option("--job", type=int, help="one job's deliveries")
@click.option("--status", type=AnyCase(STATUSES))
@click.option("--event", type=AnyCase(EVENTS), help="one event's deliveries")
@output_option
@click.pass_context
def notifications(ctx, job, status, event, output):
    """Your notifications' deliveries, newest first: each one's attempts, last answer and next try.

    \b
    Example:
      mlq notifications
      mlq notifications --job 42 -o wide
      mlq notifications --status FAILED -o json
      mlq notifications --event failed
    """
    emit(
        client(ctx).deliveries(job=job, status=status.upper() if status else None, event=event),
        output,
        DELIVERY_COLUMNS,
        DELIVERY_WIDE,
    )
