"""The indexes that keep a pass's cost off the cluster's size read exactly what a scan of every
node or candidate reads: each is checked against that scan, written out here, on random clusters."""
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.model import PendingJob, resource_class
from scheduling.core.placement import capacity
from scheduling.core.reservation import ending_order, forecast, released_by
from scheduling.core.state import ClusterState
from scheduling.core.trial import Trial
from tests.unit.core.test_schedule_equivalence import EQUIVALENCE_SETTINGS, NOW, fleets, running_jobs, shapes


def forecast_over_every_node(state: ClusterState, job: PendingJob, ending: list):
    """The reference: every ready node of the class enters the trial from the start."""
    rooms = {slot: capacity(slot, job.shape) for slot in state.ready_slots(job.resource_class)}
    trial = Trial(job, rooms)
    gone = trial.fit_by_removing(ending)
    if gone is None:
        return None
    return max(gone[-1].expected_end, NOW), trial.plan(), released_by(gone)


def readable(found) -> tuple | None:
    if found is None:
        return None
    start, chosen, extra = found
    return start, [(slot.name, count) for slot, count in chosen], dict(extra)


@st.composite
def forecasts(draw):
    """A cluster, its running jobs, a job of one of its classes, and the jobs it waits on
    (all of the class's running jobs soonest end first, as for a reservation, or a few, as
    for a preemptor whose victims are stopping)."""
    cluster = draw(fleets())
    running = running_jobs(draw, cluster, draw(st.integers(0, 20)), [])
    shape = draw(shapes())
    job = PendingJob(1000, "vision", "P1", shape, NOW - 60.0, draw(st.sampled_from([600.0, 40_000.0])))
    of_class = [r for r in running if r.resource_class == resource_class(shape.gpu_type)]
    if draw(st.booleans()):
        ending = ending_order(of_class, NOW)
    else:
        ending = draw(st.lists(st.sampled_from(of_class), unique_by=lambda r: r.job_id)) if of_class else []
    return cluster, running, job, ending


@EQUIVALENCE_SETTINGS
@given(forecasts())
def test_a_forecast_reads_the_free_room_index_as_a_scan_of_every_node_would(case):
    cluster, running, job, ending = case
    state = ClusterState(cluster, running)
    assert readable(forecast(state, job, ending, NOW, ending=ending)) == readable(
        forecast_over_every_node(state, job, ending))
