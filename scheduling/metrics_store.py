"""The cluster-state gauges behind /metrics, read from the store at scrape time (and the
Celery backlog, from the broker)."""

import logging
from collections import defaultdict

import redis
from django.conf import settings
from django.db.models import Count, F, Sum
from kombu.transport.redis import Channel

from mlqueue.celery import app
from mlqueue.redis_client import redis_client
from scheduling import node_health
from scheduling.core.model import resource_class
from scheduling.core.reasons import ReasonCode
from scheduling.models import Job, JobState, Node, NodeState, Task
from scheduling.selectors import scheduler_state
from scheduling.states import ON_NODE

log = logging.getLogger(__name__)


def cluster_gauges():
    """(name, help, label names, [(label values, value)]) for each gauge."""
    yield "mlqueue_pending_jobs", "Pending jobs by reason", ["reason"], _pending_by_reason()
    gpus, fragmentation = gpus_by_state()
    yield "mlqueue_gpus", "GPUs by resource class and state", ["resource_class", "state"], gpus
    yield "mlqueue_cpus", "CPUs of CPU nodes by resource class and state", ["resource_class", "state"], cpus_by_state()
    yield (
        "mlqueue_pending_units",
        "GPUs (CPUs for CPU jobs) asked for by pending jobs, by resource class",
        ["resource_class"],
        _pending_units(),
    )
    yield "mlqueue_nodes", "Nodes by resource class and state", ["resource_class", "state"], _nodes_by_state()
    yield (
        "mlqueue_fragmentation_ratio",
        "Free GPUs not on a wholly free READY node, over all free GPUs",
        ["resource_class"],
        fragmentation,
    )
    lease = scheduler_state()
    yield "mlqueue_leader_epoch", "The scheduler lease's epoch", [], [((), lease.epoch)]
    yield (
        "mlqueue_leader_up",
        "1 while a scheduler holds a live lease (renewed within its duration, by the database's clock)",
        [],
        [((), 1 if lease.alive else 0)],
    )
    yield (
        "mlqueue_scheduler_last_pass_milliseconds",
        "Duration of the leader's last pass",
        [],
        [((), lease.last_pass_ms or 0)],
    )
    if lease.forecast_age_s is not None:  # none before the first forecast: no series, not a 0
        yield (
            "mlqueue_forecast_age_seconds",
            "Age of the stored start forecasts: since the snapshot they were simulated from (database clock)",
            [],
            [((), lease.forecast_age_s)],
        )
        yield "mlqueue_forecast_milliseconds", "Duration of the last start-time forecast", [], [((), lease.forecast_ms)]
    yield "mlqueue_celery_queue_length", "Celery messages waiting in the broker, by queue", ["queue"], _celery_backlog()
    yield from node_health_gauges()


# Per node and GPU (bounded: the fleet's GPUs, at most 16 a node): sample field -> gauge.
GPU_GAUGES = (
    ("utilization", "mlqueue_gpu_utilization_percent", "GPU utilization, from the node's latest sample", 1),
    ("memory_used_mb", "mlqueue_gpu_memory_used_bytes", "GPU memory in use, from the latest sample", 2**20),
    ("memory_total_mb", "mlqueue_gpu_memory_total_bytes", "GPU memory, from the latest sample", 2**20),
    ("temperature_c", "mlqueue_gpu_temperature_celsius", "GPU temperature, from the latest sample", 1),
    ("ecc_correctable", "mlqueue_gpu_ecc_correctable_errors", "Correctable ECC errors (volatile count)", 1),
    ("ecc_uncorrectable", "mlqueue_gpu_ecc_uncorrectable_errors", "Uncorrectable ECC errors (volatile count)", 1),
)


def node_health_gauges():
    """The latest health sample of every node that sent one (Redis): GPU telemetry where there
    are GPUs, the health check's result on every node; and the GPUs excluded for a fault
    (Postgres). A node's series go when its sample expires (MLQ_HEALTH_SAMPLE_TTL_S)."""
    names = list(Node.objects.values_list("name", flat=True))  # a CPU node's health check counts too
    samples = node_health.latest(names)
    for field, name, documentation, scale in GPU_GAUGES:
        values = [
            ((gpu["index"], node), gpu[field] * scale)
            for node, sample in sorted(samples.items())
            for gpu in sample["gpus"]
            if gpu.get(field) is not None
        ]
        yield name, documentation, ["gpu", "node"], [((str(i), node), value) for (i, node), value in values]
    checks = [((node,), float(s["check"]["status"] == "ok")) for node, s in sorted(samples.items()) if s.get("check")]
    yield "mlqueue_node_health_check_ok", "1 if the node's last health check passed, 0 if it failed", ["node"], checks
    excluded = Node.objects.exclude(excluded_gpus={}).values_list("name", "excluded_gpus")
    yield (
        "mlqueue_gpu_excluded",
        "1 for each GPU taken out of placement for a fault",
        ["gpu", "node"],
        [((index, node), 1) for node, gpus in excluded for index in sorted(gpus, key=int)],
    )


