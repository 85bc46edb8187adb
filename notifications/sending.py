"""Sending one delivery: the webhook (httpx, to the checked address, signed) or the email
(Django's backend). No database here: services.py claims the row and records the outcome."""

import hashlib
import hmac
import json
import time
from dataclasses import dataclass

import httpcore
from django.conf import settings
from django.core.mail import send_mail

from mlqueue.webhook_addresses import WebhookRefused, check_destination, system_resolve
from notifications.deadline import Answer, post

SIGNATURE_HEADER = "X-MLQ-Signature"
TIMESTAMP_HEADER = "X-MLQ-Timestamp"
DELIVERY_HEADER = "X-MLQ-Delivery"
EVENT_HEADER = "X-MLQ-Event"
USER_AGENT = "mlqueue-webhooks/1"
NOT_2XX = "the receiver answered HTTP {code}"
REDIRECTED = "the receiver answered HTTP {code} (a redirect to {location!r}; redirects are not followed)"
UNREACHABLE = "could not reach {host}: {error}"
# Connected, and then the answer did not come in time (QA: a slow receiver, which had every
# request, read "could not reach").
NO_ANSWER = "connected to {host}; {error}"
REDIRECT_CODES = (301, 302, 303, 307, 308)
CRASHED = "the attempt failed: {error}"


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    status_code: int | None = None
    error: str = ""
    refused: bool = False  # the destination is not allowed: no retry


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over "<timestamp>.<body>" with the user's secret, as the header carries it."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_body(payload: dict, delivery_id: str) -> bytes:
    return json.dumps({"delivery_id": delivery_id, **payload}, separators=(",", ":"), sort_keys=True).encode()


def send_webhook(
    *, url: str, payload: dict, delivery_id: str, event: str, secret: str, resolve=system_resolve
) -> Outcome:
    """POST the signed payload to the address `url`'s host was checked to resolve to. Whatever
    goes wrong is a failed attempt, told in the outcome: nothing here raises."""
    try:
        return _send_webhook(
            url=url, payload=payload, delivery_id=delivery_id, event=event, secret=secret, resolve=resolve
        )
    except Exception as exc:  # a URL the client refuses, an encoding error: retried, then given up
        return Outcome(False, error=CRASHED.format(error=_said_error(exc)))


def _send_webhook(*, url: str, payload: dict, delivery_id: str, event: str, secret: str, resolve) -> Outcome:
    try:
        destination = check_destination(
            url,
            allowed_hosts=settings.MLQ_WEBHOOK_ALLOWED_HOSTS,
            allowed_networks=settings.MLQ_WEBHOOK_ALLOWED_NETWORKS,
            resolve=resolve,
        )
    except WebhookRefused as exc:
        return Outcome(False, error=str(exc), refused=exc.final)
    endpoint = destination.endpoint
    body = webhook_body(payload, delivery_id)
    stamp = str(int(time.time()))
    headers = {
        "Host": endpoint.host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event,
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: signature(secret, stamp, body),
    }
    try:
        # The TLS name is the host's, though the connection goes to the checked address.
        answer = post(
            endpoint.url_for(destination.address),
            body=body,
            headers=headers,
            seconds=settings.MLQ_WEBHOOK_TIMEOUT_S,
            sni_hostname=endpoint.host if endpoint.scheme == "https" else None,
        )
    except Exception as exc:  # refused, reset, timed out, past the deadline, a TLS failure
        said = NO_ANSWER if isinstance(exc, httpcore.ReadTimeout) else UNREACHABLE
        return Outcome(False, error=said.format(host=endpoint.host, error=_said_error(exc)))
    return _outcome(answer)


def _said_error(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _outcome(answer: Answer) -> Outcome:
    """Only the status counts: the receiver's body is never read."""
    code = answer.status
    if 200 <= code < 300:
        return Outcome(True, status_code=code)
    if code in REDIRECT_CODES:
        return Outcome(False, status_code=code, error=REDIRECTED.format(code=code, location=answer.location[:200]))
    return Outcome(False, status_code=code, error=NOT_2XX.format(code=code))


def _said(event: str) -> str:
    return event.replace("_", " ")


def email_subject(payload: dict) -> str:
    job, trial = payload["job"], payload.get("trial")
    said = f"trial {trial['id']} {_said(payload['event'])}" if trial else _said(payload["event"])
    return f"[mlqueue] job {job['id']} {job['name']} {said}"


def email_text(payload: dict) -> str:
    job, reason = payload["job"], payload["reason"]
    lines = [
        f"Job {job['id']} ({job['name']}, team {job['team']}) {_said(payload['event'])} at {payload['time']}.",
        f"State: {job['state']}",
    ]
    if payload.get("trial"):
        trial = payload["trial"]
        lines.append(f"Trial: {trial['id']} ({trial['name']}), {trial['state']}: {trial['url']}")
    if reason["code"] or reason["message"]:
        lines.append(f"Reason: {': '.join(part for part in (reason['code'], reason['message']) if part)}")
    lines += [
        "",
        job["url"],
        "",
        "You get this because of the job's notify block or your defaults:",
        f"{settings.MLQ_BASE_URL}/account/notifications/",
    ]
    return "\n".join(lines)


def send_email(*, address: str, payload: dict) -> Outcome:
    try:
        send_mail(email_subject(payload), email_text(payload), settings.DEFAULT_FROM_EMAIL, [address])
    except Exception as exc:  # any backend's failure (SMTP, a socket) is a failed attempt, retried
        return Outcome(False, error=f"the mail backend failed: {exc}")
    return Outcome(True)
