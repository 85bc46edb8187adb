"""Notifications end to end on Postgres, with a real HTTP receiver on 127.0.0.1 (allowed by this
test's settings): the job's state changes record deliveries in their own transaction, a
delivery is signed (checked here with hmac, not with our own helper), retried after a 500 with
the same delivery id, refused for a host not allowed (at submit, and again at send time), and
the log is each user's own."""

import hashlib
import hmac
import ipaddress
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import transaction
from django.utils import timezone

from mlqueue.celery import app as celery_app
from mlqueue.webhook_addresses import ADDRESS_REFUSED, HOST_NOT_ALLOWED
from notifications import services
from notifications.models import Delivery, NotificationSettings
from notifications.sending import Outcome, send_webhook
from notifications.services import backoff, do_send, send_due
from scheduling import lifecycle, nodes, reports
from scheduling.core.decisions import Preemption, PreemptionReason
from scheduling.job_control import do_requeue_job
from scheduling.leader.apply import _preempt
from scheduling.leader.reconcile import do_settle
from scheduling.models import Job, Node, Task
from scheduling.models import TaskState as S
from scheduling.notify_spec import NO_EMAIL_ADDRESS, NOWHERE
from tests.conftest import make_spec
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)

NOT_AN_EVENT = (
    '"{value}" is not a valid choice (one of started, succeeded, failed, preempted, cancelled, early_stopped).'
)


class Receiver:
    """An HTTP server on 127.0.0.1 that answers each POST with the next scripted status (200
    once the script runs out) and keeps what it was sent."""

    def __init__(self, statuses=(), location=None):
        self.statuses = list(statuses)
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_header("Content-Length", "0")
                if location:
                    self.send_header("Location", location)  # as most servers write it, capitalised
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/mlqueue"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


@pytest.fixture(autouse=True)
def webhooks_to_localhost(settings):
    """This test's admin allows webhooks to 127.0.0.1 only (loopback is refused otherwise)."""
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.MLQ_WEBHOOK_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.1/32")]
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.MLQ_BASE_URL = "https://mlqueue.example.com"


def submit(api, user="alice", **overrides) -> Job:
    spec = make_spec(resources={"gpu_count": 8}, **{"client_job_id": None, **overrides})
    response = api(user).post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def start(job: Job) -> None:
    node = Node.objects.filter(gpu_type="H100").order_by("name").first()
    lifecycle.transition_gang(
        job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank={0: {"node": node, "gpu_indices": list(range(8))}}
    )
    lifecycle.transition_gang(
        job.pk, from_state=S.ASSIGNED, to_state=S.RUNNING, reason="STARTED", message="rank 0 started"
    )


def end(job: Job, state: str, reason: str = "EXITED", message: str = "rank 0 ended (exit code 0)", **fields) -> None:
    lifecycle.transition_gang(job.pk, from_state=S.RUNNING, to_state=state, reason=reason, message=message, **fields)


def secret_of(username: str) -> str:
    return NotificationSettings.objects.get(user__username=username).secret


def verify(secret: str, request: dict) -> dict:
    """What a receiver does: check the signature over "<timestamp>.<body>", then read the body."""
    headers = request["headers"]
    signed = headers["X-MLQ-Timestamp"].encode() + b"." + request["body"]
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-MLQ-Signature"], expected)
    return json.loads(request["body"])


def test_a_webhook_is_delivered_signed_to_a_receiver_on_localhost(api, receiver):
    job = submit(api, notify={"on": ["started", "succeeded"], "webhook": receiver.url})
    assert job.notify == {"on": ["started", "succeeded"], "webhook": receiver.url}
    start(job)
    end(job, S.SUCCEEDED)

    deliveries = list(Delivery.objects.filter(job_ref=job.pk).order_by("id"))
    assert [(d.event, d.channel, d.status) for d in deliveries] == [
        ("started", "webhook", "PENDING"),
        ("succeeded", "webhook", "PENDING"),
    ]
    assert send_due() == {"DELIVERED": 2}

    started, succeeded = (verify(secret_of("alice"), request) for request in receiver.received)
    assert receiver.received[0]["path"] == "/hooks/mlqueue"
    assert receiver.received[0]["headers"]["X-MLQ-Event"] == "started"
    assert receiver.received[1]["headers"]["X-MLQ-Delivery"] == str(deliveries[1].uuid)
    assert succeeded == {
        "delivery_id": str(deliveries[1].uuid),
        "event": "succeeded",
        "time": succeeded["time"],
        "job": {
            "id": job.pk,
            "name": job.name,
            "team": "research-foundation-models",
            "state": "SUCCEEDED",
            "url": f"https://mlqueue.example.com/jobs/{job.pk}/",
        },
        "reason": {"code": "EXITED", "message": "rank 0 ended (exit code 0)"},
    }
    assert started["reason"] == {"code": "STARTED", "message": "rank 0 started"}
    row = Delivery.objects.get(pk=deliveries[1].pk)
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == ("DELIVERED", 1, 200, "")


