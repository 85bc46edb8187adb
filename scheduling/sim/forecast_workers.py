"""The forecast's two simulations (scheduling/sim/forecast.py), each in a process of its own,
kept from one forecast to the next.

A fresh process per simulation cost the leader most of a second at seed-2500 scale before the
simulations began (BENCHMARKS.md, "The forecast in kept processes"): `Process.start` pickles its
arguments into the child's pipe and waits there while the child starts Python and imports the
core, the two children in turn. Kept workers are spawned once (nothing of the leader's
connections or threads is inherited); each forecast pickles the snapshot once and sends the
same bytes to both. A worker whose pipe closes (the leader gone) exits; one that died is
spawned again for the next forecast; `kill` ends a forecast under way with its workers.
No Django here: the leader's `Forecaster` and bench/forecast.py run the same code.
"""

import gc
import logging
import multiprocessing
import pickle
import time
from collections.abc import Mapping

from scheduling.core.model import ClusterSnapshot
from scheduling.sim.forecast import Forecast, Run, combine, simulate

log = logging.getLogger(__name__)

CONTEXT = multiprocessing.get_context("spawn")


def serve(connection) -> None:
    """A worker's body: for each request (the snapshot's pickle, then the run's fraction and
    options), one run (`simulate`) sent back; until the pipe closes. The collector sleeps
    through the run (a run makes next to no cyclic garbage: its peak memory is the same
    without it, and it is 3-4% faster), and the snapshot is frozen out of its sight until
    then."""
    while True:
        try:
            payload = connection.recv_bytes()
            fraction, options = connection.recv()
        except (EOFError, OSError):
            return
        snapshot = pickle.loads(payload)
        del payload
        gc.freeze()
        gc.disable()
        try:
            run = simulate(snapshot, fraction, **options)
        finally:
            del snapshot
            gc.unfreeze()
            gc.enable()
        try:
            connection.send(run)
        except (BrokenPipeError, EOFError, OSError):
            return


class Worker:
    """One kept process (see `serve`) and the leader's end of its pipe."""

    def __init__(self):
        self.connection, theirs = CONTEXT.Pipe()
        self.process = CONTEXT.Process(target=serve, args=(theirs,), daemon=True, name="mlqueue-forecast")
        self.process.start()
        theirs.close()

    def ask(self, payload: bytes, fraction: Mapping | None, options: dict) -> bool:
        """Send one run's request; False if the worker is gone."""
        try:
            self.connection.send_bytes(payload)
            self.connection.send((fraction, options))
        except (BrokenPipeError, EOFError, OSError):
            return False
        return True

    def ready(self) -> bool:
        return self.connection.poll() or not self.process.is_alive()

    def result(self) -> Run | None:
        try:
            return self.connection.recv() if self.connection.poll() else None
        except (EOFError, OSError):
            return None

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready() and time.monotonic() < deadline:
            self.connection.poll(min(0.5, max(0.0, deadline - time.monotonic())))

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.connection.close()


class Workers:
    """The two kept workers: the bound run and the likely one side by side, on two free cores
    the forecast in about the time of one run."""

    def __init__(self):
        self.kept: list[Worker] = []
        self.started = 0.0
        self.asked: list[Worker] = []

    def start(self, snapshot: ClusterSnapshot, fractions: Mapping | None, options: dict) -> None:
        """Start a forecast: the bound run and, with `fractions`, the likely one."""
        self.started = time.perf_counter()
        payload = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        runs = [None, fractions] if fractions else [None]
        for index in range(len(runs)):  # all started before any is sent its request: they start side by side
            self._spawned(index)
        self.asked = [self._asked(index, payload, fraction, options) for index, fraction in enumerate(runs)]

    def _spawned(self, index: int) -> Worker:
        """Kept worker `index`, spawned if it is not there or has died."""
        while len(self.kept) <= index:
            self.kept.append(Worker())
        if not self.kept[index].process.is_alive():
            self.kept[index].kill()
            self.kept[index] = Worker()
        return self.kept[index]

    def _asked(self, index: int, payload: bytes, fraction: Mapping | None, options: dict) -> Worker:
        """Kept worker `index`, sent the request (spawned again once if it died meanwhile; if
        that one fails too, its result is None: the forecast is lost, not the pass)."""
        worker = self._spawned(index)
        if not worker.ask(payload, fraction, options):
            worker.kill()
            worker = self.kept[index] = Worker()
            worker.ask(payload, fraction, options)
        return worker

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self.asked]

    def ready(self) -> bool:
        return all(worker.ready() for worker in self.asked)

    def wait(self, timeout: float) -> None:
        """Wait until each run has its result, at most `timeout` seconds each (tests, benches)."""
        for worker in self.asked:
            worker.wait(timeout)

    def result(self) -> Forecast | None:
        """The forecast, once `ready`; None if a worker died without its run (it is spawned
        again next time)."""
        runs = []
        for worker in self.asked:
            run = worker.result()
            if run is None:  # it died: `_spawned` replaces it next time
                log.warning("the forecast process ended without a result (exit code %s)", worker.process.exitcode)
                worker.kill()
            runs.append(run)
        self.asked = []
        if any(run is None for run in runs):
            return None
        return combine(runs[0], runs[1] if len(runs) > 1 else None)

    def kill(self) -> None:
        """End a forecast under way and every worker (the leader steps down or exits)."""
        for worker in self.kept:
            worker.kill()
        self.kept, self.asked = [], []
