"""Writes about notifications. `record_*` adds deliveries inside the transaction that changed the
job (an outbox: no state change commits without its deliveries, none is recorded for a change
that rolled back); `do_send` claims one with a conditional UPDATE, sends it and records how it
went; `send_due` is the sweep behind every Celery message (beat runs it).

Events, from the signals scheduling sends inside the transaction (scheduling/signals.py;
notifications/apps.py connects them):
1. a job's own state change (lifecycle.sync_job_state): RUNNING -> started (each attempt),
   SUCCEEDED, PREEMPTED, CANCELLED, EARLY_STOPPED; never FAILED, which awaits the leader's verdict;
2. the leader's verdict that a job failed for good (reconcile._end_failed) -> failed;
3. a group's state change (group_state.sync_group_state): its first start, and how it ended.
A group's children never notify: their group does, as one job; but a sweep's trial stopped
early tells its sweep's subscription (early_stopped), naming the trial."""

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.db.models import F, Subquery
from django.utils import timezone

from mlqueue.breaker import RedisBreaker
from notifications.models import Channel, Delivery, DeliveryStatus, Event, NotificationSettings, new_secret_ciphertext
from notifications.sending import Outcome, send_email, send_webhook
from scheduling import ledger, stop_requests
from scheduling.models import Job, RestartMode, StopReason, Task
from scheduling.states import TaskState
from teams.models import AuditEvent, EventKind

log = logging.getLogger(__name__)
S = TaskState
D = DeliveryStatus
# A job's own state -> its event (FAILED is the leader's verdict's: record_job_failed).
JOB_EVENTS = {
    S.RUNNING: Event.STARTED,
    S.SUCCEEDED: Event.SUCCEEDED,
    S.PREEMPTED: Event.PREEMPTED,
    S.CANCELLED: Event.CANCELLED,
    S.EARLY_STOPPED: Event.EARLY_STOPPED,
}
GROUP_EVENTS = {S.SUCCEEDED: Event.SUCCEEDED, S.FAILED: Event.FAILED, S.CANCELLED: Event.CANCELLED}
SENDABLE = (D.PENDING, D.SENDING)
GAVE_UP = "gave up after {attempts} attempts: {error}"
NEVER_REPORTED = "the last attempt's worker never reported back (it died, or outlasted its claim)"
SEND_CRASHED = "the attempt failed: {error}"
_broker = RedisBreaker("notification messages (Celery beat's sweep sends them)")


def record_job_state(
    sender, *, job_id: int, before: str, after: str, reason: str, message: str, now, parent_id=None, **_
) -> None:
    """A plain job's state changed (rule 1; signals.job_state_changed). `parent_id`, when the
    sender knows it (0: none): a group's child is told only as its group (but a trial stopped
    early), so its row is not read for nothing: a 2,000-element array's cancel read 2,000 (QA)."""
    event = JOB_EVENTS.get(after) if after != before else None
    if parent_id and event != Event.EARLY_STOPPED:
        return
    if event is not None:
        record_job_event(job_id, event=event, state=after, reason=reason, message=message, now=now)


def _cancel_request(job_id: int, *, group_said: str = "") -> tuple[str, str] | None:
    """Who cancelled the job and why, from the request's event: a running job's tasks end later,
    by the signal sent them ("rank 0 ended (signal SIGTERM)"), which is not what its owner asks.
    A group's (`group_said`: how its children ended) said only that (QA)."""
    request = (
        AuditEvent.objects.filter(job_id=job_id, kind=EventKind.CANCEL_REQUESTED)
        .order_by("-created_at", "-id")
        .values_list("actor_name", "message")
        .first()
    )
    if request is None:
        return None
    said = request[1] or f"cancelled by {request[0]}"  # as a pending job's cancel says it
    return "CANCELLED", f"{said}; {group_said}" if group_said else said


def _early_stop(job_id: int, *, exit_line: str) -> tuple[str, str] | None:
    """Why a trial was stopped early, in its rule's words ("val_loss: best 1.2333 by step 6 is
    worse than the median ..."), and its rank's exit line: the exit line alone said nothing of
    why (QA)."""
    found = stop_requests.requests_of(job_id, (StopReason.EARLY_STOPPED,)).first()
    if found is None:
        return None
    said = "; ".join(part for part in (found["request"]["message"], exit_line) if part)
    return StopReason.EARLY_STOPPED.value, said


# The stops that requeue a job (its tasks end PREEMPTED: scheduling/reports.py STOPPED_AS).
REQUEUEING_STOPS = (StopReason.PREEMPTED, StopReason.DRAIN, StopReason.REQUEUED)


