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

A worker keeps the nodes and jobs of the last snapshot sent to it, and the next one sends in
place of each node or job that is the same object as there only its position (`Sent`): the
leader's kept reads give back the same objects for what did not change, so a forecast mostly
pickles and loads what changed since the last one, not the whole cluster (seed-2500: the
whole snapshot took ~55 ms to pickle and ~90 ms to load, in the leader and then each worker,
before either simulation began).
"""

import gc
import logging
import multiprocessing
import pickle
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from scheduling.core.model import ClusterSnapshot
from scheduling.sim.forecast import Forecast, Run, combine, simulate

log = logging.getLogger(__name__)

CONTEXT = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Sent:
    """A snapshot's nodes, running and pending jobs, in that order, as a worker holds them:
    `number` names it (a payload's base, see `payload`); `where`: each one's position, by id."""

    number: int
    items: tuple
    where: dict[int, int] = field(compare=False, repr=False)

    @classmethod
    def of(cls, number: int, snapshot: ClusterSnapshot) -> "Sent":
        items = (*snapshot.nodes, *snapshot.running, *snapshot.pending)
        return cls(number, items, {id(item): index for index, item in enumerate(items)})

    def positions(self, objects: tuple) -> tuple:
        """`objects`, each that is one of `items` (the same object) as its position there."""
        items, where, found = self.items, self.where, []
        for item in objects:
            index = where.get(id(item))
            found.append(index if index is not None and items[index] is item else item)
        return tuple(found)


def payload(snapshot: ClusterSnapshot, number: int, base: Sent | None) -> bytes:
    """The snapshot's pickle, numbered `number`: against `base` (what the worker holds, or None)
    each node and job it holds is its position there."""
    lists = (snapshot.nodes, snapshot.running, snapshot.pending)
    if base is not None:
        lists = tuple(base.positions(objects) for objects in lists)
    bare = replace(snapshot, nodes=(), running=(), pending=())
    message = (number, base.number if base is not None else None, bare, *lists)
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def loaded(data: bytes, held: Sent | None) -> tuple[ClusterSnapshot, Sent]:
    """The snapshot of a `payload`, read against what the worker holds (`held`), and what it
    holds next. A payload made against another base than `held` is an error."""
    number, base, bare, *lists = pickle.loads(data)
    if base is not None and (held is None or held.number != base):
        raise RuntimeError(f"a forecast payload against snapshot {base}, the worker holds {held and held.number}")
    if base is not None:
        items = held.items
        lists = [tuple(items[item] if type(item) is int else item for item in objects) for objects in lists]
    snapshot = replace(bare, nodes=lists[0], running=lists[1], pending=lists[2])
    return snapshot, Sent.of(number, snapshot)


def serve(connection) -> None:
    """A worker's body: for each request (the snapshot's `payload`, then the request's number
    and the run's fraction and options), one run (`simulate`) sent back with its number; until
    the pipe closes. A payload it cannot read against what it holds ends it (the leader spawns
    another). The collector sleeps through the run (a run makes next to no cyclic garbage: its
    peak memory is the same without it, and it is 3-4% faster), and the snapshot is frozen out
    of its sight until then. It ignores SIGINT: a Ctrl-C at a terminal reaches the whole
    process group, and the leader ends its workers itself (or, gone, closes their pipes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    held = None
    while True:
        try:
            data = connection.recv_bytes()
            number, fraction, options = connection.recv()
        except (EOFError, OSError):
            return
        snapshot, held = loaded(data, held)
        del data
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
        self.sent: Sent | None = None  # what it holds once it has read every payload sent
        self.sending: threading.Thread | None = None  # the latest request's send

    def ask(self, data: bytes, sent: Sent, fraction: Mapping | None, options: dict) -> None:
        """Send one run's request (`data`: a `payload` against `self.sent`, which is `sent`
        next), from a thread of its own (see the module's docstring), after the request
        before it: the worker reads each payload against the one before."""
        self.number += 1
        self.answer, self.sent = None, sent
        request = (self.number, fraction, options)
        self.sending = threading.Thread(
            target=self._send, args=(data, request, self.sending), daemon=True, name="mlqueue-forecast-send"
        )
        self.sending.start()

    def _send(self, data: bytes, request: tuple, before: threading.Thread | None) -> None:
        if before is not None:
            before.join()
        try:
            self.connection.send_bytes(data)
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
        self.payloads = 0  # how many were made (each payload's number)

    def start(self, snapshot: ClusterSnapshot, fractions: Mapping | None, options: dict) -> None:
        """Start a forecast: the bound run and, with `fractions`, the likely one. Whatever fails
        here (a worker that cannot be spawned) ends every worker before it is raised."""
        try:
            runs = [None, fractions] if fractions else [None]
            # Every worker spawned before any is asked: they start side by side.
            self.asked = [self._spawned(index) for index in range(len(runs))]
            self.payloads += 1
            sent, made = Sent.of(self.payloads, snapshot), {}
            for worker, fraction in zip(self.asked, runs, strict=True):
                base = worker.sent  # workers that hold the same snapshot get the same bytes
                if id(base) not in made:
                    made[id(base)] = payload(snapshot, self.payloads, base)
                worker.ask(made[id(base)], sent, fraction, options)
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
