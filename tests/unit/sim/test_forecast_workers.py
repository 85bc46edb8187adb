"""The forecast's kept worker processes (scheduling/sim/forecast_workers.py): the same answer as
the forecast in-process, the same processes from one forecast to the next, and a worker that
died (between forecasts or during one) spawned again without losing more than that forecast."""

import os
import pickle
import signal
from dataclasses import replace

import pytest

from scheduling.core.model import JobShape, Node, Topology
from scheduling.sim.forecast import forecast
from scheduling.sim.forecast_workers import Sent, Workers, loaded, payload
from tests.unit.core.builders import HOUR, cluster, job, rack, running, snapshot

OPTIONS = {"step_s": 0}
FRACTIONS = {"vision": 0.5}


def queue_behind_one_job():
    nodes = cluster(rack("z1-r1", 1))
    busy = running(1, ["z1-r1-n1"], age=1000, remaining=3600)
    waiting = [job(2, gpus=8, runtime=2 * HOUR, age=100), job(3, gpus=8, runtime=2 * HOUR, age=50)]
    return snapshot(nodes, pending=waiting, running_jobs=[busy])


@pytest.fixture
def workers():
    kept = Workers()
    yield kept
    kept.kill()


def forecast_in(workers: Workers, state, fractions=FRACTIONS):
    workers.start(state, fractions, OPTIONS)
    workers.wait(60)
    assert workers.ready()
    return workers.result()


def test_the_workers_answer_as_the_forecast_in_process_and_are_kept_between_forecasts(workers):
    state = queue_behind_one_job()
    first = forecast_in(workers, state)
    assert first == forecast(state, likely_fraction=FRACTIONS, **OPTIONS)
    assert first.likely != first.latest  # the likely run had its fraction, the bound none
    pids = [worker.process.pid for worker in workers.kept]
    assert len(set(pids)) == 2
    later = replace(state, pending=state.pending[:1])
    assert forecast_in(workers, later) == forecast(later, likely_fraction=FRACTIONS, **OPTIONS)
    assert [worker.process.pid for worker in workers.kept] == pids
    # Without history, the bound alone: one worker asked.
    workers.start(state, None, OPTIONS)
    assert workers.pids == pids[:1]
    workers.wait(60)
    assert workers.result() == forecast(state, **OPTIONS)


def test_a_worker_that_died_between_forecasts_is_spawned_again(workers):
    state = queue_behind_one_job()
    forecast_in(workers, state)
    dead = workers.kept[1].process
    os.kill(dead.pid, signal.SIGKILL)
    dead.join(timeout=10)
    assert forecast_in(workers, state) == forecast(state, likely_fraction=FRACTIONS, **OPTIONS)
    assert workers.kept[1].process.pid != dead.pid


def test_a_worker_that_dies_during_a_forecast_loses_that_forecast_only(workers):
    state = queue_behind_one_job()
    forecast_in(workers, state)
    victim = workers.kept[0].process.pid
    os.kill(victim, signal.SIGSTOP)  # it takes the request (the pipe holds it) and dies before answering
    workers.start(state, FRACTIONS, OPTIONS)
    os.kill(victim, signal.SIGKILL)
    workers.wait(60)
    assert workers.ready() and workers.result() is None
    assert forecast_in(workers, state) == forecast(state, likely_fraction=FRACTIONS, **OPTIONS)


def test_kill_ends_every_worker(workers):
    forecast_in(workers, queue_behind_one_job())
    processes = [worker.process for worker in workers.kept]
    workers.kill()
    assert not any(process.is_alive() for process in processes) and workers.kept == []


def test_the_snapshots_classes_pickle_as_calls_on_their_fields_with_what_is_derived_made_again():
    node = Node("n1", "z1", "z1-r1", "H100", 8, 64, 512, {"ib": "ndr"}, excluded_gpus=(3,), scratch_disk_gb=100)
    shape = JobShape("H100", 2, 4, 8, 64, {"ib": "ndr"}, Topology.REQUIRE_SAME_RACK, 50)
    waiting = replace(job(7, gpus=8, per_task=4), shape=shape, nominated=("n1",), group=3)
    busy = running(8, ["n1", "n2"], gpus_per_node=4, preemptions=2, last_checkpoint_at=5.0, group=3)
    for original in (node, shape, waiting, busy, busy.tasks[1]):
        copy = pickle.loads(pickle.dumps(original, protocol=pickle.HIGHEST_PROTOCOL))
        assert copy == original and type(copy) is type(original)
    copy = pickle.loads(pickle.dumps(busy))
    assert (copy.units, copy.resource_class) == (8, "gpu:H100")
    assert (pickle.loads(pickle.dumps(shape)).units, pickle.loads(pickle.dumps(shape)).key()) == (8, shape.key())


