"""Job groups: a parent job whose children are ordinary jobs (arrays, sweeps, pipelines: the
steps' own module is scheduling/pipelines.py).

- **Submit** (`do_create_group`): the parent and every child, with their tasks, in the submit's
  one transaction and in bulk. Each child is the parent's spec for one element or trial: its
  `{index}`/`{count}` or `{param}` substituted in the command and env values; `MLQ_ARRAY_*` and
  `MLQ_PARAM_*` come with its assignment (scheduling/assignments.py).
- **Limit**: the scheduler starts at most `parallelism` children at once (core.PendingJob.group).
- **State**: the parent has no tasks; its state follows its children's (`derive_group_state`),
  re-derived whenever a child's state changes (lifecycle.sync_job_state calls `sync_group_state`).
- **Cancel**: cancelling the parent cancels every child not finished (`do_cancel_group`); a
  group that failed has its unfinished children cancelled by the leader (`cancel_rest_of_failed`).
"""

import re
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from scheduling import cancelling, lifecycle, notify, pipelines, sweep_params
from scheduling.fencing import fenced
from scheduling.group_spec import parse_indices
from scheduling.group_state import UNFINISHED, child_counts, deferred_syncs, sync_group_state
from scheduling.models import FailureClass, GroupKind, Job, JobDependency, JobState, Task
from scheduling.spec import dependency_edges
from scheduling.states import JOB_FINISHED, ON_NODE

S = JobState
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Who is in which column of a group's summary (the API's `group`, the queue row, the page).
SUMMARY_STATES = {
    "pending": (S.PENDING, S.PREEMPTED),
    "running": ON_NODE,
    "succeeded": (S.SUCCEEDED,),
    "failed": (S.FAILED,),
    "cancelled": (S.CANCELLED,),
    "early_stopped": (S.EARLY_STOPPED,),
    "skipped": (S.SKIPPED,),
}


@dataclass(frozen=True)
class Child:
    index: int  # an array's index, a sweep's trial number
    params: dict | None  # a sweep trial's parameters
    values: dict  # what its placeholders stand for

    def substitute(self, text: str) -> str:
        """`text` with each {name} it knows replaced; other braces (JSON, shell) stay as written."""
        return PLACEHOLDER.sub(lambda m: self.values.get(m[1], m[0]), text)


def group_kind(spec: dict) -> str:
    """ARRAY, SWEEP or PIPELINE by the spec's block; "" for a job in no group (one block at most)."""
    if spec.get("array") is not None:
        return GroupKind.ARRAY
    if spec.get("sweep") is not None:
        return GroupKind.SWEEP
    if spec.get("pipeline") is not None:
        return GroupKind.PIPELINE
    return ""


def jobs_made(spec: dict) -> int:
    """How many jobs a checked spec makes: itself, and a group's children."""
    kind = group_kind(spec)
    if kind == GroupKind.ARRAY:
        block = spec["array"]
        return 1 + (len(parse_indices(block["indices"])) if block["indices"] else block["count"])
    if kind == GroupKind.SWEEP:
        return 1 + spec["sweep"]["max_trials"]
    if kind == GroupKind.PIPELINE:
        return 1 + len(spec["pipeline"]["steps"])
    return 1


def group_settings(spec: dict) -> dict:
    """What the parent keeps in `Job.group`: a sweep's seed is drawn here when the spec gives
    none, and kept, so the sweep can be submitted again with the same trials."""
    kind = group_kind(spec)
    if kind == GroupKind.PIPELINE:
        return pipelines.group_settings(spec)
    block = spec[kind]
    found = {"kind": kind, "parallelism": block["parallelism"], "max_failures": block["max_failures"]}
    if kind == GroupKind.ARRAY:
        return {**found, "count": block["count"], "indices": block["indices"]}
    seed = block["seed"] if block["seed"] is not None else secrets.randbelow(2**32)
    return {
        **found,
        "count": block["max_trials"],
        "method": block["method"],
        "seed": seed,
        "metric": block["metric"],
        "early_stop": block["early_stop"],
    }


