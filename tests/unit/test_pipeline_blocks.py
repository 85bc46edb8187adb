"""The spec's `pipeline:` block (scheduling/pipeline_spec.py): each bad input refused with the exact
message, named by its step and field; the DAG's layers (pipelines.layers); a pipeline's state from
its steps' (group_state.derive_pipeline_state). No database."""

import pytest
import yaml
from rest_framework.exceptions import ValidationError

from mlqueue.api_errors import flatten_errors
from mlqueue.serializer_fields import UNKNOWN_FIELD
from scheduling import pipeline_spec as p
from scheduling.group_state import derive_pipeline_state
from scheduling.pipelines import layers, run_dir, substitute
from scheduling.spec import GPU_TYPE_REQUIRED, ONE_GROUP_KIND, REQUIRED, JobSpecSerializer

TOP = {"name": "nightly", "team": "research-vision"}


def step(name: str, *after: str, **fields) -> dict:
    return {"name": name, "command": ["python", f"{name}.py"], **({"after": list(after)} if after else {}), **fields}


def errors(pipeline, **top) -> dict[str, list[str]]:
    serializer = JobSpecSerializer(data={**TOP, **top, "pipeline": pipeline})
    assert not serializer.is_valid()
    return flatten_errors(serializer.errors)


def accepted(pipeline, **top) -> dict:
    serializer = JobSpecSerializer(data={**TOP, **top, "pipeline": pipeline})
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


@pytest.mark.parametrize(
    ("pipeline", "top", "field", "message"),
    [
        ({"steps": []}, {}, "pipeline.steps", p.NO_STEPS),
        ({"steps": [step("a")], "parallelism": 2}, {}, "pipeline.parallelism", UNKNOWN_FIELD),
        ({"steps": ["a"]}, {}, "pipeline.steps[0].name", p.STEP_NOT_A_MAPPING),
        ({"steps": [step("a b")]}, {}, "pipeline.steps[0].name", p.BAD_STEP_NAME.format(name="a b")),
        (
            {"steps": [step("a"), step("a")]},
            {},
            "pipeline.steps[1].name",
            p.DUPLICATE_STEP.format(name="a", first=0, second=1),
        ),
        (
            {"steps": [step("prepare"), step("train", "prepar")]},
            {},
            "pipeline.steps[1].after",
            p.UNKNOWN_AFTER.format(name="prepar", names="prepare, train"),
        ),
        ({"steps": [step("a", "a")]}, {}, "pipeline.steps[0].after", p.AFTER_ITSELF),
        # It was a 500 (the dependency's unique row written twice).
        ({"steps": [step("a"), step("b", "a", "a")]}, {}, "pipeline.steps[1].after", p.AFTER_TWICE.format(name="a")),
        (
            {"steps": [step("a", when="failure")]},
            {},
            "pipeline.steps[0].when",
            p.WHEN_WITHOUT_AFTER.format(when="failure"),
        ),
        (
            {"steps": [step("a", "c"), step("b", "a"), step("c", "b")]},
            {},
            "pipeline.steps[0].after",
            p.CYCLE.format(cycle="a -> c -> b -> a"),
        ),
        (
            {"steps": [step("a", when="sometimes")]},
            {},
            "pipeline.steps[0].when",
            '"sometimes" is not a valid choice (one of success, failure, always).',
        ),
        (
            {"steps": [step("a"), step("b", resources={"gpu_count": 8})]},
            {},
            "pipeline.steps[1].resources.gpu_type",
            GPU_TYPE_REQUIRED.format(gpus=8),
        ),
        (
            {"steps": [step("a", array={"count": 3})]},
            {},
            "pipeline.steps[0].array",
            p.STEP_IS_A_JOB.format(block="array"),
        ),
        (
            {"steps": [step("a", schedule={"cron": "0 3 * * *"})]},
            {},
            "pipeline.steps[0].schedule",
            p.STEP_IS_A_JOB.format(block="schedule"),
        ),
        ({"steps": [step("a", team="other")]}, {}, "pipeline.steps[0].team", p.STEP_FIELD_AT_TOP.format(field="team")),
        ({"steps": [{"name": "a"}]}, {}, "pipeline.steps[0].command", p.NO_COMMAND),
        (
            {"steps": [step("a"), step("b", command=["x", "{steps.c.job_id}"])]},
            {},
            "pipeline.steps[1].command",
            p.UNKNOWN_STEP_REFERENCE.format(reference="{steps.c.job_id}", names="a, b"),
        ),
        ({"steps": [step("a")]}, {"array": {"count": 2}}, "pipeline", ONE_GROUP_KIND),
        ({"steps": [step("a", gpu_cont=1)]}, {}, "pipeline.steps[0].gpu_cont", UNKNOWN_FIELD),
    ],
)
def test_a_bad_pipeline_is_refused_naming_the_step_and_field(pipeline, top, field, message):
    assert errors(pipeline, **top) == {field: [message]}