def _stop_request(job_id: int, *, exit_line: str, now) -> tuple[str, str] | None:
    """Why the job was stopped and what that lost, as its timeline says it: the stop request's
    cause and sentence ("preempted for job 35 (P0, team research-vision): P2 yields to P0"), the
    work lost since the attempt's start or its checkpoint, and the rank's exit line. One query:
    the job's ranks (what they lost), each with the latest request (a subquery run once)."""
    latest = stop_requests.requests_of(job_id, REQUEUEING_STOPS)[:1]
    ranked = Task.objects.filter(job_id=job_id).annotate(stop=Subquery(latest))
    rows = list(ranked.values_list(*ledger.RANK_FIELDS, "stop"))
    request = rows[0][-1] if rows else None
    if not request:
        return None
    ranks = [ledger.ended_rank(row[:-1]) for row in rows]
    lost = ledger.lost_work(ranks, now=now) if ledger.attempt_lost_cause(ranks) else {}
    said = "; ".join(part for part in (request["message"], ledger.lost_work_text(lost), exit_line) if part)
    return stop_requests.stop_cause(request), said


def record_group_state(
    sender, *, job_id: int, before: str, after: str, first_start: bool, message: str, now, **_
) -> None:
    """A group's state changed (rule 3; signals.group_state_changed): it started for the first
    time, or it ended."""
    event = Event.STARTED if after == S.RUNNING and first_start else GROUP_EVENTS.get(after)
    if event is not None and after != before:
        record_job_event(job_id, event=event, state=after, reason="GROUP", message=message, now=now, group=True)


def record_job_failed(sender, *, job_id: int, reason: str, message: str, now, **_) -> None:
    """The leader's verdict: no retry or restart is left (rule 2; signals.job_failed)."""
    record_job_event(job_id, event=Event.FAILED, state=S.FAILED, reason=reason, message=message, now=now)


SUBSCRIPTION_FIELDS = (
    "name",
    "state",
    "parent_id",
    "notify",
    "on_preemption",
    "cancel_requested_at",
    "owner_id",
    "owner__email",
    "team__name",
    "owner__notification_settings__on",
    "owner__notification_settings__webhook",
    "owner__notification_settings__email",
)


def record_job_event(
    job_id: int, *, event: str, state: str, reason: str, message: str, now, group: bool = False
) -> list[int]:
    """Deliveries for this event of this job, per its subscription (its spec's `notify`, else
    its owner's defaults), sent once the transaction commits. One query when nobody listens.
    A group's child is told only as its group, except a sweep's trial stopped early: its sweep's
    subscription is told, once per trial, with the trial named."""
    row = Job.objects.filter(pk=job_id).values(*SUBSCRIPTION_FIELDS).first()
    if row is None:
        return []
    if row["parent_id"] is not None and not group:
        if event != Event.EARLY_STOPPED:
            return []
        return _record_trial_stopped(job_id, row, reason=reason, message=message, now=now)
    subscription = row["notify"] or _defaults(row)
    if not subscription or event not in subscription.get("on", ()):
        return []
    if event == Event.CANCELLED:  # only once someone listens: a query
        reason, message = _cancel_request(job_id, group_said=message if group else "") or (reason, message)
    elif event == Event.PREEMPTED and not group:  # likewise
        stop = _stop_request(job_id, exit_line=message, now=now)
        if row["cancel_requested_at"] is not None or (
            stop and stop[0] != StopReason.REQUEUED and row["on_preemption"] == RestartMode.FAIL
        ):
            return []  # it does not go back to the queue: told `cancelled`, or `failed` by the verdict (QA)
        reason, message = stop or (reason, message)
    payload = _payload(job_id, row, event=event, state=state, reason=reason, message=message, now=now)
    return _record(job_id, row, subscription, event=event, payload=payload, now=now)


def _record_trial_stopped(trial_id: int, trial: dict, *, reason: str, message: str, now) -> list[int]:
    sweep_id = trial["parent_id"]
    sweep = Job.objects.filter(pk=sweep_id).values(*SUBSCRIPTION_FIELDS).first()
    subscription = sweep and (sweep["notify"] or _defaults(sweep))
    if not subscription or Event.EARLY_STOPPED not in subscription.get("on", ()):
        return []
    reason, message = _early_stop(trial_id, exit_line=message) or (reason, message)
    event = Event.EARLY_STOPPED.value
    payload = _payload(sweep_id, sweep, event=event, state=sweep["state"], reason=reason, message=message, now=now)
    payload["trial"] = {
        "id": trial_id,
        "name": trial["name"],
        "state": S.EARLY_STOPPED,
        "url": f"{settings.MLQ_BASE_URL}/jobs/{trial_id}/",
    }
    return _record(sweep_id, sweep, subscription, event=event, payload=payload, now=now)


