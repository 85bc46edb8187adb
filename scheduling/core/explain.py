"""Pending reasons: a code and a sentence with the numbers a user can act on.

Capacity reasons come with a per-node histogram, kube-scheduler style:
"0/36 nodes fit a task: 20 other resource class, 12 fewer than 8 free H100, 4 NEW".
"""

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import NamedTuple

from scheduling.core.conditions import waiting_message
from scheduling.core.decisions import Reservation
from scheduling.core.model import (
    Group,
    JobShape,
    MaintenanceWindow,
    Node,
    NodeState,
    PendingJob,
    Topology,
    labels_match,
    tasks_per_node,
)
from scheduling.core.placement import capacity
from scheduling.core.reasons import PendingReason, ReasonCode
from scheduling.core.state import ClusterState, Slot

# A histogram's count of nodes that cannot take a job naming an image: "2 without a container runtime".
NO_CONTAINER_RUNTIME = "without a container runtime"


def clock(t: float) -> str:
    """Epoch seconds as a UTC time of day; small (virtual) times as seconds."""
    if t < 10**9:
        return f"t={t:.0f}s"
    seconds = int(t) % 86400
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d} UTC"


def clock_seconds(t: float) -> str:
    """`clock` to the second: for moments a minute apart or less (a grace period's end)."""
    if t < 10**9:
        return clock(t)
    seconds = int(t) % 86400
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d} UTC"


def held() -> PendingReason:
    return PendingReason(ReasonCode.HELD, "held: it will not start until it is released")


def dependency(job: PendingJob) -> PendingReason:
    return PendingReason(ReasonCode.DEPENDENCY, waiting_message(job.waiting_edges))


def group_limit(job: PendingJob, group: Group) -> PendingReason:
    kind, parallelism, settling = group.kind, group.parallelism, group.settling
    what = "element" if kind == "array" else "trial" if kind == "sweep" else "job"
    what += "" if parallelism == 1 else "s"
    taken = f"{_are(parallelism)} running or starting"
    if settling:  # Group.settling: failed children awaiting the verdict hold their slots
        taken = (
            f"{_are(max(parallelism - settling, 0))} running or starting and {settling} failed just now (a"
            " failed one holds its slot until it is retried or failed for good)"
        )
    return PendingReason(
        ReasonCode.GROUP_LIMIT,
        f"its {kind or 'group'} (job {job.group}) runs at most {parallelism} {what} at once, and "
        f"{taken}; it starts when one of them ends",
    )


def _are(count: int) -> str:
    return f"{count} is" if count == 1 else f"{count} are"


def backoff(job: PendingJob, now: float) -> PendingReason:
    wait = job.not_before - now
    return PendingReason(ReasonCode.BACKOFF, f"retry back-off until {clock(job.not_before)} ({wait:.0f} s from now)")


def maintenance(job: PendingJob, window: MaintenanceWindow, now: float) -> PendingReason:
    if window.start_at <= now:  # under way: "drains at" a time past read as a mistake
        return PendingReason(
            ReasonCode.MAINTENANCE,
            f"{window.target} {_verb(window, 'is', 'are')} under maintenance until {day_and_clock(window.end_at)} "
            f"(maintenance #{window.window_id}); this job would start inside it",
        )
    return PendingReason(
        ReasonCode.MAINTENANCE,
        f"{describe_window(window)}; this job's {length(job.max_runtime_s)} time limit would run into it",
    )


def describe_window(window: MaintenanceWindow) -> str:
    """ "rack z1-r3 drains at 2026-12-06 02:00 UTC for 4 h (maintenance #7)": with the date, as
    windows are scheduled days ahead (a time of day alone reads as tonight's)."""
    return (
        f"{window.target} {_verb(window, 'drains', 'drain')} at {day_and_clock(window.start_at)} for "
        f"{length(window.end_at - window.start_at)} (maintenance #{window.window_id})"
    )