def a_big_snapshot():
    """12,000 running jobs: a pickle of over a megabyte, more than a pipe holds."""
    nodes = cluster(*(rack(f"z1-r{index}", 250) for index in range(2, 8)))
    busy = [
        running(8 * index + gpu + 10, [node.name], gpus_per_node=1, first_gpu=gpu)
        for index, node in enumerate(nodes)
        for gpu in range(8)
    ]
    state = replace(queue_behind_one_job(), nodes=nodes + queue_behind_one_job().nodes, running=tuple(busy))
    assert len(pickle.dumps(state)) > 1_000_000
    return state


def test_a_payload_carries_only_the_nodes_and_jobs_the_worker_does_not_hold():
    """Against what a worker holds (the last snapshot sent), a node or job that is the same
    object goes as its position: read back, it is the worker's own object again."""
    state = a_big_snapshot()
    full = payload(state, 1, None)
    first, held = loaded(full, None)
    assert first == state and held == Sent.of(1, first)
    later = replace(state, running=state.running[1:], pending=(*state.pending, job(99, gpus=8)))
    delta = payload(later, 2, Sent.of(1, state))
    assert len(delta) < len(full) / 10
    second, held = loaded(delta, held)
    assert second == later and second.running[0] is first.running[1] and second.nodes[0] is first.nodes[0]
    assert held.number == 2
    with pytest.raises(RuntimeError):
        loaded(delta, None)  # a worker spawned since holds nothing: it must not guess


def test_a_worker_that_does_not_read_holds_up_its_own_request_not_the_caller(workers):
    """A stopped worker (or one still busy) and a snapshot bigger than the pipe holds: the
    request waits in a thread of its own; `start` returns at once, and the forecast is lost
    only if that worker never answers."""
    state = a_big_snapshot()
    forecast_in(workers, queue_behind_one_job())
    stopped = workers.kept[0].process.pid
    os.kill(stopped, signal.SIGSTOP)
    try:
        workers.start(state, FRACTIONS, OPTIONS)
        assert not workers.ready()
    finally:
        os.kill(stopped, signal.SIGKILL)
    workers.wait(60)
    assert workers.ready() and workers.result() is None
    assert forecast_in(workers, state) == forecast(state, likely_fraction=FRACTIONS, **OPTIONS)


def test_a_worker_answers_the_latest_request_never_an_earlier_one_given_up(workers):
    """Two forecasts asked back to back (the first given up unread): each worker runs both
    and the first answers are dropped."""
    first, second = queue_behind_one_job(), replace(queue_behind_one_job(), pending=queue_behind_one_job().pending[:1])
    workers.start(first, FRACTIONS, OPTIONS)
    assert forecast_in(workers, second) == forecast(second, likely_fraction=FRACTIONS, **OPTIONS)
    assert forecast(second, likely_fraction=FRACTIONS, **OPTIONS) != forecast(
        first, likely_fraction=FRACTIONS, **OPTIONS
    )


def test_a_forecast_ended_by_kill_has_no_result(workers):
    workers.start(queue_behind_one_job(), FRACTIONS, OPTIONS)
    workers.kill()
    assert workers.ready() and workers.result() is None


def test_a_ctrl_c_at_the_terminal_does_not_end_a_worker(workers):
    """SIGINT reaches the whole foreground process group: the leader ends its workers itself."""
    state = queue_behind_one_job()
    forecast_in(workers, state)
    pids = [worker.process.pid for worker in workers.kept]
    for pid in pids:
        os.kill(pid, signal.SIGINT)
    assert forecast_in(workers, state) == forecast(state, likely_fraction=FRACTIONS, **OPTIONS)
    assert [worker.process.pid for worker in workers.kept] == pids
