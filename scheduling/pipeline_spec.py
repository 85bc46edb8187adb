"""The spec's `pipeline:` block: a DAG of steps, each a job spec whose fields default from the
pipeline's top level (docs/pipelines.md). Checked here, step by step, every error named by its
step and field (`pipeline.steps[1].resources.gpu_count`); scheduling/pipelines.py turns an
accepted block into the group's children.

    pipeline:
      steps:
        - {name: prepare, command: [...]}
        - {name: train, after: [prepare], command: [...], resources: {gpu_count: 16, gpu_type: H100}}
        - {name: notify-failure, after: [train], when: failure, command: [...]}
"""

import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mlqueue.serializer_fields import ChoiceField
from scheduling.spec import (
    BlockField,
    JobSpecSerializer,
    PipelineBlockField,
    StrictSerializer,
    StrictStringField,
    normalized,
)

STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")
# `{steps.NAME.job_id}` in a step's command or env: the id of another step's job.
STEP_REFERENCE = re.compile(r"\{steps\.([^.{}]*)\.job_id\}")
WHEN = ("success", "failure", "always")
# A step's `when` as the condition on each edge to the steps it comes after (core/conditions.py).
EDGE_CONDITION = {"success": "success", "failure": "failure", "always": "any"}
MAX_STEPS = 100
# Fields a step does not take: the pipeline's own (one team, one client_job_id, one owner), its
# secrets (set once, at the top), its outside dependencies (the pipeline's `depends_on` holds its
# first steps), and the blocks that would make a step a group or a schedule.
PIPELINE_ONLY = ("team", "owner", "client_job_id", "secret_env", "depends_on")
GROUP_BLOCKS = ("array", "sweep", "pipeline", "schedule")
# Fields a step does not inherit from the top level: its own.
NOT_INHERITED = ("name", "client_job_id", "owner", "depends_on", *GROUP_BLOCKS)

BAD_STEP_NAME = "{name!r} is not a step name: letters, digits, _ and -, starting with a letter or digit (at most 63)."
DUPLICATE_STEP = "step {name!r} is named twice (steps[{first}] and steps[{second}]): give each step its own name."
UNKNOWN_AFTER = "no step named {name!r}; the steps are {names}."
AFTER_ITSELF = "a step cannot come after itself."
AFTER_TWICE = "{name!r} is named twice: name each step it comes after once."
WHEN_WITHOUT_AFTER = "when: {when} watches the steps it comes after: give after: [..] (a step without runs at once)."
CYCLE = "steps {cycle} come after each other in a cycle: a pipeline is a DAG."
STEP_IS_A_JOB = "a step is one job: it takes no {block} of its own (put the pipeline in a spec of its own)."
STEP_FIELD_AT_TOP = "a step takes its {field} from the pipeline's top level: give it there."
UNKNOWN_STEP_REFERENCE = "{reference} names no step; the steps are {names}."
TOO_MANY_STEPS = "at most {limit} steps, got {count}."
NO_STEPS = "give at least one step."
STEP_NOT_A_MAPPING = "a step is a mapping: {name: .., command: [..], ...}."
STEP_NOTIFY = "a step does not notify on its own: give notify at the pipeline's top level (it notifies as one job)."
NO_COMMAND = "give each step a command, or one at the pipeline's top level for the steps without."


class StepSerializer(StrictSerializer):
    """A step: its name, the steps it comes after and when it runs after them, and the job spec's
    fields besides, each defaulting to the pipeline's top level (checked as a job's, `step_spec`)."""

    name = StrictStringField(max_length=63, trim_whitespace=False)
    after = serializers.ListField(child=StrictStringField(max_length=63), required=False, default=list, max_length=100)
    when = ChoiceField(WHEN, required=False, default="success")

    def validate_name(self, value):
        if not STEP_NAME.match(value):
            raise serializers.ValidationError(BAD_STEP_NAME.format(name=value))
        return value


@extend_schema_field(StepSerializer)
class StepField(BlockField):
    """A step: its name, after and when, and the job spec's fields (checked as a job's, `check_steps`)."""


class PipelineSerializer(StrictSerializer):
    """`pipeline:`: a DAG of steps, each a job (docs/pipelines.md)."""

    steps = serializers.ListField(child=StepField(), allow_empty=True)  # each checked as a job spec

    def validate_steps(self, steps):
        if not steps:
            raise serializers.ValidationError(NO_STEPS)
        if len(steps) > MAX_STEPS:
            raise serializers.ValidationError(TOO_MANY_STEPS.format(limit=MAX_STEPS, count=len(steps)))
        checked = [_step_own_fields(index, step) for index, step in enumerate(steps)]
        _check_graph(checked)
        return [{**step, **own} for step, own in zip(steps, checked, strict=True)]


def _step_errors(index: int, detail) -> serializers.ValidationError:
    """An error of steps[index], as the API names it: `pipeline.steps[index].field`."""
    return serializers.ValidationError([{} for _ in range(index)] + [detail])