def _verb(window: MaintenanceWindow, one: str, several: str) -> str:
    """A window's target is one rack or zone, or "3 nodes" (a node list): the verb agrees."""
    return several if window.target.endswith(" nodes") else one


def day_and_clock(t: float) -> str:
    """Epoch seconds as a UTC date and time of day (`clock` for small, virtual times)."""
    if t < 10**9:
        return clock(t)
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def clock_near(t: float, now: float) -> str:
    """`clock` for a time on `now`'s UTC day, `day_and_clock` for a later one (a reservation
    30 hours ahead is not "05:00 UTC")."""
    if t < 10**9 or int(t) // 86400 == int(now) // 86400:
        return clock(t)
    return day_and_clock(t)


def length(seconds: float) -> str:
    """A window's or a time limit's length: "4 h", "1.5 h", "45 min", "30 s"."""
    if seconds >= 3600:
        return f"{round(seconds / 3600, 2):g} h"
    if seconds >= 60:
        return f"{round(seconds / 60, 1):g} min"
    return f"{seconds:.0f} s"


def quota(job: PendingJob, over: tuple[str, int, int, int], parent_figures: bool = True) -> PendingReason:
    """`parent_figures`: whether a parent team's use, guarantee and limit may be named (see
    `PolicyConfig.parent_quota_figures`); if not, the reason names only the limit that holds."""
    name, used, guaranteed, limit = over
    unit, who = job.shape.unit_name, ("team" if name == job.team else "parent team")
    if who == "parent team" and not parent_figures:
        if job.shape.units > limit:
            said = f"this job asks {job.shape.units} {unit}, more than parent team {name} may ever hold"
            return PendingReason(ReasonCode.QUOTA, f"{said}: it can start only once that quota is raised")
        said = f"parent team {name} has reached its borrowing limit of {unit}"
        return PendingReason(ReasonCode.QUOTA, f"{said}; this job needs {job.shape.units} more")
    if job.shape.units > limit:  # however little the team runs: only a larger quota lets it start
        return PendingReason(ReasonCode.QUOTA, over_ceiling(who, name, unit, guaranteed, limit, job.shape.units))
    return PendingReason(
        ReasonCode.QUOTA,
        (f"{who} {name} uses {used} {unit} ({holds(guaranteed, limit)}); this job needs {job.shape.units} more"),
    )


def holds(guaranteed: int, limit: int) -> str:
    """The most a team may hold, as its guarantee and the borrowing limit on top of it: "at most
    96: 32 guaranteed + 64 borrowing limit". It said "borrowing limit reached at 96" where `mlq
    quota` shows the limit as 64 (QA)."""
    return f"at most {limit}: {guaranteed} guaranteed + {limit - guaranteed} borrowing limit"


def over_ceiling(who: str, name: str, unit: str, guaranteed: int, limit: int, units: int) -> str:
    return (
        f"this job asks {units} {unit}, more than {who} {name} may ever hold ({holds(guaranteed, limit)}): "
        "it can start only once that quota is raised"
    )


def nothing_to_borrow(job: PendingJob, used: int, guaranteed: int, free: int) -> PendingReason:
    unit = job.shape.unit_name
    return PendingReason(
        ReasonCode.QUOTA,
        (
            f"team {job.team} at {used}/{guaranteed} guaranteed {unit}, nothing idle to borrow "
            f"(needs {job.shape.units}, {free} free)"
        ),
    )


def preempting(
    job: PendingJob, victims: Iterable[int], units: int, reclaim: bool, stop_by: float | None = None
) -> PendingReason:
    """`stop_by`: when the last of the victims is killed if it has not stopped by then."""
    ids = ", ".join(str(v) for v in sorted(victims))
    why = "borrowed by other teams" if reclaim else "of lower priority"
    by = f" (SIGKILL at {clock_seconds(stop_by)} if not sooner)" if stop_by is not None else ""
    return PendingReason(
        ReasonCode.PREEMPTING,
        (f"stopping job(s) {ids} ({units} {job.shape.unit_name} {why}); it starts once they have stopped{by}"),
    )


