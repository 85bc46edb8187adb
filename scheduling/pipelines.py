"""Pipelines: a job group whose children are steps joined by dependency edges (docs/pipelines.md).

- **Submit** (`do_create_steps`): every step's job, its tasks and its edges to the steps it comes
  after, in the submit's one transaction. An edge carries the step's `when` as its condition
  (core/conditions.py); the pipeline's own `depends_on` holds its first steps.
- **Run**: the scheduler releases a step when its conditions hold; the leader's sweep skips one
  whose conditions can no longer be met (scheduling/dependencies.py), and skips cascade.
- **Run directory**: `{run_dir}` is `<MLQ_PIPELINE_RUN_ROOT>/<pipeline name>/<run id>`, the run id
  being the pipeline's job id. mlqueue does not create it: the nodes' filesystems are not the
  server's, and an agent (often root) must not make directories wherever a spec names; the
  first step makes it on the filesystem the steps share.
"""

import re
from pathlib import PurePosixPath

from django.conf import settings

from scheduling.models import GroupKind, Job, JobDependency, Task
from scheduling.pipeline_spec import EDGE_CONDITION, STEP_REFERENCE, normalized_step
from scheduling.spec import dependency_edges, job_columns

# What a pipeline's name becomes in its run directory's path: one safe path segment.
UNSAFE_PATH = re.compile(r"[^A-Za-z0-9._-]+")
RUN_PLACEHOLDER = re.compile(r"\{(run_dir|run_id)\}")


def group_settings(spec: dict) -> dict:
    """What the parent keeps in `Job.group`: its steps' names, `after` and `when` (the page and the
    API show them); `run_dir` is added once the parent has its id (`do_create_steps`)."""
    steps = spec["pipeline"]["steps"]
    return {
        "kind": GroupKind.PIPELINE,
        "count": len(steps),
        # Every step may run at once: the edges, not a limit, decide what waits.
        "parallelism": len(steps),
        "max_failures": None,
        "steps": [{"name": s["name"], "after": s["after"], "when": s["when"]} for s in steps],
    }


def run_dir(name: str, run_id: int) -> str:
    segment = UNSAFE_PATH.sub("-", name).strip(".-") or "pipeline"
    return str(PurePosixPath(settings.MLQ_PIPELINE_RUN_ROOT) / segment / str(run_id))


def substitute(text: str, values: dict[str, str]) -> str:
    """`text` with {run_dir}, {run_id} and {steps.NAME.job_id} put in; other braces stay."""
    text = RUN_PLACEHOLDER.sub(lambda m: values[m[1]], text)
    return STEP_REFERENCE.sub(lambda m: values.get(f"steps.{m[1]}.job_id", m[0]), text)


def do_create_steps(*, parent: Job, spec: dict, now) -> list[Job]:
    """The steps of `parent` (just created, in the caller's transaction): their jobs in the
    steps' order, their tasks and their edges, in bulk. Returns them in that order."""
    steps = spec["pipeline"]["steps"]
    jobs = Job.objects.bulk_create([_step_job(parent, spec, index, step, now) for index, step in enumerate(steps)])
    by_name = {step["name"]: job for step, job in zip(steps, jobs, strict=True)}
    directory = run_dir(parent.name, parent.pk)
    parent.group = {**parent.group, "run_dir": directory}
    Job.objects.filter(pk=parent.pk).update(group=parent.group)
    values = {"run_dir": directory, "run_id": str(parent.pk)}
    values.update({f"steps.{name}.job_id": str(job.pk) for name, job in by_name.items()})
    for job in jobs:
        job.command = [substitute(arg, values) for arg in job.command]
        job.env = {key: substitute(value, values) for key, value in job.env.items()}
        job.spec = {**job.spec, "command": job.command, "env": job.env}
    Job.objects.bulk_update(jobs, ["command", "env", "spec"])
    Task.objects.bulk_create(
        [Task(job=job, rank=rank, updated_at=now) for job in jobs for rank in range(job.task_count)]
    )
    JobDependency.objects.bulk_create(_edges(steps, by_name, spec["depends_on"]))
    return jobs


def _step_job(parent: Job, spec: dict, index: int, step: dict, now) -> Job:
    own = normalized_step(spec, step)
    return parent.new_child(spec=own, columns=job_columns(own), now=now, group_index=index, step_name=step["name"])


def _edges(steps: list[dict], by_name: dict[str, Job], depends_on: list) -> list[JobDependency]:
    """Each step's edges to the steps it comes after, with its `when`; the first steps' to what
    the pipeline depends on, with the conditions given there."""
    found = []
    outside = dependency_edges(depends_on)
    for step in steps:
        job = by_name[step["name"]]
        condition = EDGE_CONDITION[step["when"]]
        found.extend(JobDependency(from_job=job, to_job=by_name[a], condition=condition) for a in step["after"])
        if not step["after"]:
            found.extend(JobDependency(from_job=job, to_job_id=dep, condition=on) for dep, on in outside)
    return found


def step_env(job: Job, group: dict) -> dict[str, str]:
    """The variables a step's assignment carries (with MLQ_GROUP_ID, as every child's)."""
    return {
        "MLQ_PIPELINE_RUN_ID": str(job.parent_id),
        "MLQ_PIPELINE_RUN_DIR": group.get("run_dir", ""),
        "MLQ_PIPELINE_STEP": job.step_name,
    }


def layers(steps: list[dict]) -> list[list[int]]:
    """The steps (by index) in layers for drawing the DAG left to right: a step's layer is one
    more than the deepest step it comes after (the first steps are layer 0); within a layer,
    the steps' order. The spec is acyclic (pipeline_spec refuses cycles)."""
    index = {step["name"]: i for i, step in enumerate(steps)}
    depth: dict[int, int] = {}

    def depth_of(i: int) -> int:
        if i not in depth:
            depth[i] = 1 + max((depth_of(index[a]) for a in steps[i]["after"]), default=-1)
        return depth[i]

    for i in range(len(steps)):
        depth_of(i)
    found: list[list[int]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for i in range(len(steps)):
        found[depth[i]].append(i)
    return found