def test_a_signature_made_with_another_secret_does_not_verify(api, receiver):
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    old = api("alice").get("/api/v1/notifications/settings").json()["secret"]
    rotated = api("alice").post("/api/v1/notifications/settings/rotate-secret")
    assert rotated.status_code == 200, rotated.content
    send_due()
    verify(secret_of("alice"), receiver.received[0])  # signed with the secret in force when sent
    with pytest.raises(AssertionError):
        verify(old, receiver.received[0])


def test_a_delivery_answered_500_is_retried_with_back_off_and_the_same_id(api, settings):
    settings.MLQ_NOTIFY_RETRY_BASE_S = 30
    failing = Receiver(statuses=[500, 503])
    try:
        job = submit(api, notify={"on": ["started"], "webhook": failing.url})
        start(job)
        delivery = Delivery.objects.get(job_ref=job.pk)
        assert do_send(delivery.pk) == "PENDING"
        delivery.refresh_from_db()
        assert (delivery.attempts, delivery.last_status_code, delivery.last_error) == (
            1,
            500,
            "the receiver answered HTTP 500",
        )
        first_due = delivery.next_try_at
        assert do_send(delivery.pk, now=first_due - timedelta(seconds=1)) is None  # not due yet: nobody sends it
        assert send_due(now=first_due - timedelta(seconds=1)) == {}
        assert do_send(delivery.pk, now=first_due) == "PENDING"
        delivery.refresh_from_db()
        assert delivery.last_status_code == 503
        assert delivery.next_try_at - timezone.now() > timedelta(seconds=backoff(2) - 5)  # 60 s: twice the first
        assert send_due(now=delivery.next_try_at) == {"DELIVERED": 1}
        delivery.refresh_from_db()
        assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("DELIVERED", 3, 200)
        ids = {request["headers"]["X-MLQ-Delivery"] for request in failing.received}
        assert ids == {str(delivery.uuid)} and len(failing.received) == 3
    finally:
        failing.close()


def test_back_off_doubles_up_to_its_cap(settings):
    settings.MLQ_NOTIFY_RETRY_BASE_S = 30
    settings.MLQ_NOTIFY_RETRY_MAX_S = 3600
    assert [backoff(n) for n in range(1, 10)] == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]


def test_it_gives_up_after_the_last_attempt(api, settings):
    settings.MLQ_NOTIFY_MAX_ATTEMPTS = 2
    failing = Receiver(statuses=[500, 500, 500])
    try:
        job = submit(api, notify={"on": ["started"], "webhook": failing.url})
        start(job)
        delivery = Delivery.objects.get(job_ref=job.pk)
        do_send(delivery.pk)
        assert do_send(delivery.pk, now=timezone.now() + timedelta(hours=2)) == "FAILED"
        delivery.refresh_from_db()
        assert (delivery.status, delivery.next_try_at) == ("FAILED", None)
        assert delivery.last_error == "gave up after 2 attempts: the receiver answered HTTP 500"
        assert send_due(now=timezone.now() + timedelta(days=1)) == {}
    finally:
        failing.close()


def test_a_delivery_is_sent_by_one_worker(api, receiver):
    """Two workers given the same delivery (a duplicated message, the sweep): one claim wins."""
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    delivery = Delivery.objects.get(job_ref=job.pk)
    assert do_send(delivery.pk) == "DELIVERED"
    assert do_send(delivery.pk) is None
    assert send_due() == {}
    assert len(receiver.received) == 1


def test_a_claim_that_lapsed_is_taken_by_the_sweep(api, receiver):
    """A worker that died mid-send leaves the row SENDING; past its claim the sweep sends it."""
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    delivery = Delivery.objects.get(job_ref=job.pk)
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk).update(
        status="SENDING", attempts=1, next_try_at=now + timedelta(seconds=25)
    )
    assert send_due(now=now) == {}
    assert send_due(now=now + timedelta(seconds=25)) == {"DELIVERED": 1}
    delivery.refresh_from_db()
    assert delivery.attempts == 2


