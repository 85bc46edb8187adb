"""A discrete-event simulator driving a scheduling policy on a virtual clock.

Events: arrivals, completions, the end of a preempted job's grace period, node failures and
recoveries, and the scheduler's own tick. At each instant all its events are applied, then
the policy is asked once; its placements start (and will end after the job's remaining run),
its preemptions signal their victims, which hold their GPUs through the grace period and then
lose the work since their last checkpoint. A run cut short is settled as the leader settles
it (core/settle.py): requeued, counted as a preemption or spending a restart, or given up.
Deterministic: ties break by insertion order and every random draw comes from one seeded
generator.
"""

import heapq
import itertools
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from scheduling.core import model as core
from scheduling.core.decisions import Decisions
from scheduling.core.settle import (
    Action,
    Attempt,
    EndedTask,
    FailureClass,
    Outcome,
    RestartPolicy,
    StopReason,
    TaskEnd,
    settle,
)
from scheduling.sim.gate import DecisionGate, Watched
from scheduling.sim.trace import TraceJob
from scheduling.sim.views import SchedulerViews, resumed_view
from scheduling.sim.wakes import AGED, VictimWakes

ARRIVE, FINISH, STOP, FAIL, RECOVER, TICK, SAMPLE = "arrive", "finish", "stop", "fail", "recover", "tick", "sample"
WINDOW_ENDS = "window_ends"
# At one instant: free what ends first, then take arrivals, then ask the policy once.
EVENT_ORDER = {FINISH: 0, STOP: 0, FAIL: 1, RECOVER: 1, WINDOW_ENDS: 1, ARRIVE: 2, TICK: 3, SAMPLE: 3, AGED: 3}


@dataclass(frozen=True)
class SimConfig:
    checkpoint_interval_s: float = 1800.0
    grace_s: float = 120.0
    tick_s: float = 600.0
    gpu_type: str = "H100"
    node_failures: int = 0
    failure_downtime_s: float = 3600.0
    seed: int = 1
    check_every_event: bool = False
    # Every so often, while someone waits: each team's GPUs held and asked for (fairness).
    sample_s: float = 3600.0
    # For a forecast: stop once every job has started, or after this many decisions (0: never).
    stop_once_all_started: bool = False
    max_decisions: int = 0
    # Stop once the next event is this long after the first arrival (0: run until every job
    # has ended). A job that no team limit lets run (a replay under a smaller quota) would
    # otherwise keep the clock ticking forever; it ends the run unfinished.
    horizon_s: float = 0.0
    # Decide at most once per step (0: at every instant something happens). The step grows
    # with the time simulated, `step_growth` of it (a forecast needs minutes an hour out,
    # not seconds a day out). Events are still applied at their own times.
    decision_step_s: float = 0.0
    step_growth: float = 0.0
    max_step_s: float = 3600.0
    # With steps: a job placed at a pass runs (and ends) as if it had started when it could
    # have between the passes: once the last room it took freed up and it waited (see
    # `_backdated`). Its start is still recorded at the pass (rounded up), but room that freed
    # up between two passes no longer idles until the next one, so coarse steps do not push
    # every later start back, step after step.
    backdate_starts: bool = False
    # Skip asking the policy where no waiting job could fit or evict (gate.py): the same
    # schedule, fewer passes. False: ask whenever something happened (the reference path).
    skip_quiet_instants: bool = True
    # Ask the policy when a running job has run a preemption minimum (wakes.py): a forecast's.
    wake_when_victims_age: bool = False
    # Every job's restart policy (a trace says nothing of its own): the spec's defaults.
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    # What a restart costs before work resumes (pulling the image, loading data and the last
    # checkpoint): a job started again after a preemption or a lost node holds its GPUs this
    # long first, counted as lost work. 0: restarts are free. A first start pays nothing here,
    # the trace's durations include it.
    restart_overhead_s: float = 0.0


