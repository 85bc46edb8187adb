"""The cluster-state gauges behind /metrics, read from the store at scrape time."""

from collections import defaultdict

from django.db.models import Count

from scheduling.core.model import resource_class
from scheduling.core.reasons import ReasonCode
from scheduling.models import Job, JobState, Node, NodeState, SchedulerLease, Task
from scheduling.states import ON_NODE


def cluster_gauges():
    """(name, help, label names, [(label values, value)]) for each gauge."""
    yield "mlqueue_pending_jobs", "Pending jobs by reason", ["reason"], _pending_by_reason()
    gpus, fragmentation = gpus_by_state()
    yield "mlqueue_gpus", "GPUs by resource class and state", ["resource_class", "state"], gpus
    yield (
        "mlqueue_fragmentation_ratio",
        "Free GPUs not on a wholly free READY node, over all free GPUs",
        ["resource_class"],
        fragmentation,
    )
    lease = SchedulerLease.objects.filter(pk=1).values("epoch", "last_pass_ms").first() or {}
    yield "mlqueue_leader_epoch", "The scheduler lease's epoch", [], [((), lease.get("epoch") or 0)]
    yield (
        "mlqueue_scheduler_last_pass_milliseconds",
        "Duration of the leader's last pass",
        [],
        [((), lease.get("last_pass_ms") or 0)],
    )


def _pending_by_reason():
    rows = (
        Job.objects.filter(state=JobState.PENDING, group_kind="").values("pending_reason_code").annotate(n=Count("id"))
    )
    return [((row["pending_reason_code"] or ReasonCode.NOT_YET_SCHEDULED,), row["n"]) for row in rows]


def gpus_by_state():
    used = defaultdict(int)
    for node_id, gpus in Task.objects.filter(state__in=ON_NODE, node__isnull=False).values_list(
        "node_id", "gpu_indices"
    ):
        used[node_id] += len(gpus)
    totals = defaultdict(lambda: defaultdict(int))
    free_whole, free_all = defaultdict(int), defaultdict(int)
    for node_id, gpu_type, count, state in Node.objects.exclude(gpu_type="").values_list(
        "id", "gpu_type", "gpu_count", "state"
    ):
        rclass, in_use = resource_class(gpu_type), used.get(node_id, 0)
        totals[rclass]["used"] += in_use
        if state == NodeState.READY:
            free = count - in_use
            totals[rclass]["free"] += free
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
