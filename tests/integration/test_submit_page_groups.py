"""The submit page's array and sweep inputs (issue 16): the spec's `array:` and `sweep:` blocks,
the API's messages next to the input they name, and a group's clone and YAML keeping its block."""

import pytest
import yaml
from django.utils.html import escape

from scheduling.group_spec import RANDOM_NEEDS_TRIALS
from scheduling.models import Job
from scheduling.web.submit_page import PARAMETERS_SHAPE, form_to_spec
from tests.conftest import make_spec
from tests.integration.test_submit_page import URL, form_of, inline_errors, logged_in, post

SWEEP_INPUTS = {
    "sweep.method": "grid",
    "sweep.parameters": "lr: [0.001, 0.01]\nbatch_size: [32, 64]",
    "sweep.parallelism": "2",
    "sweep.metric.name": "val_loss",
    "sweep.metric.goal": "minimize",
    "sweep.early_stop.rule": "median",
    "sweep.early_stop.min_reports": "4",
}


@pytest.fixture
def form(alice) -> dict:
    """alice's fresh form for a one-GPU job."""
    return {**form_of(alice.get(URL)), "command": "python\ntrain.py\n--lr\n{lr}", "resources.gpu_count": "1"}


@pytest.fixture
def alice(demo):
    return logged_in("alice")


def test_a_fresh_form_is_no_group(alice, form):
    assert all(form[name] == "" for name in form if name.startswith("array.") or name == "sweep.method")
    assert "array" not in yaml.safe_load(form["yaml"]) and "sweep" not in yaml.safe_load(form["yaml"])


def test_the_array_inputs_submit_an_array(alice, form):
    inputs = {"array.count": "4", "array.parallelism": "2", "array.max_failures": "1"}
    response = post(alice, form, "submit", **inputs, command="python\ninfer.py\n{index}")
    parent = Job.objects.get(parent=None)
    assert response.status_code == 302 and response.url == f"/jobs/{parent.pk}/"
    assert (parent.group_kind, parent.group["count"], parent.group["parallelism"], parent.group["max_failures"]) == (
        "array",
        4,
        2,
        1,
    )
    assert [kid.command for kid in parent.children.order_by("group_index")][3] == ["python", "infer.py", "3"]


def test_the_sweep_inputs_submit_a_sweep_with_its_metric_and_early_stop(alice, form):
    response = post(alice, form, "submit", **SWEEP_INPUTS)
    parent = Job.objects.get(parent=None)
    assert response.status_code == 302
    assert parent.spec["sweep"] | {"seed": None} == {
        "method": "grid",
        "parameters": {"lr": [0.001, 0.01], "batch_size": [32, 64]},
        "max_trials": 4,
        "parallelism": 2,
        "max_failures": None,
        "metric": {"name": "val_loss", "goal": "minimize"},
        "early_stop": {"rule": "median", "min_reports": 4},
        "seed": None,
    }
    assert sorted(kid.params["lr"] for kid in parent.children.all()) == [0.001, 0.001, 0.01, 0.01]


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"array.count": "0"}, "array.count", "Ensure this value is greater than or equal to 1."),
        (
            {"array.count": "3", "array.max_failures": "3"},
            "array.max_failures",
            "must be less than the group's 3 elements, got 3.",
        ),
        ({"array.indices": "9-2"}, "array.indices", "'9-2' runs backwards: write the lower index first."),
        (
            {"sweep.method": "random", "sweep.parameters": "dropout: {min: 0.0, max: 0.5}"},
            "sweep.max_trials",
            RANDOM_NEEDS_TRIALS,
        ),
        (
            {"sweep.method": "grid", "sweep.parameters": "lr: 0.1"},
            "sweep.parameters",
            "lr: give a list of values, or a range {min: .., max: ..} (method: random).",
        ),
        (
            {**SWEEP_INPUTS, "sweep.metric.name": "-bad"},
            "sweep.metric.name",
            "'-bad' is not a metric name: letters, digits and _ . / -, starting with a letter, digit or _ (as "
            "mlqueue.report takes them).",
        ),
    ],
    ids=["count 0", "max_failures", "backwards indices", "random without max_trials", "parameter shape", "metric name"],
)
def test_a_bad_group_input_gets_the_apis_message_next_to_it_and_writes_nothing(
    api, alice, form, changes, field, message
):
    response = post(alice, form, "submit", **changes)
    assert response.status_code == 200 and Job.objects.count() == 0
    assert inline_errors(response, field) == escape(message)
    assert response.context["summary"] == [f"{field}: {message}"]
    # The API names the same field with the same message: the form is its spec.
    spec, _ = form_to_spec({**form, **changes})
    assert api("alice").post("/api/v1/jobs", spec, format="json").json()["fields"] == {field: [message]}


def test_parameters_that_are_not_yaml_are_named_on_their_input(alice, form):
    response = post(alice, form, "dry_run", **{"sweep.method": "grid", "sweep.parameters": "lr: [0.1"})
    assert inline_errors(response, "sweep.parameters").startswith(escape(PARAMETERS_SHAPE.format(problem="")[:40]))


def test_form_to_yaml_to_form_keeps_a_sweep(alice, form):
    first_yaml = form_of(post(alice, form | SWEEP_INPUTS, "to_yaml"))["yaml"]
    assert yaml.safe_load(first_yaml)["sweep"] == {
        "method": "grid",
        "parameters": {"lr": [0.001, 0.01], "batch_size": [32, 64]},
        "parallelism": 2,
        "metric": {"name": "val_loss", "goal": "minimize"},
        "early_stop": {"rule": "median", "min_reports": 4},
    }
    back = form_of(post(alice, form | {"yaml": first_yaml}, "from_yaml"))
    assert {name: back[name] for name in SWEEP_INPUTS} == SWEEP_INPUTS


def test_a_group_s_clone_and_yaml_view_keep_its_block(api, alice):
    spec = make_spec(resources={"gpu_count": 1}, topology_hint="none", array={"count": 5, "parallelism": 2})
    parent_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    clone = form_of(alice.get(f"{URL}?clone={parent_id}"))
    assert (clone["array.count"], clone["array.parallelism"], clone["array.max_failures"]) == ("5", "2", "0")
    assert yaml.safe_load(clone["yaml"])["array"] == {"count": 5, "parallelism": 2, "max_failures": 0}
    page = alice.get(f"/jobs/{parent_id}/").content.decode()
    assert escape("array:\n  count: 5\n  indices: null\n  parallelism: 2\n  max_failures: 0\n") in page
