"""The cyclic garbage collector, set for a long-running server process.

CPython collects its youngest generation every 700 net allocations. A web process holding an
agent's socket for each of 1,250 nodes keeps ~200,000 container objects alive for good, and
every young collection promotes what is merely in flight at that moment (a heartbeat's
coroutines, futures and frames, alive for the ~10 ms it waits for its batch). Those promotions
trigger a full collection every second or two, and a full collection walks every long-lived
object: 150-500 ms of CPU for a process holding 1,250 sockets (bench/heartbeats.py with a
collector probe), the pauses behind the heartbeats' p99 spikes, and ~40% of the web tier's CPU.

So, once the process has imported what it serves with: move everything alive then into the
permanent generation (`gc.freeze()`: modules, settings, URL patterns, never garbage), and
collect the youngest generation every `YOUNG_THRESHOLD` allocations instead of 700, so in-flight
objects are seldom caught alive and promoted. Reference counting still frees everything that
is not in a cycle at once; cycles are still collected, just in larger, rarer sweeps.
The web processes take the figure from `MLQ_GC_YOUNG_THRESHOLD` (settings; 700 is CPython's
default, for comparison).
"""

import gc

YOUNG_THRESHOLD = 50_000


def tune_for_server(young_threshold: int = YOUNG_THRESHOLD) -> None:
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