def preemption_pending(job: PendingJob, victims: int, at: float, minimum: float) -> PendingReason:
    noun = "victim" if victims == 1 else "victims"
    return PendingReason(
        ReasonCode.PREEMPTION_PENDING,
        (f"{victims} {noun} reachable at {clock(at)} after their {duration(minimum)} minimum"),
        until=at,
    )


def reclaim_after_bound(job: PendingJob, victims: int, at: float, bound: float, spared: str) -> PendingReason:
    """Victims a reclaim spares until the owner has waited `bound`, and why (`spared`)."""
    noun = "victim" if victims == 1 else "victims"
    return PendingReason(
        ReasonCode.PREEMPTION_PENDING,
        f"within team {job.team}'s guarantee: {victims} {noun} reclaimable at {clock(at)}, once it has waited "
        f"{span(bound)} (spared until then: {spared})",
        until=at,
    )


def reclaim_delayed(job: PendingJob, delay: float) -> PendingReason:
    return PendingReason(
        ReasonCode.PREEMPTION_PENDING,
        (
            f"within team {job.team}'s guarantee: it reclaims borrowed {job.shape.unit_name} once it has waited "
            f"{span(delay)}, if no room frees up before"
        ),
    )


def reclaim_waits_turn(job: PendingJob, ahead: PendingJob) -> PendingReason:
    return PendingReason(
        ReasonCode.PREEMPTION_PENDING,
        (
            f"within team {job.team}'s guarantee: it reclaims borrowed {job.shape.unit_name} once no job before it "
            f"waits for that room (job {ahead.job_id} waits for {ahead.shape.units} {ahead.shape.unit_name})"
        ),
    )


def span(seconds: float) -> str:
    """A wait as a noun: "2 hours", "30 minutes", "1 minute", "90 seconds"."""
    if seconds >= 3600 and seconds % 3600 == 0:
        count, unit = seconds / 3600, "hour"
    elif seconds >= 60 and seconds % 60 == 0:
        count, unit = seconds / 60, "minute"
    else:
        count, unit = seconds, "second"
    return f"{count:.0f} {unit}{'' if count == 1 else 's'}"


