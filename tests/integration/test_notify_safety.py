"""Notifications that must not hurt anyone else: a bad URL or a slow receiver costs one failed
attempt of one delivery (never the sweep, never the scheduler's pass), a claim that lapsed keeps
the attempts cap, and the `notify` blocks that were accepted but never told are fixed."""

import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from mlqueue.celery import app as celery_app
from mlqueue.webhook_addresses import BAD_CHARACTER
from notifications import services
from notifications.models import Delivery
from notifications.sending import Outcome
from notifications.services import GAVE_UP, NEVER_REPORTED, do_record_outcome, send_due
from scheduling import reports
from scheduling.leader.worker import run_pass
from scheduling.models import Job
from scheduling.pipeline_spec import STEP_NOTIFY
from tests.conftest import make_spec
from tests.integration.test_early_stopping import SWEEP, report
from tests.integration.test_early_stopping import start as start_trial
from tests.integration.test_groups import children
from tests.integration.test_groups import submit as submit_group
from tests.integration.test_notifications import Receiver, receiver, start, submit, webhooks_to_localhost  # noqa: F401
from tests.integration.test_scheduler_pass import run_all_ranks

BAD_URL = "http://127.0.0.1:81\t10/a\r\nb\x1b[2J"


def test_a_webhook_url_with_control_characters_is_a_400_naming_the_field(api):
    response = api("alice").post(
        "/api/v1/jobs",
        make_spec(resources={"gpu_count": 8}, notify={"on": ["succeeded"], "webhook": BAD_URL}),
        format="json",
    )
    assert response.status_code == 400
    message = BAD_CHARACTER.format(char="'\\t'", code="U+0009")
    assert response.json()["fields"] == {"notify.webhook": [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize("char", ["\x07", "\x1b"])
def test_the_account_page_refuses_control_characters(logged_in, char):
    bad = logged_in("alice").post("/account/notifications/", {"on": ["started"], "webhook": f"http://127.0.0.1/{char}"})
    assert bad.status_code == 400
    assert b"a control character or white space" in bad.content


def test_one_bad_delivery_does_not_stop_the_sweep(api, receiver, monkeypatch):  # noqa: F811
    """A URL stored before it was checked is refused at send; a crash while sending (here the
    secret's lookup) is a failed attempt of that delivery only; the others go out."""
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    good = Delivery.objects.get(job_ref=job.pk)
    stored_bad = Delivery.objects.create(**_copy(good, target=BAD_URL))
    crashing = Delivery.objects.create(**_copy(good, user_id=_other_user(api)))
    real_secret_of = services.secret_of

    def secret_of(user_id):
        if user_id == crashing.user_id:
            raise RuntimeError("no secret today")
        return real_secret_of(user_id)

    monkeypatch.setattr(services, "secret_of", secret_of)
    assert send_due() == {"DELIVERED": 1, "REFUSED": 1, "PENDING": 1}
    crashing.refresh_from_db()
    assert (crashing.status, crashing.attempts, crashing.last_error) == (
        "PENDING",
        1,
        "the attempt failed: no secret today",
    )
    stored_bad.refresh_from_db()
    assert stored_bad.status == "REFUSED" and "control character" in stored_bad.last_error
    assert len(receiver.received) == 1


def _copy(delivery: Delivery, **changes) -> dict:
    fields = ("user_id", "job_id", "job_ref", "event", "channel", "target", "payload", "next_try_at")
    return {**{name: getattr(delivery, name) for name in fields}, **changes}


def _other_user(api) -> int:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.exclude(username="alice").order_by("pk").first().pk


def test_a_lapsed_claim_on_the_last_attempt_is_given_up_not_sent_again(api, receiver, settings):  # noqa: F811
    settings.MLQ_NOTIFY_MAX_ATTEMPTS = 4
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    delivery = Delivery.objects.get(job_ref=job.pk)
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk).update(status="SENDING", attempts=4, next_try_at=now)
    assert send_due(now=now) == {"FAILED": 1}
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_try_at) == ("FAILED", 4, None)
    assert delivery.last_error == GAVE_UP.format(attempts=4, error=NEVER_REPORTED)
    assert receiver.received == []


def test_a_2xx_after_the_claim_lapsed_still_delivers(api, receiver):  # noqa: F811
    """The first worker's claim lapsed and the sweep's retry failed: the first worker's 200 then
    ends the delivery, with no further copy sent."""
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    delivery = Delivery.objects.get(job_ref=job.pk)
    Delivery.objects.filter(pk=delivery.pk).update(status="SENDING", attempts=1)
    first = Delivery.objects.get(pk=delivery.pk)  # the first worker's view of its claim
    Delivery.objects.filter(pk=delivery.pk).update(status="PENDING", attempts=2)  # the sweep's attempt failed
    assert do_record_outcome(first, Outcome(True, status_code=200), now=timezone.now()) == "DELIVERED"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("DELIVERED", 2, 200)
    assert send_due(now=timezone.now() + timedelta(days=1)) == {}


class SlowReceiver(Receiver):
    def __init__(self, delay: float):
        super().__init__()
        self.server.shutdown()
        self.server.server_close()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                received.append(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/slow"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.django_db(transaction=True)
def test_eager_celery_never_sends_in_the_caller(api, monkeypatch, settings):
    """Embedded mode: the commit that records a delivery returns at once; a thread sends it."""
    settings.MLQ_WEBHOOK_TIMEOUT_S = 5.0
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    slow = SlowReceiver(delay=1.5)
    try:
        job = submit(api, notify={"on": ["started"], "webhook": slow.url})
        began = time.monotonic()
        start(job)  # its transaction commits: the send is queued
        assert time.monotonic() - began < 1.0
        deadline = time.monotonic() + 10
        while Delivery.objects.get(job_ref=job.pk).status != "DELIVERED" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert Delivery.objects.get(job_ref=job.pk).status == "DELIVERED"
        assert len(slow.received) == 1
    finally:
        slow.close()


def test_notify_on_a_pipeline_step_is_a_400_naming_the_step(api):
    step = {"name": "a", "command": ["python", "a.py"], "notify": {"webhook": "http://127.0.0.1/x"}}
    response = api("alice").post(
        "/api/v1/jobs", make_spec(client_job_id=None, pipeline={"steps": [step]}), format="json"
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {"pipeline.steps[0].notify": [STEP_NOTIFY]}


def test_a_sweep_is_told_of_each_trial_stopped_early(api, leader, receiver):  # noqa: F811
    parent = submit_group(api, sweep=SWEEP, notify={"on": ["early_stopped"], "webhook": receiver.url})
    run_pass(epoch=leader)
    first, second = (start_trial(kid) for kid in children(parent)[:2])
    report(first, 0.5, 0.4, 0.35)
    report(second, 1.1, 0.95, 0.9)
    run_all_ranks(first, exit_code=0)
    run_pass(epoch=leader)
    third = start_trial(children(parent)[2])
    report(third, 0.45, 0.4, 0.38)
    run_pass(epoch=leader)  # the worse trial is asked to stop
    worse = children(parent)[1]
    task = worse.tasks.get()
    reports.do_report_exited(job_id=worse.pk, rank=0, attempt=task.attempt, exit_code=143)
    assert Job.objects.get(pk=worse.pk).state == "EARLY_STOPPED"
    (delivery,) = Delivery.objects.all()
    assert (delivery.job_ref, delivery.event) == (parent.pk, "early_stopped")
    assert delivery.payload["trial"]["id"] == worse.pk
    assert delivery.payload["trial"]["name"] == worse.name
    assert send_due() == {"DELIVERED": 1}
