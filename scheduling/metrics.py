"""Prometheus metrics.

Counters and histograms are updated where things happen (the leader's passes, the web's
agent reports); with PROMETHEUS_MULTIPROC_DIR set, every process on a machine writes its own
files and /metrics sums them. Gauges about the cluster's state (pending jobs by reason, GPUs
by state, fragmentation, the leader's epoch) are read from the store when /metrics is
scraped, so they are right whichever process serves the scrape."""
import os

from django.http import HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import REGISTRY, multiprocess
from prometheus_client.core import GaugeMetricFamily

PASS_SECONDS = Histogram("mlqueue_scheduler_pass_seconds", "Duration of a scheduling pass",
                         buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
PLACEMENTS = Counter("mlqueue_placements_total", "Jobs placed by the scheduler", ["resource_class"])
PREEMPTIONS = Counter("mlqueue_preemptions_total", "Jobs preempted, by why", ["reason"])
QUEUE_WAIT = Histogram("mlqueue_queue_wait_seconds", "Submit (or requeue) to placement", ["team", "priority"],
                       buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 48 * 3600))
OUTCOMES = Counter("mlqueue_job_outcomes_total", "Jobs ended, by outcome and failure class", ["outcome", "failure_class"])
DEPOSED = Counter("mlqueue_scheduler_deposed_total", "Times a leader found itself deposed")


def record_pass(decisions, applied, elapsed_ms: float, epoch: int, snapshot=None) -> None:
    PASS_SECONDS.observe(elapsed_ms / 1000)
    pending = {job.job_id: job for job in snapshot.pending} if snapshot else {}
    for placement in decisions.placements:
        job = pending.get(placement.job_id)
        if job is None:
            continue
        PLACEMENTS.labels(job.resource_class).inc()
        QUEUE_WAIT.labels(job.team, job.priority).observe(max(0.0, snapshot.now - job.submitted_at))
    for preemption in decisions.preemptions:
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


def metrics_view(request):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(StoreCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