def test_a_webhook_to_a_host_not_allowed_is_refused_at_submit(api):
    response = api("alice").post(
        "/api/v1/jobs",
        make_spec(resources={"gpu_count": 8}, notify={"webhook": "https://hooks.example.com/x"}),
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {"notify.webhook": [HOST_NOT_ALLOWED.format(host="hooks.example.com")]}
    assert not Job.objects.exists()


def test_a_webhook_to_a_host_no_longer_allowed_is_refused_at_send_time(api, receiver, settings):
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    settings.MLQ_WEBHOOK_ALLOWED_NETWORKS = []  # the admin takes 127.0.0.1 back
    delivery = Delivery.objects.get(job_ref=job.pk)
    assert do_send(delivery.pk) == "REFUSED"
    delivery.refresh_from_db()
    assert delivery.last_error == ADDRESS_REFUSED.format(host="127.0.0.1", address="127.0.0.1", kind="loopback")
    assert (delivery.next_try_at, receiver.received) == (None, [])
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = []
    job = submit(api, client_job_id="other", notify={"on": ["started"], "email": True})  # email needs no host
    assert job.notify == {"on": ["started"], "email": True}


@pytest.mark.parametrize(
    ("notify", "field", "message"),
    [
        ({"on": ["started", "succeeded", "exploded"]}, "notify.on.2", NOT_AN_EVENT.format(value="exploded")),
        ({"on": ["started", "started"], "email": True}, "notify.on.1", "'started' is listed twice"),
        ({"on": [], "email": True}, "notify.on", "This list may not be empty."),
        ({"on": "started", "email": True}, "notify.on", 'Expected a list of items but got type "str".'),
        ({"on": ["failed"]}, "notify.webhook", NOWHERE),
        ({"email": "yes"}, "notify.email", "must be true or false, not the string 'yes'."),
        (
            {"webhook": "http://2130706433/x"},
            "notify.webhook",
            "'2130706433' is an IP address written in an unusual form; write it as 127.0.0.1",
        ),
        ({"webhook": "http://127.0.0.2:9/x"}, "notify.webhook", HOST_NOT_ALLOWED.format(host="127.0.0.2")),
        ({"webhook": "ftp://127.0.0.1/x"}, "notify.webhook", "must be an http:// or https:// URL"),
        ({"webhook": "http://127.0.0.1/x", "sms": True}, "notify.sms", "unknown field."),
        ("all", "notify", None),
    ],
)
def test_bad_notify_blocks_are_400s_naming_the_field(api, notify, field, message):
    response = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}, notify=notify), format="json")
    assert response.status_code == 400, response.json()
    fields = response.json()["fields"]
    assert field in fields, fields
    if message is not None:
        assert fields[field] == [message]
    assert not Job.objects.exists()


def test_email_goes_through_djangos_backend(api):
    job = submit(api, notify={"on": ["succeeded", "failed"], "email": True})
    start(job)
    end(job, S.SUCCEEDED)
    assert send_due() == {"DELIVERED": 1}
    (message,) = mail.outbox
    assert message.to == ["alice@example.com"]
    assert message.subject == f"[mlqueue] job {job.pk} {job.name} succeeded"
    assert f"https://mlqueue.example.com/jobs/{job.pk}/" in message.body