def _pending_by_reason():
    rows = (
        Job.objects.filter(state=JobState.PENDING, group_kind="").values("pending_reason_code").annotate(n=Count("id"))
    )
    return [((row["pending_reason_code"] or ReasonCode.NOT_YET_SCHEDULED,), row["n"]) for row in rows]


def _pending_units():
    """A GPU job asks for its GPUs; a CPU job for its tasks' CPUs."""
    rows = (
        Job.objects.filter(state=JobState.PENDING, group_kind="")
        .order_by()
        .values("gpu_type")
        .annotate(gpus=Sum("gpu_count"), cpus=Sum(F("task_count") * F("cpu_per_rank")))
    )
    return sorted(
        ((resource_class(row["gpu_type"] or None),), row["gpus"] if row["gpu_type"] else row["cpus"]) for row in rows
    )


def _nodes_by_state():
    rows = Node.objects.order_by().values("gpu_type", "state").annotate(n=Count("id"))
    return sorted(((resource_class(row["gpu_type"] or None), row["state"].lower()), row["n"]) for row in rows)


def cpus_by_state():
    """As GPUs by state, for CPU nodes: a task holds its job's CPUs per rank."""
    used = defaultdict(int)
    for node_id, cpus in Task.objects.filter(state__in=ON_NODE, node__gpu_type="").values_list(
        "node_id", "job__cpu_per_rank"
    ):
        used[node_id] += cpus
    totals = defaultdict(int)
    for node_id, count, state in Node.objects.filter(gpu_type="").values_list("id", "cpu_count", "state"):
        in_use = min(count, used.get(node_id, 0))
        totals["used"] += in_use
        totals["free" if state == NodeState.READY else f"unavailable_{state.lower()}"] += count - in_use
    return [((resource_class(None), state), value) for state, value in sorted(totals.items())]


def _celery_backlog():
    """The default queue's length on a Redis broker (its priority lists included, as kombu names
    them); nothing without a Redis broker or while Redis does not answer: a scrape never waits
    on it for more than the client's timeouts."""
    if not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        return []
    queue = app.conf.task_default_queue
    keys = [queue] + [f"{queue}{Channel.sep}{step}" for step in Channel.priority_steps if step]
    client = redis_client(settings.CELERY_BROKER_URL)
    try:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        return [((queue,), sum(pipe.execute()))]
    except redis.RedisError as exc:
        log.warning("/metrics: no Celery backlog: %s", exc)
        return []
    finally:
        client.close()  # a scrape's own connection, not left to the garbage collector


def gpus_by_state():
    """GPUs by resource class and state: used, free (on READY nodes), excluded for a fault
    (`unavailable_excluded`, on READY nodes, while no task holds them) or unavailable for the
    node's state."""
    used = defaultdict(set)
    for node_id, gpus in Task.objects.filter(state__in=ON_NODE, node__isnull=False).values_list(
        "node_id", "gpu_indices"
    ):
        used[node_id].update(gpus)
    totals = defaultdict(lambda: defaultdict(int))
    free_whole, free_all = defaultdict(int), defaultdict(int)
    for node_id, gpu_type, count, state, excluded in Node.objects.exclude(gpu_type="").values_list(
        "id", "gpu_type", "gpu_count", "state", "excluded_gpus"
    ):
        rclass, held = resource_class(gpu_type), used.get(node_id, set())
        in_use = len(held)
        totals[rclass]["used"] += in_use
        if state == NodeState.READY:
            sick = len({int(index) for index in excluded} - held)
            free = count - in_use - sick
            totals[rclass]["free"] += free
            if sick:
                totals[rclass]["unavailable_excluded"] += sick
            free_all[rclass] += free
            free_whole[rclass] += free if in_use == 0 else 0
        else:
            totals[rclass][f"unavailable_{state.lower()}"] += count - in_use
    gpus = [
        ((rclass, state), value) for rclass, states in sorted(totals.items()) for state, value in sorted(states.items())
    ]
    fragmentation = [
        ((rclass,), round(1 - free_whole[rclass] / free_all[rclass], 4) if free_all[rclass] else 0.0)
        for rclass in sorted(totals)
    ]
    return gpus, fragmentation
