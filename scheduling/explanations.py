"""The "why is this job pending?" panel: the reason the last pass gave, the live node
histogram for its shape, its reservation, and what would let it start sooner."""
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from scheduling.core.explain import CapacityExplainer
from scheduling.core.state import ClusterState
from scheduling.core.whatif import fits_now, suggestions
from scheduling.models import Job
from scheduling.services import job_shape
from scheduling.snapshot import load_nodes, load_running


@dataclass
class Why:
    code: str
    message: str
    histogram: tuple[tuple[str, int], ...]
    fit_count: str
    suggestions: list[str]
    fits_as_is: bool


def cluster_now() -> tuple[ClusterState, tuple]:
    nodes, _ = load_nodes()
    return ClusterState(nodes, load_running(timezone.now())), tuple(nodes)


def explain_job(job: Job) -> Why:
    state, nodes = cluster_now()
    shape = job_shape(job.spec)
    histogram, fit = CapacityExplainer(state, nodes).node_histogram(shape)
    return Why(
        code=job.pending_reason_code or "NOT_YET_SCHEDULED",
        message=job.pending_reason_message or "waiting for the scheduler's next pass",
        histogram=histogram, fit_count=f"{fit}/{len(nodes)}",
        suggestions=suggestions(state, shape, settings.MLQ_GPU_TYPES), fits_as_is=fits_now(state, shape),
    )
