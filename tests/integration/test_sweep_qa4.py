"""QA round 4 of sweeps, through POST /api/v1/jobs: each refusal is a 400 naming the field with
its exact message and writes nothing; what QA found refused wrongly is accepted."""

import json

import pytest

from scheduling.models import Job
from tests.conftest import make_spec
from tests.integration.test_groups import ONE_GPU, children, submit


def refused(api, body) -> dict:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = api("alice").generic("POST", "/api/v1/jobs", data, content_type="application/json")
    assert response.status_code == 400, response.content[:500]
    assert not Job.objects.exists()
    return response.json()


def sweep_spec(**sweep) -> dict:
    return make_spec(client_job_id=None, resources=ONE_GPU, sweep={"method": "grid", **sweep})


def test_a_sweep_ranks_by_a_metric_name_starting_with_a_digit_as_mlqueue_report_takes_it(api, leader):
    parent = submit(api, sweep={"method": "grid", "parameters": {"lr": [1, 2]}, "metric": {"name": "1st_loss"}})
    assert parent.group["metric"] == {"name": "1st_loss", "goal": "minimize"}


def test_a_metric_name_mlqueue_report_refuses_is_refused_naming_the_field(api, leader):
    message = (
        "'-loss' is not a metric name: letters, digits and _ . / -, starting with a letter, digit or _ (as "
        "mlqueue.report takes them)."
    )
    assert refused(api, sweep_spec(parameters={"lr": [1]}, metric={"name": "-loss"})) == {
        "detail": f"sweep.metric.name: {message}",
        "fields": {"sweep.metric.name": [message]},
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["1", 1], "lr: '1' and 1 both go into a command as '1'"),
        ([True, 0.5, "true"], "lr: True and 'true' both go into a command as 'true'"),
        ([1, 1], "lr: 1 is listed twice"),
    ],
)
def test_grid_values_that_make_the_same_trial_are_a_400(api, leader, values, message):
    message += ": each value once (a repeated value runs the same trials again)."
    assert refused(api, sweep_spec(parameters={"lr": values})) == {
        "detail": f"sweep.parameters: {message}",
        "fields": {"sweep.parameters": [message]},
    }


def test_grid_values_of_different_text_make_a_trial_each(api, leader):
    parent = submit(api, sweep={"method": "grid", "parameters": {"lr": [1, 1.0]}}, command=["train", "--lr={lr}"])
    assert [kid.command for kid in children(parent)] == [["train", "--lr=1"], ["train", "--lr=1.0"]]


def test_a_parameter_named_trial_is_a_400_naming_it(api, leader):
    """It replaced {trial}, the trial's number, in every command."""
    message = "{trial} in a trial's command and env values is the trial's number: name the parameter otherwise."
    body = sweep_spec(parameters={"lr": [1], "trial": [5, 6]})
    assert refused(api, body) == {
        "detail": f"sweep.parameters.trial: {message}",
        "fields": {"sweep.parameters.trial": [message]},
    }


def test_trial_still_stands_for_the_trial_number(api, leader):
    parent = submit(api, sweep={"method": "grid", "parameters": {"index": [5, 6]}}, command=["x", "{trial}", "{index}"])
    assert [kid.command for kid in children(parent)] == [["x", "0", "5"], ["x", "1", "6"]]


@pytest.mark.parametrize(("written", "shown"), [("1e400", "inf"), ("-1e400", "-inf")])
def test_an_infinite_grid_value_is_said_to_be_no_finite_number(api, leader, written, shown):
    body = json.dumps(sweep_spec(parameters={"lr": [0.1, 12345]})).replace("12345", written).encode()
    message = f"lr: a value must be a finite number, not {shown}."
    assert refused(api, body) == {"detail": f"sweep.parameters: {message}", "fields": {"sweep.parameters": [message]}}


def test_a_nan_grid_value_in_yaml_is_said_to_be_no_finite_number(api, leader):
    body = make_spec(client_job_id=None, resources=ONE_GPU)
    text = json.dumps(body) + "\n"  # JSON is YAML; the sweep is added in YAML's own words
    text = text[:-2] + ', "sweep": {method: grid, parameters: {lr: [0.1, .nan]}}}\n'
    response = api("alice").generic("POST", "/api/v1/jobs", text.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content[:500]
    assert response.json()["fields"] == {"sweep.parameters": ["lr: a value must be a finite number, not nan."]}
    assert not Job.objects.exists()
