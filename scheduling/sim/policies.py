"""The policies a replay compares. `mlqueue` is the core as configured; the baselines are
written here, on the core's own placement (best fit, one zone per gang), so a comparison
measures the queueing policy and not the node picking:

- `fifo`: strict first come, first served; the first job that does not fit blocks the rest.
- `easy`: FIFO with EASY backfill: the first blocked job reserves the earliest room the running
  jobs' estimates promise; later jobs start only if they cannot delay it.
- `sjf`: oracle shortest job first (true durations), no reservation: starves big jobs.
"""

from scheduling.core.decisions import Decisions, Placement
from scheduling.core.model import ClusterSnapshot, PendingJob, RunningJob
from scheduling.core.placement import commit, plan
from scheduling.core.reservation import ReservationBook, shadow_start
from scheduling.core.scheduler import Scheduler
from scheduling.core.state import ClusterState


class MlqueuePolicy:
    name = "mlqueue"
    preempts = True  # by priority class and to reclaim guarantees
    uses_time = True  # aging and the wait bound change its order as time passes
    follows_changes = True  # `decide` takes the jobs that started or ended since the last pass

    def __init__(self, *, reclaim_turn: frozenset[str] = frozenset()):
        """`reclaim_turn`: where the backlog gate held before the first pass (a forecast goes
        on from the live scheduler's; see `ClusterSnapshot.reclaim_turn`)."""
        # Kept between passes as the worker keeps it: the same decisions as `schedule()`,
        # without indexing the whole fleet again each pass. The simulator reads only what a
        # pass starts, evicts and nominates, so a pass stops at what can still start.
        self.scheduler = Scheduler(actions_only=True)
        self.scheduler.reclaim_turn = reclaim_turn

    def decide(self, snapshot: ClusterSnapshot, moved=None) -> Decisions:
        """`moved`: see `Scheduler.schedule` (the simulator knows what it started and ended)."""
        return self.scheduler.schedule(snapshot, moved=moved)


class FifoPolicy:
    name = "fifo"
    backfill = False

    def order(self, snapshot: ClusterSnapshot) -> list[PendingJob]:
        return sorted(snapshot.pending, key=lambda j: (j.submitted_at, j.job_id))

    def decide(self, snapshot: ClusterSnapshot) -> Decisions:
        state = ClusterState(snapshot.nodes, snapshot.running)
        running, placements = list(snapshot.running), []
        book = ReservationBook()
        for job in self.order(snapshot):
            end_at = snapshot.now + job.max_runtime_s
            chosen = plan(state, job.shape, book.limit_for(end_at))
            if chosen is not None:
                placements.append(self._start(state, job, chosen, book, end_at, running, snapshot.now))
            elif not self.reserve(state, job, running, book, snapshot.now):
                break
        return Decisions(placements=tuple(placements))

    def reserve(self, state, job, running, book, now) -> bool:
        """The head is blocked: FIFO stops here; EASY reserves for it and goes on."""
        return False

    @staticmethod
    def _start(state, job, chosen, book, end_at, running, now) -> Placement:
        tasks = commit(state, chosen, job.shape)
        book.consume(chosen, job.shape, end_at)
        running.append(RunningJob(job.job_id, job.team, job.priority, job.shape.gpu_type, tasks, now, end_at))
        return Placement(job.job_id, tasks)


class EasyPolicy(FifoPolicy):
    name = "easy"

    def reserve(self, state, job, running, book, now) -> bool:
        if book.reservations:
            return True  # one reservation (the head's); the rest only backfill around it
        found = shadow_start(state, job, [r for r in running if r.resource_class == job.resource_class], now)
        if found is None:
            return True
        start_at, chosen, extra = found
        book.add(job, start_at, chosen, extra, strict=False)
        return True


class SjfPolicy(FifoPolicy):
    name = "sjf"

    def __init__(self, durations: dict[int, float]):
        self.durations = durations

    def order(self, snapshot: ClusterSnapshot) -> list[PendingJob]:
        return sorted(snapshot.pending, key=lambda j: (self.durations[j.job_id], j.submitted_at, j.job_id))

    def reserve(self, state, job, running, book, now) -> bool:
        return True  # never blocks: whatever fits next starts


def make_policy(name: str, *, durations: dict[int, float] | None = None):
    if name == "mlqueue":
        return MlqueuePolicy()
    if name == "fifo":
        return FifoPolicy()
    if name == "easy":
        return EasyPolicy()
    if name == "sjf":
        return SjfPolicy(durations or {})
    raise ValueError(f"unknown policy {name!r}; known: mlqueue, fifo, easy, sjf")