@dataclass
class Record:
    """One job's life in the simulation."""

    job: TraceJob
    done_s: float = 0.0  # work saved so far (completed checkpoints, or all of it once finished)
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0  # the job's counters, as the store keeps them
    restarts_used: int = 0
    failed_at: float | None = None  # no restarts left: given up
    lost_gpu_s: float = 0.0
    gpu_s: float = 0.0  # GPU-seconds it held, lost work included
    yields_to: int | None = None  # the job it was last preempted for
    nominated: tuple[str, ...] = ()  # the nodes it was nominated to when it evicted (as the store keeps them)
    requeued_at: float | None = None  # when it last waited again after running (PendingJob.queued_at)


@dataclass
class Run:
    placement: core.RunningJob
    started: float
    token: int
    stopping: bool = False
    preempted_for: int | None = None
    checkpoints: int = 0  # how many checkpoints `placement` already says were taken
    # Checkpoints every `interval` s (0: none) counted from `anchor`: its start, or for a live
    # job resumed by a forecast, its last confirmed checkpoint (`confirmed`).
    interval: float = 0.0
    anchor: float = 0.0
    confirmed: float | None = None
    overhead: float = 0.0  # seconds of restart before its work resumed (SimConfig.restart_overhead_s)


@dataclass
class Simulation(SchedulerViews, VictimWakes):
    nodes: list[core.Node]
    teams: tuple[core.Team, ...]
    jobs: list[TraceJob]
    policy: object  # has decide(snapshot) -> Decisions
    config: SimConfig = field(default_factory=SimConfig)
    policy_config: core.PolicyConfig = field(default_factory=core.PolicyConfig)
    # Jobs already running when the simulation starts, each with the time it will end.
    running_at_start: tuple[tuple[core.RunningJob, float], ...] = ()
    # Job groups by id (a job's TraceJob.group, or its view's): the core starts at most a
    # group's parallelism of its jobs at once, here as in the leader's pass.
    groups: Mapping[int, core.Group] = field(default_factory=dict)
    # Maintenance windows: no job starts where its time limit would run into one (the forecast's,
    # from the live snapshot).
    maintenance: tuple[core.MaintenanceWindow, ...] = ()

    def __post_init__(self):
        self.now = 0.0
        self.started_at = min((job.submit for job in self.jobs), default=0.0)
        self.last_decision: float | None = None
        self.previous_decision: float | None = None
        self.freed_at: dict[str, float] = {}  # node -> when room on it last freed up (backdate_starts)
        self.waits_since: dict[int, float] = {}  # job -> when it last began to wait, eligible (backdate_starts)
        self.events: list = []
        self.sequence = itertools.count()
        self.tokens = itertools.count(1)
        self.records = {job.job_id: Record(job) for job in self.jobs}
        self.pending: dict[int, TraceJob] = {}
        self.running: dict[int, Run] = {}
        # Jobs that started or stopped running since the policy was last asked: told to a
        # policy that `follows_changes`, so its pass need not compare every running job.
        self.moved: set[int] = set()
        self.follows_changes = getattr(self.policy, "follows_changes", False)
        self.gate: DecisionGate | None = None
        self.quiet = 0  # instants where the gate said no pass could decide anything
        if self.config.skip_quiet_instants:
            self._watch()
        self.node_state = {node.name: node.state for node in self.nodes}
        self.victim_ages = self._victim_ages()
        self.decisions = 0
        self.samples: list[tuple[dict[str, int], dict[str, int]]] = []  # (held, held + waiting) per team
        self.pending_views: dict[int, core.PendingJob] = {}  # rebuilt only when a job's state changes
        self.unviewed: set[int] = set()  # waiting jobs whose view is to be made (see `_forget_view`)
        self.nominated: set[int] = set()  # jobs whose record holds a nomination
        for job in self.jobs:  # a forecast starts from the live nominations
            if job.view is not None and job.view.nominated:
                self.records[job.job_id].nominated = job.view.nominated
                self.nominated.add(job.job_id)
        self._fleet: tuple[core.Node, ...] | None = None
        self._ready: dict[str, int] | None = None
        self.matters = False
        self.teams_with_guarantees = any(q.guaranteed for team in self.teams for q in team.quotas.values())
        for job in self.jobs:
            self._at(job.submit, ARRIVE, job.job_id)
        self.dependents: dict[int, list[int]] = {}
        for job in self.jobs:
            for dependency in job.view.waiting_on if job.view else ():
                self.dependents.setdefault(dependency, []).append(job.job_id)
        for placement, end_at in self.running_at_start:
            self._resume(placement, end_at)
        self._plan_failures()
        for window in self.maintenance:  # its nodes take long jobs again: the policy is asked then
            self._at(window.end_at, WINDOW_ENDS, window.window_id)
        if self.jobs and self.config.tick_s:
            self._at(self.config.tick_s, TICK, None)
        if self.jobs and self.config.sample_s:
            self._at(self.config.sample_s, SAMPLE, None)

    # --- the clock ------------------------------------------------------------------------
    def _at(self, when: float, kind: str, payload) -> None:
        heapq.heappush(self.events, (when, EVENT_ORDER[kind], next(self.sequence), kind, payload))

    def _resume(self, placement: core.RunningJob, end_at: float) -> None:
        """A live job, running until `end_at`. If the simulation preempts it, it waits again
        as itself (`views.resumed_view`), its eviction count carried on."""
        view = resumed_view(placement)
        job = TraceJob(
            placement.job_id,
            placement.started_at,
            end_at - placement.started_at,
            view.shape.units,
            placement.team,
            placement.gpu_type,
            placement.priority,
            view.max_runtime_s,
            view=view,
            checkpoint_interval_s=placement.checkpoint_interval_s,
        )
        self.records[job.job_id] = Record(job, first_start=placement.started_at, preemptions=placement.preemptions)
        token = next(self.tokens)
        confirmed = placement.last_checkpoint_at
        self.running[job.job_id] = Run(
            placement,
            placement.started_at,
            token,
            stopping=placement.preempting,
            preempted_for=placement.preempted_for,
            interval=self._interval(placement.checkpoint_interval_s),
            anchor=placement.started_at if confirmed is None else confirmed,
            confirmed=confirmed,
        )
        self._at(end_at, FINISH, (job.job_id, token))
        self._wake_when_aged(placement, placement.started_at, token)

    def run(self) -> "Simulation":
        config = self.config
        while self.events:
            if (
                config.stop_once_all_started
                and not self.pending
                and all(r.first_start is not None for r in self.records.values())
            ):
                break
            if config.max_decisions and self.decisions >= config.max_decisions:
                break
            if config.horizon_s and self.events[0][0] > self.started_at + config.horizon_s:
                break
            until = self._next_decision(self.events[0][0])
            self.matters = False
            while self.events and self.events[0][0] <= until:
                self.now, _, _, kind, payload = heapq.heappop(self.events)
                getattr(self, f"_on_{kind}")(payload)
            self.now = until
            if self.pending and self.matters:
                self._decide()
            if self.pending and not self.running and not self._anything_to_come():
                break  # waiting jobs that an idle cluster did not start never will: left unfinished
        return self

    def _anything_to_come(self) -> bool:
        """Whether an event is still to come that may let a waiting job start: an arrival, an end,
        a node failing or coming back, a maintenance window ending. Asked only of an idle cluster
        with jobs waiting: after the pass that left them waiting, only ticks and samples are left
        where no more can (a job over its team's limits, or larger than the cluster). A replay
        looped on those for ever (QA: `bench.replay --quotas` with a limit below one job)."""
        return any(event[3] not in (TICK, SAMPLE, AGED) for event in self.events)

    def _next_decision(self, when: float) -> float:
        """The instant the policy is next asked, given the next event's time: then, or one
        step after the last time it was asked, whichever is later."""
        step = self.config.decision_step_s
        if not step or self.last_decision is None:
            return when
        step = min(max(step, self.config.step_growth * (self.last_decision - self.started_at)), self.config.max_step_s)
        return max(when, self.last_decision + step)

    def _arrival_matters(self, job: TraceJob) -> bool:
        """Whether a new job can change anything now: it may fit the free room, or (for a
        policy that preempts) outrank or reclaim. An arrival that can do neither leaves every
        decision as it was, so the policy is not asked (a full cluster's common case)."""
        if job.view is not None:
            return True
        rclass = core.resource_class(job.gpu_type or self.config.gpu_type)
        if self._free_units(rclass) >= job.gpus_per_task:
            return True
        return getattr(self.policy, "preempts", False) and (
            self.teams_with_guarantees
            or any(
                core.priority_rank(job.priority) < core.priority_rank(run.placement.priority)
                for run in self.running.values()
            )
        )

    def _free_units(self, rclass: str) -> int:
        if self.gate is not None:
            return self._ready_units().get(rclass, 0) - self.gate.held[rclass]
        used = sum(run.placement.units for run in self.running.values() if run.placement.resource_class == rclass)
        return self._ready_units().get(rclass, 0) - used

    def _ready_units(self) -> dict[str, int]:
        """Units of READY nodes per class (recounted only when a node fails or recovers)."""
        if self._ready is None:
            self._ready = {}
            for node in self._nodes_now():
                if node.state == core.NodeState.READY:
                    self._ready[node.resource_class] = self._ready.get(node.resource_class, 0) + (
                        node.gpus if node.gpu_type else node.cpus
                    )
        return self._ready

    def _watch(self) -> None:
        """Let a gate follow every job that starts or stops waiting or running."""
        preempts = self.policy_config.preemption and getattr(self.policy, "preempts", False)
        gate = self.gate = DecisionGate(self.nodes, self.teams, preempts=preempts, reclaims=self.policy_config.reclaim)
        gpu_type = self.config.gpu_type

        def waits(job_id: int, job: TraceJob) -> None:
            view = job.view
            gate.waits(
                job_id,
                job.shape(gpu_type),
                job.team,
                view.priority if view else job.priority,
                view is not None and view.held,
            )

        self.pending = Watched(waits, lambda job_id, job: gate.leaves(job_id))
        self.running = Watched(
            lambda job_id, run: gate.runs(run.placement), lambda job_id, run: gate.ends(run.placement)
        )

    # --- events ---------------------------------------------------------------------------
    def _on_arrive(self, job_id: int) -> None:
        job = self.records[job_id].job
        self.pending[job_id] = job
        self._forget_view(job_id)
        self.waits_since[job_id] = self.now
        self.matters = self.matters or self._arrival_matters(job)

    def _on_finish(self, payload) -> None:
        job_id, token = payload
        run = self.running.get(job_id)
        if run is None or run.token != token:
            return  # it was preempted or its node failed first
        record = self.records[job_id]
        record.gpu_s += (self.now - run.started) * record.job.gpus
        record.done_s, record.end = record.job.duration, self.now
        del self.running[job_id]
        self.moved.add(job_id)
        self._freed(run)
        for waiting in self.dependents.get(job_id, ()):
            self._forget_view(waiting)
            self.waits_since[waiting] = self.now
        self.matters = True

    def _freed(self, run: Run) -> None:
        for task in run.placement.tasks:
            self.freed_at[task.node] = self.now

    def _on_stop(self, job_id: int) -> None:
        """A preempted job's grace period is over: it stops, keeping its checkpointed work."""
        if job_id in self.running:
            self._interrupt(job_id)
            self.matters = True

    def _nodes_now(self) -> tuple[core.Node, ...]:
        """The fleet with failed nodes marked (the same tuple while nothing has failed)."""
        if self._fleet is None:
            self._fleet = tuple(
                node
                if self.node_state[node.name] == node.state
                else replace(node, state=self.node_state[node.name])  # its excluded GPUs stay excluded
                for node in self.nodes
            )
        return self._fleet

    def _on_fail(self, node_name: str) -> None:
        self.matters = True
        self._fleet = self._ready = None
        self.node_state[node_name] = core.NodeState.LOST
        if self.gate is not None:
            self.gate.node_ready(node_name, False)
        for job_id, run in list(self.running.items()):
            if any(task.node == node_name for task in run.placement.tasks):
                self._interrupt(job_id, lost_node=node_name)
        self._at(self.now + self.config.failure_downtime_s, RECOVER, node_name)

    def _on_recover(self, node_name: str) -> None:
        self.matters = True
        self._fleet = self._ready = None
        self.node_state[node_name] = core.NodeState.READY
        if self.gate is not None:
            self.gate.node_ready(node_name, True)

    def _on_window_ends(self, window_id: int) -> None:
        """Long jobs may go to its nodes again, and the nodes it drained take work again (as
        the window's end uncordons them; one failed meanwhile comes back on its own)."""
        self.matters = True
        window = next(w for w in self.maintenance if w.window_id == window_id)
        for name in window.drained:
            if self.node_state.get(name) in (core.NodeState.DRAINING, core.NodeState.CORDONED):
                self._on_recover(name)

    def _on_tick(self, _) -> None:
        """Only a policy whose order changes with time alone (aging, wait bounds) needs it."""
        self.matters = self.matters or getattr(self.policy, "uses_time", False)
        if self.pending or self.running or len(self.events) > 0:
            self._at(self.now + self.config.tick_s, TICK, None)

    def _on_sample(self, _) -> None:
        if self.pending:
            held: dict[str, int] = {}
            for run in self.running.values():
                held[run.placement.team] = held.get(run.placement.team, 0) + self.records[run.placement.job_id].job.gpus
            asked = dict(held)
            for job in self.pending.values():
                asked[job.team] = asked.get(job.team, 0) + job.gpus
            self.samples.append((held, asked))
        if self.pending or self.running:
            self._at(self.now + self.config.sample_s, SAMPLE, None)

    def _interrupt(self, job_id: int, lost_node: str | None = None) -> None:
        """The run ends early, preempted or with `lost_node`: the work since the last
        checkpoint is lost, and the job waits again or, settled as failed, gives up."""
        run = self.running.pop(job_id)
        self.moved.add(job_id)
        self._freed(run)
        record = self.records[job_id]
        elapsed = self.now - run.started
        saved_at = self._last_checkpoint(run)
        saved = max(0.0, saved_at - run.started - run.overhead) if saved_at is not None else 0.0
        record.gpu_s += elapsed * record.job.gpus
        record.lost_gpu_s += (elapsed - saved) * record.job.gpus
        record.done_s = min(record.job.duration, record.done_s + saved)
        record.yields_to = run.preempted_for
        verdict = settle(
            Attempt(restarts_used=record.restarts_used, preemptions=record.preemptions),
            _outcome(run, lost_node),
            self.config.restart_policy,
        )
        if verdict.action != Action.REQUEUE:
            record.failed_at = self.now
            return
        if verdict.counter:
            setattr(record, verdict.counter.value, verdict.count)
        self.pending[job_id] = record.job
        record.requeued_at = self.now
        self._forget_view(job_id)
        self.waits_since[job_id] = self.now

    # --- the policy -----------------------------------------------------------------------
    def _decide(self) -> None:
        self.previous_decision, self.last_decision = self.last_decision, self.now
        if self.gate is not None and not self.gate.may_decide():
            self.quiet += 1  # a pass would place and evict nothing: as if asked
            return
        decisions: Decisions = self._ask()
        self.decisions += 1
        for placement in decisions.placements:
            self._start(placement)
        for preemption in decisions.preemptions:
            self._preempt(preemption.victim_job_id, preemption.for_job_id)
        self._nominate(decisions.nominations)
        if self.config.check_every_event:
            check_no_overcommit(self.nodes, [run.placement for run in self.running.values()])

    def _ask(self) -> Decisions:
        """The policy's decisions on the snapshot now; one that `follows_changes` is also told
        which jobs started or stopped running since it was last asked, each with its run now."""
        snapshot = self.snapshot()
        if not self.follows_changes:
            return self.policy.decide(snapshot)
        running = self.running
        moved = {job_id: running[job_id].placement if job_id in running else None for job_id in self.moved}
        self.moved = set()
        return self.policy.decide(snapshot, moved=moved)

    def _nominate(self, nominations) -> None:
        """Keep the pass's nominations, as the leader stores them: a job left out has none."""
        for job_id in set(self.nominated) | set(nominations):
            nodes = tuple(nominations.get(job_id, ()))
            record = self.records[job_id]
            if record.nominated != nodes:
                record.nominated = nodes
                self._forget_view(job_id)
        self.nominated = {job_id for job_id, nodes in nominations.items() if nodes}

    def _start(self, placement) -> None:
        job = self.pending.pop(placement.job_id)
        record = self.records[job.job_id]
        overhead = 0.0 if record.first_start is None else self.config.restart_overhead_s
        record.first_start = self.now if record.first_start is None else record.first_start
        remaining = job.duration - record.done_s
        token = next(self.tokens)
        view = self._pending(job)
        self._forget_view(job.job_id)
        started = self._backdated(job.job_id, placement.tasks)
        self.running[job.job_id] = Run(
            core.RunningJob(
                job.job_id,
                view.team,
                view.priority,
                view.shape.gpu_type,
                placement.tasks,
                started,
                started + self._told(job, record),
                preemptible=view.priority != "P0",
                checkpointing=view.checkpointing,
                last_checkpoint_at=None,
                checkpoint_interval_s=view.checkpoint_interval_s,
                preemptions=record.preemptions,
                group=view.group,
            ),
            started,
            token,
            interval=self._interval(view.checkpoint_interval_s),
            anchor=started + overhead,
            overhead=overhead,
        )
        self.moved.add(job.job_id)
        self._at(max(self.now, started + overhead + remaining), FINISH, (job.job_id, token))
        self._wake_when_aged(self.running[job.job_id].placement, started, token)

    def _backdated(self, job_id: int, tasks) -> float:
        """When a job placed now would have started had the policy been asked at every instant
        (`SimConfig.backdate_starts`; else now): once the last room it takes had freed up and
        it had begun to wait, if both happened since the previous pass. If it already waited
        with that room at the previous pass and was not given it there, what changed since
        (the order, a reservation) has no time of its own: it starts now."""
        previous = self.previous_decision
        if not self.config.backdate_starts or previous is None:
            return self.now
        ready = max(
            max((self.freed_at.get(task.node, previous) for task in tasks), default=previous),
            self.waits_since.get(job_id, self.now),
        )
        return ready if previous < ready < self.now else self.now

    def _preempt(self, job_id: int, for_job_id: int) -> None:
        run = self.running.get(job_id)
        if run is None or run.stopping:
            return
        run.stopping, run.preempted_for = True, for_job_id
        if self.gate is not None:
            self.gate.stopping(job_id)
        # It holds its GPUs until it stops: nothing is over-committed while it drains.
        run.placement = replace(
            run.placement, last_checkpoint_at=self._last_checkpoint(run), preempting=True, preempted_for=for_job_id
        )
        self._at(self.now + self.config.grace_s, STOP, job_id)

    def _plan_failures(self) -> None:
        rng = random.Random(self.config.seed)
        horizon = max((job.submit + job.duration for job in self.jobs), default=0.0)
        for _ in range(self.config.node_failures):
            self._at(rng.uniform(0, horizon), FAIL, rng.choice(self.nodes).name)


