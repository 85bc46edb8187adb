"""The submit page's dry run: for a spec that passed validation (so an empty cluster could
hold it), where it would go on the cluster as it is now, or why it would wait and what change
would let it start. Reads the cluster only; nothing is written."""

from dataclasses import dataclass

from django.conf import settings

from scheduling.core.explain import CapacityExplainer
from scheduling.core.placement import plan
from scheduling.core.reasons import PendingReason
from scheduling.core.whatif import suggestions
from scheduling.services import job_shape
from scheduling.web.explanations import cluster_now


@dataclass(frozen=True)
class DryRun:
    shape: str  # what it asks for, e.g. "8 x 8 H100"
    placement: tuple[tuple[str, int], ...] = ()  # (node, tasks) if it fits the free room now
    reason: PendingReason | None = None  # why it would wait, if it does not
    suggestions: tuple[str, ...] = ()

    @property
    def fits_now(self) -> bool:
        return bool(self.placement)


def dry_run(spec: dict) -> DryRun:
    """Try the normalized spec against the free room now with the scheduler's own placement;
    when it does not fit, explain it the way the job page explains a pending job."""
    state, nodes = cluster_now()
    shape = job_shape(spec)
    placement = plan(state, shape)
    if placement is not None:
        return DryRun(shape.describe(), tuple(sorted((slot.name, count) for slot, count in placement)))
    reason = CapacityExplainer(state, nodes).explain_shape(shape)
    return DryRun(shape.describe(), reason=reason, suggestions=tuple(suggestions(state, shape, settings.MLQ_GPU_TYPES)))
