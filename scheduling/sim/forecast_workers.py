"""The forecast's two simulations (scheduling/sim/forecast.py), each in a process of its own,
kept from one forecast to the next.

A fresh process per simulation cost the leader most of a second at seed-2500 scale before the
simulations began (BENCHMARKS.md, "The forecast in kept worker processes"): `Process.start`
pickles its arguments into the child's pipe and waits there while the child starts Python and
imports the core, the two children in turn. Kept workers are spawned once (nothing of the
leader's connections or threads is inherited); each forecast pickles the snapshot once and
sends the same bytes to both, each from a thread of its own: a worker that does not read (one
stopped, or still on an earlier run) holds up that thread, never the leader's pass. Requests
are numbered and a worker's answer to an earlier one is dropped, so a worker left behind by
a forecast given up never answers the next one with the old run. An idle worker whose pipe
closes (the leader gone) exits; a busy one finishes its run, fails to send it, and exits. One
that died is spawned again for the next forecast; `kill` ends a forecast under way with its
workers. No Django here: the leader's `Forecaster` and bench/forecast.py run the same code.
"""

import gc
import logging
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Mapping

from scheduling.core.model import ClusterSnapshot
from scheduling.sim.forecast import Forecast, Run, combine, simulate

log = logging.getLogger(__name__)

CONTEXT = multiprocessing.get_context("spawn")


def serve(connection) -> None:
    """A worker's body: for each request (the snapshot's pickle, then the request's number and
    the run's fraction and options), one run (`simulate`) sent back with its number; until the
    pipe closes. The collector sleeps through the run (a run makes next to no cyclic garbage:
    its peak memory is the same without it, and it is 3-4% faster), and the snapshot is frozen
    out of its sight until then. It ignores SIGINT: a Ctrl-C at a terminal reaches the whole
    process group, and the leader ends its workers itself (or, gone, closes their pipes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            payload = connection.recv_bytes()
            number, fraction, options = connection.recv()
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
            connection.send((number, run))
        except (BrokenPipeError, EOFError, OSError):
            return


class Worker:
    """One kept process (see `serve`), the leader's end of its pipe, and its latest request."""

    def __init__(self):
        self.connection, theirs = CONTEXT.Pipe()
        self.process = CONTEXT.Process(target=serve, args=(theirs,), daemon=True, name="mlqueue-forecast")
        self.process.start()
        theirs.close()
        self.number = 0  # of the latest request
        self.answer: Run | None = None  # the latest request's run, once read

    def ask(self, payload: bytes, fraction: Mapping | None, options: dict) -> None:
        """Send one run's request, from a thread of its own (see the module's docstring)."""
        self.number += 1
        self.answer = None
        request = (self.number, fraction, options)
        threading.Thread(target=self._send, args=(payload, request), daemon=True, name="mlqueue-forecast-send").start()

    def _send(self, payload: bytes, request: tuple) -> None:
        try:
            self.connection.send_bytes(payload)
            self.connection.send(request)
        except (BrokenPipeError, EOFError, OSError):
            pass  # it died (or was killed): `ready` finds it gone

    def ready(self) -> bool:
        """Whether the latest request has its answer, or never will (the worker is gone)."""
        self._read()
        return self.answer is not None or not self.process.is_alive()

    def _read(self) -> None:
        while self.answer is None and not self.connection.closed:
            try:
                if not self.connection.poll():
                    return
                number, run = self.connection.recv()
            except (EOFError, OSError):
                return
            if number == self.number:  # else an earlier request's, given up: dropped
                self.answer = run

    def result(self) -> Run | None:
        """The latest request's run; None if the worker died without it."""
        self._read()
        return self.answer

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
        self.asked: list[Worker] = []

    def start(self, snapshot: ClusterSnapshot, fractions: Mapping | None, options: dict) -> None:
        """Start a forecast: the bound run and, with `fractions`, the likely one. Whatever fails
        here (a worker that cannot be spawned) ends every worker before it is raised."""
        try:
            payload = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
            runs = [None, fractions] if fractions else [None]
            # Every worker spawned before any is asked: they start side by side.
            self.asked = [self._spawned(index) for index in range(len(runs))]
            for worker, fraction in zip(self.asked, runs, strict=True):
                worker.ask(payload, fraction, options)
        except BaseException:
            self.kill()
            raise

    def _spawned(self, index: int) -> Worker:
        """Kept worker `index`, spawned if it is not there or has died."""
        while len(self.kept) <= index:
            self.kept.append(Worker())
        if not self.kept[index].process.is_alive():
            self.kept[index].kill()
            self.kept[index] = Worker()
        return self.kept[index]

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
        """The forecast, once `ready`; None if a worker died without its run, or had none yet
        (asked before `ready`): that worker is ended, and spawned again next time."""
        runs = []
        for worker in self.asked:
            run = worker.result()
            if run is None:  # `_spawned` replaces it next time
                if worker.process.is_alive():
                    log.warning("a forecast process gave no result in time: ended")
                else:
                    log.warning("the forecast process ended without a result (exit code %s)", worker.process.exitcode)
                worker.kill()
            runs.append(run)
        self.asked = []
        if not runs or any(run is None for run in runs):  # nothing asked (ended meanwhile), or lost
            return None
        return combine(runs[0], runs[1] if len(runs) > 1 else None)

    def kill(self) -> None:
        """End a forecast under way and every worker (the leader steps down or exits)."""
        for worker in self.kept:
            worker.kill()
        self.kept, self.asked = [], []