def test_a_job_without_a_pipeline_still_needs_a_command():
    serializer = JobSpecSerializer(data=TOP)
    assert not serializer.is_valid()
    assert flatten_errors(serializer.errors) == {"command": [REQUIRED]}


def test_steps_take_the_top_levels_fields_and_may_override_them():
    spec = accepted(
        {"steps": [{"name": "a"}, step("b", "a", priority="P3", env={"B": "2"})]},
        command=["python", "shared.py"],
        priority="P1",
        env={"A": "1", "B": "1"},
    )
    a, b = (p.normalized_step({**spec, "secret_env": {}}, s) for s in spec["pipeline"]["steps"])
    assert (a["command"], a["priority"], a["name"]) == (["python", "shared.py"], "P1", "nightly/a")
    assert a["env"] == {"A": "1", "B": "1"}
    assert (b["command"], b["priority"], b["env"]) == (["python", "b.py"], "P3", {"A": "1", "B": "2"})
    assert spec["pipeline"]["steps"][1]["when"] == "success"


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ({"a": []}, [[0]]),
        ({"prepare": [], "train": ["prepare"], "evaluate": ["train"], "notify": ["train"]}, [[0], [1], [2, 3]]),
        ({"a": [], "b": [], "c": ["a", "b"]}, [[0, 1], [2]]),
        # a step's layer is past its deepest step before: d comes after b (layer 1) and a (layer 0)
        ({"a": [], "b": ["a"], "d": ["a", "b"]}, [[0], [1], [2]]),
    ],
)
def test_the_dag_is_drawn_in_layers(after, expected):
    assert layers([{"name": name, "after": before} for name, before in after.items()]) == expected


@pytest.mark.parametrize(
    ("after", "cycle"),
    [
        ({"a": [], "b": ["a"]}, []),
        ({"a": ["b"], "b": ["a"]}, ["a", "b", "a"]),
        ({"x": [], "a": ["c"], "b": ["a"], "c": ["b"]}, ["a", "c", "b", "a"]),
    ],
)
def test_a_cycle_is_found_in_the_steps_order(after, cycle):
    assert p.find_cycle(after) == cycle


@pytest.mark.parametrize(
    ("counts", "cancel_requested", "state"),
    [
        ({"RUNNING": 1, "PENDING": 2}, False, ("RUNNING", "")),
        ({"SUCCEEDED": 1, "FAILED": 1, "PENDING": 1}, False, ("PENDING", "")),  # its failure step still to run
        ({"SUCCEEDED": 3, "SKIPPED": 1}, False, ("SUCCEEDED", "")),
        ({"SUCCEEDED": 2, "FAILED": 1, "SKIPPED": 1}, False, ("FAILED", "GROUP")),
        ({"SUCCEEDED": 1, "CANCELLED": 1, "SKIPPED": 2}, False, ("CANCELLED", "CANCELLED")),
        ({"SUCCEEDED": 1, "FAILED": 1, "CANCELLED": 2}, True, ("CANCELLED", "CANCELLED")),
        ({"SKIPPED": 2}, False, ("SUCCEEDED", "")),
    ],
)
def test_a_pipelines_state_from_its_steps(counts, cancel_requested, state):
    assert derive_pipeline_state(counts, cancel_requested=cancel_requested) == state


def test_run_placeholders_and_step_ids_are_put_in_and_other_braces_stay(settings):
    settings.MLQ_PIPELINE_RUN_ROOT = "/shared/runs"
    directory = run_dir("nightly ranking/v2", 42)
    assert directory == "/shared/runs/nightly-ranking-v2/42"
    values = {"run_dir": directory, "run_id": "42", "steps.prepare.job_id": "43"}
    assert substitute("{run_dir}/data {run_id} {steps.prepare.job_id} {steps.x.job_id} {index} {}", values) == (
        "/shared/runs/nightly-ranking-v2/42/data 42 43 {steps.x.job_id} {index} {}"
    )


def test_validation_error_shape_is_a_list_per_step():
    with pytest.raises(ValidationError) as caught:
        p.PipelineSerializer(data={"steps": [step("a"), step("a")]}).is_valid(raise_exception=True)
    assert flatten_errors(caught.value.detail) == {
        "steps[1].name": [p.DUPLICATE_STEP.format(name="a", first=0, second=1)]
    }


def test_the_example_pipeline_is_accepted():
    with open("examples/pipeline.yaml") as example:
        example = yaml.safe_load(example)
    spec = accepted(example.pop("pipeline"), **example)
    assert [s["name"] for s in spec["pipeline"]["steps"]] == ["prepare", "train", "evaluate", "notify-failure"]
