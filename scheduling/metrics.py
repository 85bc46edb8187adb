"""Prometheus metrics.

Counters and histograms are updated where things happen (the leader's passes, the web's
agent reports); with PROMETHEUS_MULTIPROC_DIR set, every process on a machine writes its own
files and /metrics sums them. Gauges about the cluster's state (pending jobs by reason, GPUs
by state, fragmentation, the leader's epoch) are read from the store when /metrics is
scraped, so they are right whichever process serves the scrape.

/metrics is not public (it names teams, nodes and load): a scrape needs
`Authorization: Bearer <MLQ_METRICS_TOKEN>` or a client address in MLQ_METRICS_ALLOWED_NETWORKS
(default: loopback only). docs/metrics.md has the Prometheus side."""

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily

PASS_SECONDS = Histogram(
    "mlqueue_scheduler_pass_seconds",
    "Duration of a scheduling pass",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PLACEMENTS = Counter("mlqueue_placements_total", "Jobs placed by the scheduler", ["resource_class"])
PREEMPTIONS = Counter("mlqueue_preemptions_total", "Jobs preempted, by why", ["reason"])
QUEUE_WAIT = Histogram(
    "mlqueue_queue_wait_seconds",
    "Submit (or requeue) to placement",
    ["team", "priority"],
    buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 48 * 3600),
)
OUTCOMES = Counter(
    "mlqueue_job_outcomes_total", "Jobs ended, by outcome and failure class", ["outcome", "failure_class"]
)
DEPOSED = Counter("mlqueue_scheduler_deposed_total", "Times a leader found itself deposed")


def record_pass(decisions, applied, elapsed_ms: float, snapshot) -> None:
    """Count what the pass applied (`applied`, scheduling/leader/apply.py), not what it decided: a
    placement whose job was cancelled or placed by then, or a preemption whose victim was
    already stopping, changed nothing."""
    PASS_SECONDS.observe(elapsed_ms / 1000)
    pending = {job.job_id: job for job in snapshot.pending}
    placed = set(applied.placed_jobs)
    for placement in decisions.placements:
        job = pending.get(placement.job_id)
        if job is None or placement.job_id not in placed:
            continue
        PLACEMENTS.labels(job.resource_class).inc()
        queued = job.queued_at if job.queued_at is not None else job.submitted_at
        QUEUE_WAIT.labels(job.team, job.priority).observe(max(0.0, snapshot.now - queued))
    preempted = set(applied.preempted_jobs)
    for preemption in decisions.preemptions:
        if preemption.victim_job_id in preempted:
            PREEMPTIONS.labels(preemption.reason).inc()


class StoreCollector:
    """Gauges computed from the store at scrape time."""

    def collect(self):
        from scheduling.metrics_store import cluster_gauges

        for name, documentation, labels, samples in cluster_gauges():
            family = GaugeMetricFamily(name, documentation, labels=labels)
            for label_values, value in samples:
                family.add_metric(label_values, value)
            yield family


METRICS_FORBIDDEN = (
    "/metrics is not public: scrape it with `Authorization: Bearer <MLQ_METRICS_TOKEN>` "
    "or from a network in MLQ_METRICS_ALLOWED_NETWORKS.\n"
)
METRICS_BAD_TOKEN = "/metrics: that bearer token is not MLQ_METRICS_TOKEN.\n"


def scrape_refusal(request) -> HttpResponse | None:
    """None if the scrape may proceed: a bearer token equal to MLQ_METRICS_TOKEN, or, with no
    Authorization header, a client address in MLQ_METRICS_ALLOWED_NETWORKS. A wrong token is
    401 even from an allowed network: the scraper is misconfigured and should hear so."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header:
        scheme, _, token = header.partition(" ")
        expected = settings.MLQ_METRICS_TOKEN
        # compare_digest: the time taken says nothing about how much of the token was right.
        if scheme.lower() == "bearer" and expected and hmac.compare_digest(token.strip().encode(), expected.encode()):
            return None
        response = HttpResponse(METRICS_BAD_TOKEN, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="mlqueue-metrics", error="invalid_token"'
        return response
    if _address_allowed(request.META.get("REMOTE_ADDR", "")):
        return None
    return HttpResponse(METRICS_FORBIDDEN, status=403, content_type="text/plain")


def _address_allowed(raw: str) -> bool:
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped:  # a dual-stack socket's IPv4 client
        address = address.ipv4_mapped
    return any(address in network for network in settings.MLQ_METRICS_ALLOWED_NETWORKS)


def metrics_view(request):
    refusal = scrape_refusal(request)
    if refusal is not None:
        return refusal
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(StoreCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