def duration(seconds: float) -> str:
    """A minimum runtime as an adjective: "3-hour", "10-minute", "90-second"."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f}-hour"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:.0f}-minute"
    return f"{seconds:.0f}-second"


def behind_reservation(job: PendingJob, first: Reservation, held: int, now: float) -> PendingReason:
    """Named after the reservation it would delay (`PassReasons._in_the_way`), the class's
    others (`held` in all) counted."""
    hours = max(0.0, (first.start_at - now) / 3600)
    others = f" (and {held - 1} other reservation(s))" if held > 1 else ""
    return PendingReason(
        ReasonCode.BEHIND_RESERVATION,
        (
            f"fits now, but would delay job {first.job_id}, which holds {len(first.nodes)} node(s) from "
            f"{clock_near(first.start_at, now)}{others}; with max_runtime_hours <= {hours:.2f} it could start now"
        ),
    )


def held_for_preemptors(job: PendingJob, preemptors: list[int]) -> PendingReason:
    ids = ", ".join(str(p) for p in preemptors)
    return PendingReason(
        ReasonCode.BEHIND_RESERVATION,
        (f"fits the free room, but it is held for job {ids}, which preempted jobs to start there"),
    )


def behind_others(job: PendingJob, placed_units: int) -> PendingReason:
    return PendingReason(
        ReasonCode.PRIORITY,
        (
            f"fits the cluster, but jobs ahead of it in the queue (higher priority or lower fair share) "
            f"took {placed_units} {job.shape.unit_name} this pass"
        ),
    )


def with_reservation(reason: PendingReason, reservation: Reservation | None, now: float) -> PendingReason:
    if reservation is None:
        return reason
    return replace(reason, message=reason.message + _reserved(reason, reservation, now))


def without_reservation(reason: PendingReason, reservation: Reservation | None, now: float) -> PendingReason:
    """`reason` as it was before `with_reservation` added `reservation` to it at `now`: what a
    job of the same team and shape without a reservation of its own waits for."""
    if reservation is None:
        return reason
    return replace(reason, message=reason.message.removesuffix(_reserved(reason, reservation, now)))


def _reserved(reason: PendingReason, reservation: Reservation, now: float) -> str:
    """The reservation's nodes and shadow start. The start is left out when the reason already
    gives an earlier one (`until`: victims reachable at 23:05): the shadow start ignores the
    preemption, and "estimated start" a week on would contradict it."""
    held = f"; reserved {len(reservation.nodes)} node(s)"
    if reason.until is not None and reservation.start_at >= reason.until:
        return held
    return f"{held}, estimated start {clock_near(reservation.start_at, now)}"


class CapacityExplainer:
    """Explains "no room" per job shape against the pass's final state (memoized: many jobs
    share a shape). What it worked out for a class holds while the class's room does (the
    state's change count): a `Scheduler` keeps one explainer per state across passes."""

    def __init__(self, state: ClusterState, nodes: tuple[Node, ...]):
        self.state = state
        self.nodes = nodes
        self.class_sizes = {rclass: len(slots) for rclass, slots in state.by_class.items()}
        self.not_ready: dict[str, Counter[str]] = {}
        # Per class: the change count it was worked out at, then reasons, histograms, matching nodes.
        self.classes: dict[str, tuple[int, dict, dict, dict]] = {}
        self.matching_nodes: dict[tuple, tuple[list[Slot], int]] = {}  # see `_matching_nodes`

    def _memos(self, rclass: str) -> tuple[int, dict, dict, dict]:
        changes = self.state.changes[rclass]
        found = self.classes.get(rclass)
        if found is None or found[0] != changes:
            found = self.classes[rclass] = (changes, {}, {}, {})
        return found

    def explain(self, job: PendingJob) -> PendingReason:
        return self.explain_shape(job.shape)

    def explain_shape(self, shape: JobShape) -> PendingReason:
        memo, key = self._memos(shape.resource_class)[1], (shape.key(), shape.tasks)
        if key not in memo:
            memo[key] = self._explain(shape)
        return memo[key]

    def _explain(self, shape: JobShape) -> PendingReason:
        histogram, fit = self.node_histogram(shape)
        fit_count = f"{fit}/{len(self.nodes)}"
        summary = f"{fit_count} nodes fit a task: " + ", ".join(f"{n} {why}" for why, n in histogram)
        matching, free, total = self.matching(shape)
        if not matching:
            code, message = ReasonCode.NO_MATCHING_NODES, self._no_match(shape)
        elif free >= shape.units:
            code, message = self._split_or_short(shape, matching, free)
        else:
            code = ReasonCode.INSUFFICIENT_CAPACITY
            message = f"needs {shape.units} {shape.unit_name}; {free} of {total} free"
        return PendingReason(code, f"{message} ({summary}){self._excluded(shape)}", histogram, fit_count)

    def _excluded(self, shape: JobShape) -> str:
        """The class's GPUs out of placement for a fault, if any: room the user might count on."""
        hit = [n for n in self.nodes if n.excluded_gpus and n.resource_class == shape.resource_class]
        if not hit:
            return ""
        gpus = sum(len(n.excluded_gpus) for n in hit)
        where = ", ".join(f"{n.name} GPU {','.join(map(str, n.excluded_gpus))}" for n in hit[:3])
        more = f" and {len(hit) - 3} more node(s)" if len(hit) > 3 else ""
        return f"; {gpus} {shape.unit_name} excluded as unhealthy ({where}{more})"

    def node_histogram(self, shape: JobShape) -> tuple[tuple[tuple[str, int], ...], int]:
        """Nodes by why they cannot take one task: another class, not READY, too little free
        room (read off the free-room index, not node by node), then labels, CPUs, memory,
        scratch disk, a container runtime.
        One task's needs decide it, not the job's task count or topology: computed once each."""
        key = (
            shape.resource_class,
            shape.units_per_task,
            shape.cpus_per_task,
            shape.memory_gb_per_task,
            tuple(sorted(shape.node_selector.items())),
            shape.scratch_disk_gb,
            shape.image,
        )
        histograms = self._memos(shape.resource_class)[2]
        if key not in histograms:
            histograms[key] = self._histogram(shape)
        return histograms[key]

    def _histogram(self, shape: JobShape) -> tuple[tuple[tuple[str, int], ...], int]:
        counts: Counter[str] = Counter(self._not_ready(shape.resource_class))
        counts["other resource class"] = len(self.nodes) - self.class_sizes.get(shape.resource_class, 0)
        levels = self.state.buckets.get(shape.resource_class, {})
        counts[f"fewer than {shape.units_per_task} free {shape.unit_name}"] = sum(
            len(slots) for free, level in levels.items() if free < shape.units_per_task for slots in level.values()
        )
        for slot in self.state.slots_by_free(shape.resource_class, shape.units_per_task):
            counts[self._rejection(slot, shape)] += 1
        fit = counts.pop("", 0)
        present = ((why, n) for why, n in counts.items() if n)
        return tuple(sorted(present, key=lambda kv: (-kv[1], kv[0]))), fit

    def matching(self, shape: JobShape) -> tuple[list[Slot], int, int]:
        """Ready nodes of the class that could ever take the job (the selector's labels, the
        scratch disk it asks, a container runtime for its image), their free and total units: a
        job that only nodes with too little disk have room for waits for capacity, it is not
        fragmented."""
        key = (
            shape.resource_class,
            tuple(sorted(shape.node_selector.items())),
            shape.scratch_disk_gb,
            shape.image,
            shape.gpus_per_task,
            shape.cpus_per_task,
            shape.memory_gb_per_task,
        )
        matching = self._memos(shape.resource_class)[3]
        if key not in matching:
            slots, total = self._matching_nodes(shape, key)
            matching[key] = (slots, sum(s.free_units for s in slots), total)
        return matching[key]

    def _matching_nodes(self, shape: JobShape, key: tuple) -> tuple[list[Slot], int]:
        """`matching`'s nodes and their total units: what of them holds as long as the state
        (its nodes, which are ready), so not worked out again when the class's room changes.
        Without a node selector, `_could_take` reads only a node's size, scratch disk and whether
        it runs images: asked once per size (a cold seed-2500 pass works out ~40 shapes over a
        class's nodes each)."""
        found = self.matching_nodes.get(key)
        if found is None:
            ready = self.state.ready_slots(shape.resource_class)
            if shape.node_selector:
                slots = [s for s in ready if _could_take(s.node, shape)]
            else:  # then a node's size, scratch disk and images decide, asked once per size
                sizes: dict[tuple, bool] = {}
                slots = []
                for slot in ready:
                    node = slot.node
                    size = (node.gpus, node.cpus, node.memory_gb, node.scratch_disk_gb, node.runs_images)
                    fits = sizes.get(size)
                    if fits is None:
                        fits = sizes[size] = _could_take(node, shape)
                    if fits:
                        slots.append(slot)
            found = self.matching_nodes[key] = (slots, sum(s.total_units for s in slots))
        return found

    def _not_ready(self, rclass: str) -> Counter[str]:
        if rclass not in self.not_ready:
            self.not_ready[rclass] = Counter(
                n.state.value for n in self.nodes if n.resource_class == rclass and n.state != NodeState.READY
            )
        return self.not_ready[rclass]

    @staticmethod
    def _rejection(slot: Slot, shape: JobShape) -> str:
        """Why a ready node with enough free units cannot take one task ("" if it can)."""
        if not labels_match(shape.node_selector, slot.node.labels):
            return "without " + ",".join(f"{k}={v}" for k, v in sorted(shape.node_selector.items()))
        if shape.gpu_type and slot.free_cpus < shape.cpus_per_task:
            return "too few free CPUs"
        if slot.free_memory < shape.memory_gb_per_task:
            return "too little free memory"
        if slot.node.lacks_scratch(shape.scratch_disk_gb):
            return "too little scratch disk"
        if slot.node.lacks_images(shape.image):
            return NO_CONTAINER_RUNTIME
        return ""

    def _no_match(self, shape: JobShape) -> str:
        same = [n for n in self.nodes if n.resource_class == shape.resource_class]
        states = Counter(n.state.value for n in same if _could_take(n, shape))
        detail = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
        selector = "".join(f" {k}={v}" for k, v in sorted(shape.node_selector.items()))
        what = f"gpu_type={shape.gpu_type}" if shape.gpu_type else "CPU"
        disk = f" and {shape.scratch_disk_gb} GB of scratch disk" if shape.scratch_disk_gb else ""
        disk += " and a container runtime for its image" if shape.image else ""
        small = any(labels_match(shape.node_selector, n.labels) and not _holds_a_task(n, shape) for n in same)
        size = f" and room for one task ({_task(shape)})" if small else ""
        return f"no READY node has {what}{selector}{disk}{size} (matching nodes: {detail})"

    def _split_or_short(self, shape: JobShape, matching: list[Slot], free: int) -> tuple[ReasonCode, str]:
        """As many units free as the job needs, on the nodes that could take it, and still no
        room: FRAGMENTED only where they are split so that no block (its node, or the gang's
        rack or zone) holds its tasks' units. Where one does but the CPUs or memory beside them
        do not, the job waits for that room (a node with 2 free A100 and 4 free CPUs is no
        fragment to a task of 1 A100 and 16 CPUs): the message names what is short there."""
        scope, group = _block_scope(shape)
        by_units: dict[str, int] = defaultdict(int)  # tasks a block holds by its free units alone
        whole: dict[str, int] = defaultdict(int)  # and by all a task takes
        blocks: dict[str, list[Slot]] = defaultdict(list)
        for slot in matching:
            by_units[group(slot)] += _unit_tasks(slot, shape)
            whole[group(slot)] += capacity(slot, shape)
            blocks[group(slot)].append(slot)
        short = [b for b in sorted(blocks) if by_units[b] >= shape.tasks]
        if not short or not _beside(shape) or any(whole[b] >= shape.tasks for b in short):
            return ReasonCode.FRAGMENTED, self._fragmented(shape, matching, free)
        # The block nearest to holding the job, then the one with most free units, then by name.
        where = max(short, key=lambda b: (whole[b], sum(s.free_units for s in blocks[b])))
        return ReasonCode.INSUFFICIENT_CAPACITY, _short_beside(shape, scope, where, blocks[where], whole[where])

    def _fragmented(self, shape: JobShape, matching: list[Slot], free: int) -> str:
        scope, group = _block_scope(shape)
        blocks: dict[str, int] = defaultdict(int)
        for slot in matching:
            blocks[group(slot)] += slot.free_units
        where, largest = max(sorted(blocks.items()), key=lambda kv: kv[1])
        return (
            f"needs {shape.units} {shape.unit_name} in one {scope}; {free} free but the largest block is "
            f"{largest} ({scope} {where})"
        )