def children_of(spec: dict, group: dict) -> list[Child]:
    """The group's children in index order: an array's indices (0..count-1 unless listed), or a
    sweep's trials as its seed draws them."""
    if group["kind"] == GroupKind.ARRAY:
        count = group["count"]
        indices = parse_indices(group["indices"]) if group["indices"] else range(count)
        return [Child(index, None, {"index": str(index), "count": str(count)}) for index in indices]
    drawn = sweep_params.trials(spec["sweep"], seed=group["seed"])
    return [Child(trial, params, _trial_values(trial, params)) for trial, params in enumerate(drawn)]


def _trial_values(trial: int, params: dict) -> dict[str, str]:
    """What a trial's placeholders stand for: {trial} and each {parameter}."""
    return {"trial": str(trial), **{name: sweep_params.as_text(value) for name, value in params.items()}}


def child_spec(spec: dict, child: Child) -> dict:
    """The spec one child runs: the group's, without the group block, with its values put in."""
    found = {key: value for key, value in spec.items() if key not in ("array", "sweep", "client_job_id")}
    found["command"] = [child.substitute(arg) for arg in spec["command"]]
    found["env"] = {key: child.substitute(value) for key, value in spec["env"].items()}
    found["client_job_id"] = None
    found["name"] = child_name(spec, child)
    return found


def child_name(spec: dict, child: Child) -> str:
    """`train[4]` for an array's element, `train trial 3` for a sweep's; cut to the name field's 200."""
    if spec.get("array") is not None:
        return f"{spec['name']}[{child.index}]"[:200]
    return f"{spec['name']} trial {child.index}"[:200]


def child_env(job: Job) -> dict[str, str]:
    """The variables a child's assignment carries for its place in its group."""
    parent_group = job.parent.group if job.parent_id else {}
    if not parent_group:
        return {}
    env = {"MLQ_GROUP_ID": str(job.parent_id)}
    if parent_group["kind"] == GroupKind.PIPELINE:
        return {**env, **pipelines.step_env(job, parent_group)}
    if parent_group["kind"] == GroupKind.ARRAY:
        return {**env, "MLQ_ARRAY_INDEX": str(job.group_index), "MLQ_ARRAY_COUNT": str(parent_group["count"])}
    params = job.params or {}
    return {
        **env,
        "MLQ_SWEEP_TRIAL": str(job.group_index),
        **{sweep_params.env_name(name): sweep_params.as_text(value) for name, value in params.items()},
    }


def do_create_group(*, parent: Job, spec: dict, columns: dict, now) -> list[Job]:
    """The children of `parent` (just created, in the caller's transaction), with their tasks
    and dependencies, in bulk. Returns them in index order."""
    if parent.group["kind"] == GroupKind.PIPELINE:
        return pipelines.do_create_steps(parent=parent, spec=spec, now=now)
    kids = children_of(spec, parent.group)
    jobs = Job.objects.bulk_create([_child_job(parent, spec, columns, kid, now) for kid in kids])
    Task.objects.bulk_create(
        [Task(job=job, rank=rank, updated_at=now) for job in jobs for rank in range(job.task_count)]
    )
    if spec["depends_on"]:
        edges = dependency_edges(spec["depends_on"])
        JobDependency.objects.bulk_create(
            [JobDependency(from_job_id=job.pk, to_job_id=dep, condition=on) for job in jobs for dep, on in edges]
        )
    return jobs


def _child_job(parent: Job, spec: dict, columns: dict, kid: Child, now) -> Job:
    own = child_spec(spec, kid)
    columns = {**columns, "name": own["name"], "command": own["command"], "env": own["env"]}
    return parent.new_child(spec=own, columns=columns, now=now, group_index=kid.index, params=kid.params)


