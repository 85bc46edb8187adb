"""Notifications end to end: a job with a `notify` webhook runs on a real agent; a real Celery
worker (Redis broker) sends each delivery queued at commit, and real `celery beat` sweeps the
retry after the receiver's 500. The receiver runs here, on 127.0.0.1, which this test's
settings allow (loopback is refused otherwise); it checks every signature with the secret."""

import hashlib
import hmac
import ipaddress
import json
import sys

import pytest

from notifications.models import Delivery, NotificationSettings
from scheduling.models import Job
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.test_schedules import one_node_with_celery
from tests.integration.test_notifications import Receiver

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
ALLOWED = {"MLQ_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "MLQ_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32"}


@pytest.fixture
def cluster(tmp_path, demo, settings):
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.MLQ_WEBHOOK_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.1/32")]
    running = Cluster(tmp_path, MLQ_NOTIFY_RETRY_BASE_S=1, MLQ_NOTIFY_SWEEP_S=1, **ALLOWED)
    yield running
    running.stop()


def test_a_webhook_is_sent_by_a_celery_worker_signed_and_retried_after_a_500(cluster, tmp_path):
    receiver = Receiver(statuses=[500])  # the first POST (the start's) fails once
    try:
        api = one_node_with_celery(cluster, tmp_path)
        spec = {
            "name": "told",
            "team": "research-foundation-models",
            "command": [sys.executable, "-c", "import time; time.sleep(1)"],
            "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
            "notify": {"on": ["started", "succeeded"], "webhook": receiver.url},
        }
        submitted = api.post("/api/v1/jobs", spec, format="json")
        assert submitted.status_code == 201, submitted.json()
        job_id = submitted.json()["id"]
        try:
            wait_for(
                lambda: Delivery.objects.filter(job_ref=job_id, status="DELIVERED").count() == 2,
                timeout=60,
                interval=0.5,
                what="two deliveries",
            )
        except AssertionError:
            raise AssertionError(cluster.logs()) from None
        assert Job.objects.get(pk=job_id).state == "SUCCEEDED"
        secret = NotificationSettings.objects.get(user__username="alice").secret
        bodies = []
        for request in receiver.received:
            headers = request["headers"]
            signed = headers["X-MLQ-Timestamp"].encode() + b"." + request["body"]
            expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(headers["X-MLQ-Signature"], expected)
            bodies.append(json.loads(request["body"]))
        started = Delivery.objects.get(job_ref=job_id, event="started")
        succeeded = Delivery.objects.get(job_ref=job_id, event="succeeded")
        assert bodies[0]["event"] == "started"  # answered 500, then retried with the same id
        assert sorted((b["event"], b["delivery_id"]) for b in bodies) == [
            ("started", str(started.uuid)),
            ("started", str(started.uuid)),
            ("succeeded", str(succeeded.uuid)),
        ]
        assert (started.attempts, started.last_status_code) == (2, 200)
        assert "send_notification" in (tmp_path / "worker.log").read_text()
    finally:
        receiver.close()