class _Beside(NamedTuple):
    """What a task takes beside its units that a node's free room may lack."""

    need: str  # the JobShape attribute
    free: str  # the Slot attribute
    asked: str  # "{} CPUs"
    has: str  # "{} free CPUs"
    noun: str  # "CPUs", in a gang's sentence


# In the order the histogram blames them (`_rejection`).
BESIDE_UNITS = (
    _Beside("cpus_per_task", "free_cpus", "{} CPUs", "{} free CPUs", "CPUs"),
    _Beside("memory_gb_per_task", "free_memory", "{} GB of memory", "{} GB of free memory", "memory"),
)


def _unit_tasks(slot: Slot, shape: JobShape) -> int:
    """Tasks of `shape` the slot's free units alone hold (GPUs, or a CPU job's CPUs)."""
    return slot.free_units // shape.units_per_task if shape.units_per_task else 1 << 30


def _beside(shape: JobShape) -> list[_Beside]:
    """The needs of `BESIDE_UNITS` the job asks (a CPU job's CPUs are its units, not beside them)."""
    return [b for b in BESIDE_UNITS if getattr(shape, b.need) and (shape.gpu_type or b.need != "cpus_per_task")]


def _short_beside(shape: JobShape, scope: str, where: str, slots: list[Slot], holds: int) -> str:
    """The block's free units hold the job's tasks, but not with the CPUs or memory beside them:
    "needs 1 A100 and 16 CPUs on one node; the 2 free A100 on n1 have 4 free CPUs beside them".
    Each need is blamed that alone beside the units leaves the block short; if none alone does
    (a gang's nodes each short of another), all of them are."""
    needs = _beside(shape)
    short = [b for b in needs if _tasks_beside(shape, slots, b) < shape.tasks] or needs
    asked = _and(
        [f"{shape.units_per_task} {shape.unit_name}"] + [b.asked.format(getattr(shape, b.need)) for b in short]
    )
    free = sum(s.free_units for s in slots)
    if shape.tasks == 1:
        have = _and([b.has.format(getattr(slots[0], b.free)) for b in short])
        return f"needs {asked} on one node; the {free} free {shape.unit_name} on {where} have {have} beside them"
    return (
        f"needs {shape.tasks} tasks of {asked} in one {scope}; the {free} free {shape.unit_name} in {scope} "
        f"{where} hold its {shape.tasks} tasks, but the free {_and([b.noun for b in short])} beside them hold {holds}"
    )