def summary(parent: Job, counts: dict[str, int] | None = None) -> dict:
    """The group as the API and the pages show it: its kind, size, limit and children by state."""
    group = parent.group
    counts = counts if counts is not None else child_counts([parent.pk]).get(parent.pk, {})
    found = {
        "kind": group["kind"],
        "count": group["count"],
        "parallelism": group["parallelism"],
        "max_failures": group["max_failures"],
    }
    for column, states in SUMMARY_STATES.items():
        found[column] = sum(counts.get(state, 0) for state in states)
    if group["kind"] == GroupKind.PIPELINE:
        found["run_dir"] = group.get("run_dir")
    if group["kind"] == GroupKind.SWEEP:
        found.update(method=group["method"], seed=group["seed"], metric=group["metric"], early_stop=group["early_stop"])
    return found


def unfinished_children(parent_id: int) -> QuerySet[Job]:
    """Its children not finished for good, one that failed and awaits its retry too (QA: a
    group's cancel passed it over, and it ran again after the cancel)."""
    return Job.objects.filter(UNFINISHED, parent_id=parent_id)


# Children cancelled in one transaction when none of them was placed (see do_cancel_group).
CANCEL_BATCH = 500


def do_cancel_group(*, parent: Job, actor, actor_name: str, why: str, now=None) -> None:
    """Cancel the parent and every child not finished, each child in its own transaction:
    holding the parent's row across them would deadlock with a child's own transitions, which
    lock the child, then the parent. The parent's state is derived once, at the end (not once
    per child: each derivation counts every child), and the scheduler woken once."""
    now = now or timezone.now()
    with transaction.atomic():
        cancelling.request_cancel(parent.pk, actor=actor, actor_name=actor_name, why=why, now=now)
    children = list(unfinished_children(parent.pk).order_by("group_index").values_list("id", flat=True))
    try:
        with deferred_syncs():
            _cancel_children(children, actor=actor, actor_name=actor_name, why=why, now=now)
    finally:  # a cancel cut short still leaves the parent derived from what its children are
        notify.wake_scheduler("cancel")
        with transaction.atomic():
            sync_group_state(parent.pk, now=now)


def _cancel_children(ids: list[int], *, actor, actor_name: str, why: str, now, epoch: int | None = None) -> int:
    """Cancel these children: those never placed CANCEL_BATCH to a transaction
    (`lifecycle.cancel_unplaced`), the others one by one; each transaction fenced by `epoch`
    when the leader writes. Returns how many it cancelled."""
    cancelled = 0
    for start in range(0, len(ids), CANCEL_BATCH):
        chunk = ids[start : start + CANCEL_BATCH]
        with _writing(epoch):
            done = set(lifecycle.cancel_unplaced(chunk, actor=actor, actor_name=actor_name, why=why, now=now))
            notify.jobs_changed(done)
        cancelled += len(done)
        for child_id in (child for child in chunk if child not in done):  # placed or running: one by one
            with _writing(epoch):
                cancelled += cancelling.do_cancel(
                    child_id, actor=actor, actor_name=actor_name, why=why, now=now, wake=False
                )
    return cancelled


def _writing(epoch: int | None):
    return fenced(epoch) if epoch is not None else transaction.atomic()


def cancel_rest_of_failed(*, epoch: int, now) -> int:
    """The leader's sweep: a group that FAILED (more failures than it allows) has its children
    that are not finished and not yet cancelled cancelled, fenced by `epoch`, then its state
    derived once (see do_cancel_group)."""
    children = Job.objects.filter(
        parent__state=S.FAILED, parent__failure_class=FailureClass.GROUP, cancel_requested_at__isnull=True
    ).exclude(state__in=JOB_FINISHED)
    by_parent: dict[int, list[int]] = {}
    for child_id, parent_id in children.order_by("parent_id", "group_index").values_list("id", "parent_id"):
        by_parent.setdefault(parent_id, []).append(child_id)
    cancelled = 0
    with deferred_syncs():
        for parent_id, ids in by_parent.items():
            why = f"its group (job {parent_id}) failed"
            cancelled += _cancel_children(ids, actor=None, actor_name="scheduler", why=why, now=now, epoch=epoch)
    if cancelled:
        notify.wake_scheduler("cancel")
    for parent_id in sorted(by_parent):
        with fenced(epoch):
            sync_group_state(parent_id, now=now)
    return cancelled