def _step_own_fields(index: int, step) -> dict:
    if not isinstance(step, dict):
        raise _step_errors(index, {"name": [STEP_NOT_A_MAPPING]})
    for field in sorted(step):
        if field in GROUP_BLOCKS:
            raise _step_errors(index, {field: [STEP_IS_A_JOB.format(block=field)]})
        if field in PIPELINE_ONLY:
            raise _step_errors(index, {field: [STEP_FIELD_AT_TOP.format(field=field)]})
        if field == "notify":  # a step's job is a child: only its pipeline is ever told
            raise _step_errors(index, {field: [STEP_NOTIFY]})
    own = StepSerializer(data={k: step[k] for k in ("name", "after", "when") if k in step})
    if not own.is_valid():
        raise _step_errors(index, own.errors)
    return dict(own.validated_data)


def _check_graph(steps: list[dict]) -> None:
    """Names once each, `after` names known and not the step itself, and no cycle."""
    first: dict[str, int] = {}
    for index, step in enumerate(steps):
        if step["name"] in first:
            message = DUPLICATE_STEP.format(name=step["name"], first=first[step["name"]], second=index)
            raise _step_errors(index, {"name": [message]})
        first[step["name"]] = index
    names = ", ".join(step["name"] for step in steps)
    for index, step in enumerate(steps):
        if step["when"] != "success" and not step["after"]:
            raise _step_errors(index, {"when": [WHEN_WITHOUT_AFTER.format(when=step["when"])]})
        twice = next((name for name in step["after"] if step["after"].count(name) > 1), None)
        if twice is not None:
            raise _step_errors(index, {"after": [AFTER_TWICE.format(name=twice)]})
        for after in step["after"]:
            if after == step["name"]:
                raise _step_errors(index, {"after": [AFTER_ITSELF]})
            if after not in first:
                raise _step_errors(index, {"after": [UNKNOWN_AFTER.format(name=after, names=names)]})
    cycle = find_cycle({step["name"]: step["after"] for step in steps})
    if cycle:
        raise _step_errors(first[cycle[0]], {"after": [CYCLE.format(cycle=" -> ".join(cycle))]})


def find_cycle(after: dict[str, list[str]]) -> list[str]:
    """A cycle in the graph (name -> the names it comes after), as the names around it with the
    first repeated at the end; [] when there is none. Iterative depth-first search, in the
    steps' order, so the same spec always reports the same cycle."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in after:
        if state.get(root):
            continue
        path, stack = [root], [iter(after[root])]
        state[root] = 1
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(following) == 1:
                return [*path[path.index(following) :], following]
            elif not state.get(following):
                state[following] = 1
                path.append(following)
                stack.append(iter(after[following]))
    return []


def step_spec(top: dict, step: dict) -> dict:
    """The data a step is checked as, and runs as: the top level's fields (its normalized spec),
    the step's own over them; `env` merged, the step's names winning."""
    data = {key: value for key, value in top.items() if key not in NOT_INHERITED and key != "secret_env"}
    data.update({key: value for key, value in step.items() if key not in ("name", "after", "when")})
    data["env"] = {**top.get("env", {}), **step.get("env", {})}
    if not data.get("command"):  # a pipeline's top level without a command: [] once normalized
        data.pop("command", None)
    data["name"] = f"{top['name']}/{step['name']}"[:200]
    return data


def check_steps(top: dict, *, context: dict) -> list[dict]:
    """Each step's spec, checked as a job's: a bad one raises naming its step and field. Returns
    each step's normalized spec (without secret_env: the pipeline's applies to every step)."""
    steps = top["pipeline"]["steps"]
    names = ", ".join(step["name"] for step in steps)
    specs = []
    for index, step in enumerate(steps):
        data = step_spec(top, step)
        if "command" not in data:
            raise _pipeline_error(index, {"command": [NO_COMMAND]})
        serializer = JobSpecSerializer(data=data, context=context)
        if not serializer.is_valid():
            raise _pipeline_error(index, serializer.errors)
        spec = normalized(serializer.validated_data)
        _check_references(index, spec, {s["name"] for s in steps}, names)
        specs.append(spec)
    return specs


def _check_references(index: int, spec: dict, known: set[str], names: str) -> None:
    for field, texts in (("command", spec["command"]), ("env", spec["env"].values())):
        for text in texts:
            for match in STEP_REFERENCE.finditer(text):
                if match[1] not in known:
                    message = UNKNOWN_STEP_REFERENCE.format(reference=match[0], names=names)
                    raise _pipeline_error(index, {field: [message]})


def _pipeline_error(index: int, detail) -> serializers.ValidationError:
    return serializers.ValidationError({"pipeline": {"steps": _step_errors(index, detail).detail}})


def normalized_step(top: dict, step: dict) -> dict:
    """The spec a step runs, from the pipeline's accepted spec (checked by `check_steps` at submit):
    normalized as a job's, with the pipeline's secret_env (masked: the values are the parent's)."""
    serializer = JobSpecSerializer(data=step_spec(top, step))
    serializer.is_valid(raise_exception=True)
    return {**normalized(serializer.validated_data), "secret_env": top["secret_env"]}


# The API reference's schema of the spec's `pipeline:` block (scheduling/spec.py declares the field).
extend_schema_field(PipelineSerializer)(PipelineBlockField)