def _record(job_id: int, row: dict, subscription: dict, *, event: str, payload: dict, now) -> list[int]:
    targets = []
    if subscription.get("webhook"):
        targets.append((Channel.WEBHOOK, subscription["webhook"]))
    if subscription.get("email") and row["owner__email"]:
        targets.append((Channel.EMAIL, row["owner__email"]))
    rows = Delivery.objects.bulk_create(
        Delivery(
            user_id=row["owner_id"],
            job_id=job_id,
            job_ref=job_id,
            event=event,
            channel=channel,
            target=target,
            payload=payload,
            next_try_at=now,
            created_at=now,
        )
        for channel, target in targets
    )
    ids = [delivery.pk for delivery in rows]
    if ids:
        transaction.on_commit(lambda: enqueue(ids), robust=True)
    return ids


def _defaults(row: dict) -> dict | None:
    prefix = "owner__notification_settings__"
    if not row[prefix + "on"]:
        return None
    return {"on": row[prefix + "on"], "webhook": row[prefix + "webhook"], "email": row[prefix + "email"]}


def _payload(job_id: int, row: dict, *, event: str, state: str, reason: str, message: str, now) -> dict:
    return {
        "event": event,
        "time": now.isoformat(),
        "job": {
            "id": job_id,
            "name": row["name"],
            "team": row["team__name"],
            "state": state,
            "url": f"{settings.MLQ_BASE_URL}/jobs/{job_id}/",
        },
        "reason": {"code": reason, "message": message},
    }


def enqueue(delivery_ids: list[int], *, countdown: float = 0) -> None:
    """The fast path: a Celery message per delivery. While the broker fails it is not tried for a
    few seconds at a time; the sweep sends the deliveries anyway. Eager Celery (embedded mode)
    would send in the caller, often the scheduler's pass: a thread sends instead."""
    from notifications.tasks import send_notification

    if send_notification.app.conf.task_always_eager:
        send_in_background(delivery_ids, countdown=countdown)
        return
    if not _broker.allowed():
        return
    try:
        for delivery_id in delivery_ids:
            send_notification.apply_async(args=[delivery_id], countdown=countdown)
    except Exception as exc:  # the broker is down: the sweep is the guarantee
        _broker.failed(exc)
        log.warning("could not queue notifications %s (%s); the sweep will send them", delivery_ids, exc)
    else:
        _broker.worked()


def send_in_background(delivery_ids: list[int], *, countdown: float = 0) -> threading.Thread:
    """Send in a daemon thread, after `countdown` seconds: nobody waits on a receiver. Embedded
    mode runs no beat, so the thread then sweeps what else is due (a retry lost to a restart)."""
    thread = threading.Thread(
        target=_send_later, args=(list(delivery_ids), countdown), name="mlqueue-notifications", daemon=True
    )
    thread.start()
    return thread


def _send_later(delivery_ids: list[int], countdown: float) -> None:
    try:
        time.sleep(countdown)
        for delivery_id in delivery_ids:
            do_send(delivery_id)
        send_due()
    except Exception:  # a thread's failure must not pass unseen; the next event's sweep retries
        log.exception("sending notifications %s in the background failed", delivery_ids)
    finally:
        connections.close_all()  # this thread's own connection


def claim_lease() -> timedelta:
    """How long a claim holds a delivery: past it, a worker that died mid-send leaves it to the
    sweep. An attempt ends within MLQ_WEBHOOK_TIMEOUT_S (sending.py's deadline), plus the DNS
    lookup and the writes: three times that and ten seconds is ample."""
    return timedelta(seconds=3 * settings.MLQ_WEBHOOK_TIMEOUT_S + 10)


def do_send(delivery_id: int, *, now=None) -> str | None:
    """Claim the delivery if it is due and has attempts left (one conditional UPDATE: one worker
    sends it), send it, and record the outcome. Returns its new status; None when it was not
    ours to send. A due row whose attempts are spent (a claim that lapsed on its last attempt)
    is given up instead of sent again."""
    now = now or timezone.now()
    due = Delivery.objects.filter(pk=delivery_id, status__in=SENDABLE, next_try_at__lte=now)
    limit = settings.MLQ_NOTIFY_MAX_ATTEMPTS
    claimed = due.filter(attempts__lt=limit).update(
        status=D.SENDING, attempts=F("attempts") + 1, next_try_at=now + claim_lease()
    )
    if not claimed:
        return _give_up_spent(due, limit=limit)
    delivery = Delivery.objects.get(pk=delivery_id)
    try:
        outcome = _send(delivery)
    except Exception as exc:  # e.g. the secret's row: one attempt failed, retried like the others
        log.exception("sending delivery %s failed", delivery_id)
        outcome = Outcome(False, error=SEND_CRASHED.format(error=str(exc) or type(exc).__name__))
    return do_record_outcome(delivery, outcome, now=timezone.now())