def _tasks_beside(shape: JobShape, slots: list[Slot], beside: _Beside) -> int:
    """Tasks the slots hold by their free units and one need beside them alone."""
    per_task = getattr(shape, beside.need)
    return sum(min(_unit_tasks(s, shape), getattr(s, beside.free) // per_task) for s in slots)


def _and(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _could_take(node: Node, shape: JobShape) -> bool:
    """What of a node does not change while the job waits: its labels, its scratch disk, whether
    it runs images and its size (a node too small for one task is no block the job could use)."""
    return (
        labels_match(shape.node_selector, node.labels)
        and not node.lacks_scratch(shape.scratch_disk_gb)
        and not node.lacks_images(shape.image)
        and _holds_a_task(node, shape)
    )


def _holds_a_task(node: Node, shape: JobShape) -> bool:
    """Whether the whole node could hold one task: GPUs excluded for a fault count (they come
    back once repaired, and the reason names them)."""
    return tasks_per_node(shape, gpus=node.gpus, cpus=node.cpus, memory_gb=node.memory_gb) >= 1


def _task(shape: JobShape) -> str:
    gpus = f"{shape.gpus_per_task} {shape.gpu_type}, " if shape.gpu_type else ""
    return f"{gpus}{shape.cpus_per_task} CPUs, {shape.memory_gb_per_task} GB"


def _block_scope(shape: JobShape):
    if shape.tasks == 1:
        return "node", lambda s: s.name
    if shape.topology == Topology.REQUIRE_SAME_RACK:
        return "rack", lambda s: s.node.rack
    return "zone", lambda s: s.node.zone
