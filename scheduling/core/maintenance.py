"""Maintenance windows as a pass sees them: per node, the next window that drains it.

A job starts on a node only if its time limit (`max_runtime_s`) ends before the node's next
window starts: otherwise the drain at the window's start would stop it and it would redo its
work elsewhere. A job that ends before the window may still use the node. Every job has a time
limit (the spec's default is the longest allowed), so none counts as unbounded; the store
passes only windows starting within that longest limit, as no job can run into a later one.
While a window is on, its nodes are drained (not READY), so nothing starts there anyway.
"""

from collections.abc import Iterable

from scheduling.core.model import MaintenanceWindow
from scheduling.core.placement import Limit
from scheduling.core.state import Slot

NEVER: frozenset[str] = frozenset()


class Windows:
    """The windows of one snapshot, by node: each node's next window not yet over. Asked once
    per job end time (jobs with equal limits share the answer)."""

    def __init__(self, windows: Iterable[MaintenanceWindow], now: float):
        self.next: dict[str, MaintenanceWindow] = {}
        for window in sorted(windows, key=lambda w: (w.start_at, w.window_id)):
            if window.end_at > now:
                for node in window.nodes:
                    self.next.setdefault(node, window)
        self.starts = tuple(sorted({window.start_at for window in self.next.values()}))
        self._closed: dict[float, frozenset[str]] = {}

    def closed(self, end_at: float) -> frozenset[str]:
        """The nodes a job ending at `end_at` must not start on: their window starts before."""
        if not self.next:
            return NEVER
        found = self._closed.get(end_at)
        if found is None:
            found = self._closed[end_at] = frozenset(n for n, w in self.next.items() if w.start_at < end_at)
        return found

    def clear_start(self, start, now: float, runtime_s: float):
        """`start(closed=...)`, a shadow start ((start_at, ...) or None) kept off those nodes, on
        nodes clear of windows for the whole run from the start it finds: a start later than now
        ends later, maybe past a window a start now would not reach (QA: a gang reserved a rack
        that a window would drain before the reserved start). Each step closes more nodes, so
        it starts no earlier; it ends once the nodes closed stay the same."""
        closed = self.closed(now + runtime_s)
        while True:
            found = start(closed=closed)
            if found is None or not self.next:
                return found
            wider = self.closed(found[0] + runtime_s)
            if wider == closed:
                return found
            closed = wider

    def variant(self, end_at: float, runtime_s: float | None = None) -> tuple:
        """What about the windows matters to a job ending at `end_at` (for memoizing failures
        and equal jobs): which window starts it ends before (none: asked of every job left
        blocked, most passes have no window); and, where given, its time limit, on which a
        reservation's nodes clear of windows depend (`clear_start`)."""
        if not self.starts:
            return ()
        found = tuple(end_at <= start for start in self.starts)
        return found if runtime_s is None else (*found, runtime_s)

    def limit(self, end_at: float, limit: Limit | None) -> Limit | None:
        """`limit` (the reservations' caps), and 0 on the nodes closed to a job ending at `end_at`."""
        closed = self.closed(end_at)
        if not closed:
            return limit

        def windowed(slot: Slot) -> int | None:
            if slot.name in closed:
                return 0
            return limit(slot) if limit is not None else None

        return windowed

    def first_on(self, nodes: Iterable[str], end_at: float) -> MaintenanceWindow | None:
        """The earliest window on `nodes` that a job ending at `end_at` would run into."""
        hit = [self.next[n] for n in nodes if n in self.next and self.next[n].start_at < end_at]
        return min(hit, key=lambda w: (w.start_at, w.window_id)) if hit else None