def test_defaults_apply_to_jobs_without_a_notify_block(api, receiver):
    response = api("bob").put(
        "/api/v1/notifications/settings", {"on": ["preempted", "failed"], "webhook": receiver.url}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["on"] == ["failed", "preempted"]  # the documented order
    job = submit(api, "bob", team="production-ranking", restart_policy={"max_retries": 0, "max_restarts": 0})
    own = submit(api, "bob", client_job_id="own", team="production-ranking", notify={"on": ["started"], "email": True})
    start(job)
    start(own)
    end(job, S.PREEMPTED, reason="PREEMPTED", message="preempted by job 9 (P0)")
    assert [(d.job_ref, d.event, d.channel) for d in Delivery.objects.order_by("id")] == [
        (own.pk, "started", "email"),  # its own block wins over the defaults
        (job.pk, "preempted", "webhook"),
    ]


def test_failed_is_told_once_the_leader_gives_up(api, leader, receiver):
    """An application failure with a retry left is no 'failed' yet; the last one is."""
    job = submit(api, notify={"on": ["failed"], "webhook": receiver.url}, restart_policy={"max_retries": 1})
    for attempt in (1, 2):
        start(job)
        end(job, S.FAILED, message="rank 0 ended (exit code 3)", exit_code=3, failure_class="APP")
        do_settle(job.pk, epoch=leader, now=timezone.now() + timedelta(hours=attempt))
        Job.objects.filter(pk=job.pk).update(not_before=None)
        assert Delivery.objects.filter(job_ref=job.pk).count() == attempt - 1
    (delivery,) = Delivery.objects.filter(job_ref=job.pk)
    assert (delivery.event, delivery.payload["job"]["state"], delivery.payload["reason"]["code"]) == (
        "failed",
        "FAILED",
        "APP",
    )


def test_a_cancel_is_told_and_nothing_is_recorded_without_a_subscription(api, receiver):
    job = submit(api, notify={"on": ["cancelled"], "webhook": receiver.url})
    quiet = submit(api, client_job_id="quiet")
    for each in (job, quiet):
        assert api("alice").post(f"/api/v1/jobs/{each.pk}/cancel").status_code in (200, 202)
    assert [(d.job_ref, d.event) for d in Delivery.objects.all()] == [(job.pk, "cancelled")]


def test_a_running_jobs_cancel_says_why_it_was_cancelled_not_the_signal(api, receiver):
    """A running job ends CANCELLED when its tasks exit on the agent's SIGTERM; the notification
    carries the owner's reason, as for a pending job, not "rank 0 ended (signal SIGTERM)"."""
    job = submit(api, notify={"on": ["cancelled"], "webhook": receiver.url})
    start(job)
    cancel = api("alice").post(f"/api/v1/jobs/{job.pk}/cancel", {"reason": "wrong learning rate"}, format="json")
    assert cancel.status_code in (200, 202), cancel.json()
    end(job, S.CANCELLED, reason="EXITED", message="rank 0 ended (signal SIGTERM)")
    (delivery,) = Delivery.objects.filter(job_ref=job.pk)
    assert delivery.payload["reason"] == {"code": "CANCELLED", "message": "wrong learning rate"}


PRIORITY = "preempted for job {urgent} (P0, team research-vision): P2 yields to P0"
RECLAIM = "preempted for job {urgent} (P1, team research-vision): reclaiming capacity its team is guaranteed"


def _preempt_for(reason: PreemptionReason, message: str):
    def preempt(job: Job, urgent: Job, *, epoch: int):
        decision = Preemption(job.pk, urgent.pk, reason, message.format(urgent=urgent.pk))
        assert _preempt(decision, epoch=epoch, now=timezone.now())

    return preempt


def _drain(job: Job, urgent: Job, *, epoch: int):
    node = job.tasks.get().node
    assert nodes.do_drain(node=node, user=get_user_model().objects.get(username="ops"), reason="replace the NIC") == 1


def _gpu_fault(job: Job, urgent: Job, *, epoch: int):
    assert nodes.do_exclude_gpus(node=job.tasks.get().node, excluded={3: "Xid 79"}, now=timezone.now()) == 1


def _requeue(job: Job, urgent: Job, *, epoch: int):
    do_requeue_job(user=get_user_model().objects.get(username="alice"), job=Job.objects.get(pk=job.pk))


@pytest.mark.parametrize(
    "stop, checkpoint, code, message",
    [
        (
            _preempt_for(PreemptionReason.PRIORITY, PRIORITY),
            None,
            "PREEMPTED",
            PRIORITY + "; lost 4.13 GPU-hours since the attempt's start at 09:00:00 UTC; rank 0 ended (signal SIGKILL)",
        ),
        (
            _preempt_for(PreemptionReason.RECLAIM, RECLAIM),
            300,
            "RECLAIM",
            RECLAIM + "; lost 1.47 GPU-hours since the checkpoint of step 300 at 09:20:00 UTC; rank 0 ended "
            "(signal SIGKILL)",
        ),
        (
            _drain,
            None,
            "DRAIN",
            "node z1-r1-h100-01 is draining: replace the NIC; lost 4.13 GPU-hours since the attempt's start at "
            "09:00:00 UTC; rank 0 ended (signal SIGKILL)",
        ),
        (
            _gpu_fault,
            None,
            "NODE_HEALTH",
            "a GPU of z1-r1-h100-01 failed: GPU 3: Xid 79; lost 4.13 GPU-hours since the attempt's start at "
            "09:00:00 UTC; rank 0 ended (signal SIGKILL)",
        ),
        # The owner's own requeue loses nothing by the ledger's rule (the timeline says none).
        (_requeue, None, "REQUEUED", "requeued by alice; rank 0 ended (signal SIGKILL)"),
    ],
)
def test_a_preemption_is_told_with_its_cause_and_the_work_it_lost(
    clock,
    api,
    leader,
    receiver,
    mlq,  # noqa: F811
    stop,
    checkpoint,
    code,
    message,
):
    """QA: the payload said only the rank's exit line ("rank 0 ended (signal SIGKILL)"), with the
    same code for a reclaim as for a priority preemption, and a node's fault read as a drain."""
    job = submit(api, notify={"on": ["preempted"], "webhook": receiver.url, "email": True})
    urgent = submit(api, client_job_id="urgent")
    start(job)  # 09:00
    if checkpoint is not None:
        at = timezone.now() + timedelta(minutes=20)
        Task.objects.filter(job=job).update(last_checkpoint_at=at, checkpoint_step=checkpoint)
    clock.shift(timedelta(minutes=30))
    stop(job, urgent, epoch=leader)
    clock.shift(timedelta(minutes=1))  # it ignored SIGTERM: SIGKILLed at the end of its grace period
    task = job.tasks.get()
    assert reports.do_report_exited(job_id=job.pk, rank=0, attempt=task.attempt, exit_code=None, signal="SIGKILL")
    message = message.format(urgent=urgent.pk)
    payloads = [d.payload for d in Delivery.objects.filter(job_ref=job.pk, event="preempted").order_by("channel")]
    assert [p["reason"] for p in payloads] == [{"code": code, "message": message}] * 2  # email, webhook
    assert send_due() == {"DELIVERED": 2}
    assert verify(secret_of("alice"), receiver.received[0])["reason"] == {"code": code, "message": message}
    assert f"Reason: {code}: {message}" in mail.outbox[0].body
    listed = mlq("notifications", "--job", str(job.pk), "-o", "wide")
    assert listed.output.count(f"{code}: {message}") == 2, listed.output


def test_a_preemptions_cause_and_lost_work_are_one_query(api, leader, django_assert_num_queries):
    job = submit(api)
    start(job)
    _preempt_for(PreemptionReason.PRIORITY, PRIORITY)(job, job, epoch=leader)
    with django_assert_num_queries(1):
        code, _ = services._stop_request(job.pk, exit_line="", now=timezone.now())
    assert code == "PREEMPTED"


def test_the_delivery_log_is_each_users_own(api, receiver):
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    send_due()
    mine = api("alice").get("/api/v1/notifications/deliveries").json()["results"]
    assert [(d["job"], d["event"], d["status"], d["attempts"], d["last_status_code"]) for d in mine] == [
        (job.pk, "started", "DELIVERED", 1, 200)
    ]
    assert api("alice").get(f"/api/v1/notifications/deliveries?job={job.pk}&status=DELIVERED").json()["results"]
    assert api("bob").get("/api/v1/notifications/deliveries").json()["results"] == []
    assert api(None).get("/api/v1/notifications/deliveries").status_code in (401, 403)
    bad = api("alice").get("/api/v1/notifications/deliveries?status=LOST&job=x")
    assert bad.status_code == 400 and set(bad.json()["fields"]) == {"job"}
    unknown = api("alice").get("/api/v1/notifications/deliveries?foo=1&event=started")  # it was ignored
    assert unknown.status_code == 400 and set(unknown.json()["fields"]) == {"foo"}


def test_settings_api_refuses_what_a_spec_would(api):
    client = api("alice")
    bad = client.patch("/api/v1/notifications/settings", {"on": ["started", "nope"]}, format="json")
    assert (bad.status_code, bad.json()["fields"]) == (400, {"on.1": [NOT_AN_EVENT.format(value="nope")]})
    bad = client.patch("/api/v1/notifications/settings", {"webhook": "http://10.0.0.1/x"}, format="json")
    assert bad.json()["fields"] == {"webhook": [HOST_NOT_ALLOWED.format(host="10.0.0.1")]}
    bad = client.patch("/api/v1/notifications/settings", {"on": ["started"]}, format="json")
    assert bad.json()["fields"] == {"webhook": [NOWHERE]}
    good = client.patch("/api/v1/notifications/settings", {"on": ["started"], "email": True}, format="json")
    assert (good.status_code, good.json()["on"], good.json()["email"]) == (200, ["started"], True)
    assert client.patch("/api/v1/notifications/settings", {"on": []}, format="json").json()["on"] == []


def test_the_request_goes_to_the_checked_address_with_the_hosts_name(receiver, settings):
    """A name is resolved once, checked, and connected to by its address: the receiver sees the
    name in Host; no second lookup (which a rebinding DNS could answer otherwise) is made."""
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = ["hooks.internal.test"]
    lookups = []

    def resolve(host, port):
        lookups.append((host, port))
        return [ipaddress.ip_address("127.0.0.1")]

    port = receiver.server.server_port
    outcome = send_webhook(
        url=f"http://hooks.internal.test:{port}/x?y=1",
        payload={"event": "started"},
        delivery_id="d-1",
        event="started",
        secret="s",
        resolve=resolve,
    )
    assert outcome == Outcome(True, status_code=200)
    assert lookups == [("hooks.internal.test", port)]
    (request,) = receiver.received
    assert (request["path"], request["headers"]["Host"]) == ("/x?y=1", f"hooks.internal.test:{port}")


def test_a_redirect_is_not_followed(settings):
    moved = Receiver(statuses=[302], location="http://127.0.0.1:9/elsewhere")
    try:
        outcome = send_webhook(url=moved.url, payload={}, delivery_id="d-2", event="started", secret="s")
        assert (outcome.delivered, outcome.status_code, outcome.refused) == (False, 302, False)
        assert len(moved.received) == 1
        # It says where to (a "Location" header was read as none: "a redirect to ''").
        assert "a redirect to 'http://127.0.0.1:9/elsewhere'" in outcome.error
    finally:
        moved.close()


def test_an_unreachable_receiver_is_a_failed_attempt(api, settings):
    gone = Receiver()
    gone.close()  # nothing listens on its port any more
    job = submit(api, notify={"on": ["started"], "webhook": gone.url})
    start(job)
    delivery = Delivery.objects.get(job_ref=job.pk)
    assert do_send(delivery.pk) == "PENDING"
    delivery.refresh_from_db()
    assert delivery.last_error.startswith("could not reach 127.0.0.1: ")
    assert delivery.last_status_code is None


def test_deliveries_are_queued_for_celery_once_the_transition_commits(
    api, receiver, django_capture_on_commit_callbacks, monkeypatch
):
    """The transition's transaction records the delivery; its commit queues the Celery message
    (run in process here: the task eager), whose worker sends it."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    # Eager Celery sends in a thread (test_notify_safety.py); here, in this test's transaction.
    monkeypatch.setattr(services, "send_in_background", lambda ids, countdown=0: [do_send(i) for i in ids])
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        start(job)
    assert Delivery.objects.get(job_ref=job.pk).status == "PENDING" and receiver.received == []
    for callback in callbacks:
        callback()
    assert Delivery.objects.get(job_ref=job.pk).status == "DELIVERED"
    assert len(receiver.received) == 1


def test_a_rolled_back_transition_records_nothing(api, receiver):
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    node = Node.objects.filter(gpu_type="H100").order_by("name").first()
    lifecycle.transition_gang(
        job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank={0: {"node": node, "gpu_indices": [0]}}
    )
    with pytest.raises(RuntimeError), transaction.atomic():
        lifecycle.transition_gang(job.pk, from_state=S.ASSIGNED, to_state=S.RUNNING)
        assert Delivery.objects.count() == 1
        raise RuntimeError("the caller's transaction fails after the transition")
    assert not Delivery.objects.exists()


def test_a_group_notifies_as_one_job(api, receiver):
    response = api("alice").post(
        "/api/v1/jobs",
        make_spec(
            client_job_id=None,
            resources={"gpu_count": 1},
            topology_hint="none",
            array={"count": 2},
            notify={"on": ["started", "succeeded"], "webhook": receiver.url},
        ),
        format="json",
    )
    assert response.status_code == 201, response.json()
    parent = Job.objects.get(pk=response.json()["id"])
    node = Node.objects.filter(gpu_type="H100").order_by("name").first()
    for child in parent.children.order_by("group_index"):
        lifecycle.transition_gang(
            child.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank={0: {"node": node, "gpu_indices": [0]}}
        )
        lifecycle.transition_gang(child.pk, from_state=S.ASSIGNED, to_state=S.RUNNING)
        lifecycle.transition_gang(child.pk, from_state=S.RUNNING, to_state=S.SUCCEEDED)
    assert [(d.job_ref, d.event) for d in Delivery.objects.order_by("id")] == [
        (parent.pk, "started"),
        (parent.pk, "succeeded"),
    ]


def test_the_account_page_saves_defaults_rotates_the_secret_and_shows_the_log(logged_in, receiver, api):
    client = logged_in("alice")
    page = client.get("/account/notifications/")
    assert page.status_code == 200 and b'id="webhook-secret"' in page.content
    secret = NotificationSettings.objects.get(user__username="alice").secret
    assert secret.encode() in page.content
    bad = client.post("/account/notifications/", {"on": ["started"], "webhook": "http://169.254.169.254/latest"})
    assert bad.status_code == 400
    assert HOST_NOT_ALLOWED.format(host="169.254.169.254").encode() in bad.content
    saved = client.post("/account/notifications/", {"on": ["started", "failed"], "webhook": receiver.url})
    assert saved.status_code == 302
    defaults = NotificationSettings.objects.get(user__username="alice")
    assert (defaults.on, defaults.webhook, defaults.email) == (["started", "failed"], receiver.url, False)
    client.post("/account/notifications/", {"rotate": "1"})
    assert NotificationSettings.objects.get(user__username="alice").secret != secret
    job = submit(api)
    start(job)
    send_due()
    log = client.get("/account/notifications/").content.decode()
    assert f'<a href="/jobs/{job.pk}/">{job.pk}</a>' in log and ">DELIVERED<" in log


def test_mlq_notifications_lists_the_log(mlq, receiver, api):  # noqa: F811
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    send_due()
    listed = mlq("notifications", "--job", str(job.pk), "-o", "json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert (row["job"], row["event"], row["status"], row["last_status_code"]) == (job.pk, "started", "DELIVERED", 200)
    table = mlq("notifications", "--status", "delivered")
    assert table.exit_code == 0 and "DELIVERED" in table.output and "started" in table.output
    # --event filters as the API's ?event= does (QA: the CLI had no way to ask).
    from mlqueue.cli.notifications import EVENTS
    from scheduling.notify_spec import Event

    assert EVENTS == tuple(Event.values)
    assert len(json.loads(mlq("notifications", "--event", "STARTED", "-o", "json").output)) == 1
    assert json.loads(mlq("notifications", "--event", "failed", "-o", "json").output) == []
    assert mlq("notifications", "--event", "exploded").exit_code == 2


def test_admins_read_deliveries_without_the_secrets(logged_in, api, receiver):
    job = submit(api, notify={"on": ["started"], "webhook": receiver.url})
    start(job)
    send_due()
    client = logged_in("ops")
    listed = client.get("/admin/notifications/delivery/")
    assert listed.status_code == 200 and b"DELIVERED" in listed.content
    secret = NotificationSettings.objects.get(user__username="alice")
    shown = client.get(f"/admin/notifications/notificationsettings/{secret.pk}/change/")
    assert shown.status_code == 200 and secret.secret.encode() not in shown.content


def test_the_signing_secret_is_encrypted_at_rest_and_replaced_if_its_key_is_retired(api, settings):
    shown = api("alice").get("/api/v1/notifications/settings").json()["secret"]
    assert shown.startswith("whsec_")
    stored = NotificationSettings.objects.values_list("secret_ciphertext", flat=True).get(user__username="alice")
    assert shown not in stored
    settings.MLQ_SECRET_ENV_KEYS = "bmV3LWtleS1uZXctS2V5LW5ldy1rZXktbmV3LWtleS0="  # the old key retired
    replaced = api("alice").get("/api/v1/notifications/settings").json()["secret"]
    assert replaced.startswith("whsec_") and replaced != shown


def test_email_needs_an_address_on_the_account(api, user):
    alice = user("alice")
    alice.email = ""
    alice.save(update_fields=["email"])
    response = api("alice").post(
        "/api/v1/jobs", make_spec(resources={"gpu_count": 8}, notify={"email": True}), format="json"
    )
    assert (response.status_code, response.json()["fields"]) == (400, {"notify.email": [NO_EMAIL_ADDRESS]})