def _outcome(run: Run, lost_node: str | None) -> Outcome:
    """How the run's ranks end, as the store records it: preempted at the end of the grace
    period; or, with a node lost, the ranks there FAILED (INFRA) and the others stopped for
    them (a preemption under way stays the reason of both)."""
    if lost_node is None:
        return Outcome(
            tuple(
                EndedTask(t.rank, TaskEnd.PREEMPTED, FailureClass.INFRA, StopReason.PREEMPTED)
                for t in run.placement.tasks
            )
        )
    asked = StopReason.PREEMPTED if run.stopping else ""
    return Outcome(
        tuple(
            EndedTask(
                t.rank,
                TaskEnd.FAILED,
                FailureClass.INFRA,
                asked if t.node == lost_node else asked or StopReason.PEER_FAILED,
            )
            for t in run.placement.tasks
        )
    )


def check_no_overcommit(nodes: list[core.Node], running: list[core.RunningJob]) -> None:
    """Raise if any node holds more GPUs, CPUs or memory than it has, or a GPU twice."""
    by_name = {node.name: node for node in nodes}
    used: dict[str, list] = {}
    for job in running:
        for task in job.tasks:
            entry = used.setdefault(task.node, [[], 0, 0])
            entry[0] += task.gpu_indices
            entry[1] += task.cpus
            entry[2] += task.memory_gb
    for name, (gpus, cpus, memory) in used.items():
        node = by_name[name]
        if (
            len(gpus) != len(set(gpus))
            or any(g >= node.gpus for g in gpus)
            or cpus > node.cpus
            or memory > node.memory_gb
        ):
            raise AssertionError(f"node {name} over-committed: GPUs {sorted(gpus)}, {cpus} CPUs, {memory} GB")