def _give_up_spent(due, *, limit: int) -> str | None:
    spent = due.filter(attempts__gte=limit).values_list("attempts", flat=True).first()
    if spent is None:
        return None
    error = GAVE_UP.format(attempts=spent, error=NEVER_REPORTED)
    gave_up = due.filter(attempts=spent).update(status=D.FAILED, next_try_at=None, last_error=error)
    return D.FAILED if gave_up else None


def _send(delivery: Delivery) -> Outcome:
    if delivery.channel == Channel.EMAIL:
        return send_email(address=delivery.target, payload=delivery.payload)
    return send_webhook(
        url=delivery.target,
        payload=delivery.payload,
        delivery_id=str(delivery.uuid),
        event=delivery.event,
        secret=secret_of(delivery.user_id),
    )


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed: BASE, 2 x BASE, ... at most MAX."""
    return min(settings.MLQ_NOTIFY_RETRY_BASE_S * 2 ** (attempts - 1), settings.MLQ_NOTIFY_RETRY_MAX_S)


def do_record_outcome(delivery: Delivery, outcome: Outcome, *, now) -> str | None:
    """Delivered, refused, tried again later, or given up: written only while the claim is still
    this attempt's (a claim that lapsed was taken by the sweep, whose outcome counts)."""
    fields = {"last_status_code": outcome.status_code, "last_error": outcome.error[:2000]}
    retry_in = None
    if outcome.delivered:
        fields.update(status=D.DELIVERED, delivered_at=now, next_try_at=None, last_error="")
    elif outcome.refused:
        fields.update(status=D.REFUSED, next_try_at=None)
    elif delivery.attempts >= settings.MLQ_NOTIFY_MAX_ATTEMPTS:
        fields.update(
            status=D.FAILED,
            next_try_at=None,
            last_error=GAVE_UP.format(attempts=delivery.attempts, error=outcome.error)[:2000],
        )
    else:
        retry_in = backoff(delivery.attempts)
        fields.update(status=D.PENDING, next_try_at=now + timedelta(seconds=retry_in))
    mine = Delivery.objects.filter(pk=delivery.pk, status=D.SENDING, attempts=delivery.attempts).update(**fields)
    if not mine:
        return _delivered_late(delivery, fields) if outcome.delivered else None
    if retry_in is not None:
        enqueue([delivery.pk], countdown=retry_in)
    return fields["status"]


def _delivered_late(delivery: Delivery, fields: dict) -> str | None:
    """A 2xx after this attempt's claim lapsed: the receiver has it, so the delivery is DELIVERED
    unless it already ended (no further copy goes out)."""
    late = Delivery.objects.filter(pk=delivery.pk, status__in=SENDABLE).update(**fields)
    return D.DELIVERED if late else None


SWEEP_BATCH = 100


def send_due(*, now=None) -> dict[str, int]:
    """Send every delivery that is due (new ones whose message was lost, retries, claims that
    lapsed), oldest first, a batch at a time; returns how many ended in each status."""
    now = now or timezone.now()
    due = Delivery.objects.filter(status__in=SENDABLE, next_try_at__lte=now).order_by("next_try_at", "id")
    counts: dict[str, int] = {}
    for delivery_id in list(due.values_list("id", flat=True)[:SWEEP_BATCH]):
        try:
            status = do_send(delivery_id, now=now)
        except Exception:  # one delivery's failure (a database error) stops none of the others
            log.exception("the sweep could not send delivery %s", delivery_id)
            continue
        if status is not None:
            counts[status] = counts.get(status, 0) + 1
    return counts


def settings_of(user) -> NotificationSettings:
    return _settings(user_id=user.pk)


def secret_of(user_id: int) -> str:
    return _settings(user_id=user_id).secret


def _settings(*, user_id: int) -> NotificationSettings:
    """The user's row, made on first use. A secret no configured key reads any more (its key was
    retired) is replaced: the user sees the new one on the account page."""
    found, _ = NotificationSettings.objects.get_or_create(user_id=user_id)
    if found.secret is None:
        log.warning("the webhook secret of user %s is unreadable with the configured keys; made a new one", user_id)
        return _rotate(found)
    return found


def do_update_settings(*, user, on: list[str], webhook: str, email: bool) -> NotificationSettings:
    now = timezone.now()
    found = settings_of(user)
    NotificationSettings.objects.filter(pk=found.pk).update(on=on, webhook=webhook, email=email, updated_at=now)
    found.refresh_from_db()
    return found


def do_rotate_secret(*, user) -> NotificationSettings:
    """A new signing secret, at once: deliveries sent from now on are signed with it."""
    return _rotate(settings_of(user))


def _rotate(found: NotificationSettings) -> NotificationSettings:
    now = timezone.now()
    NotificationSettings.objects.filter(pk=found.pk).update(
        secret_ciphertext=new_secret_ciphertext(), secret_rotated_at=now, updated_at=now
    )
    found.refresh_from_db()
    return found
