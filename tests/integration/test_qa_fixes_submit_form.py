"""QA: YAML -> form and Clone of a pipeline, a schedule or a spec with a notify block printed
Python's repr of the whole block ("pipeline.steps: the form cannot hold [{'name': ...}] as it
is"), a schedule's every field on a line of its own, and a typo as "the form cannot hold 1".
Now: a line per block the form does not take, saying where to submit it; a typo named as the
API names it, an unknown field; a value the form would change as JSON, never a repr. And the
page's dry run of a spec whose client_job_id names a job of another spec says the submit's 409."""

from pathlib import Path

from django.utils.html import escape

from scheduling import services
from scheduling.services import SPEC_CONFLICT
from scheduling.web.form_fit import BLOCK_NOT_IN_FORM, BLOCKS_NOT_IN_FORM, NOT_A_SPEC_FIELD, NOT_IN_FORM
from tests.conftest import make_spec
from tests.integration.test_submit_page import URL, alice, form, form_of, logged_in, post  # noqa: F401 (fixtures)


def block(name: str) -> str:
    return BLOCK_NOT_IN_FORM.format(block=name, why=BLOCKS_NOT_IN_FORM[name])


def yaml_errors(client, form: dict, text: str) -> list[str]:  # noqa: F811
    return post(client, form, "from_yaml", yaml=text).context["state"].yaml_errors


def test_a_pipeline_is_one_line_saying_where_to_submit_it(demo):
    bob = logged_in("bob")
    errors = yaml_errors(bob, form_of(bob.get(URL)), Path("examples/pipeline.yaml").read_text())
    assert errors == [
        "pipeline: the form does not take pipelines: submit this spec with mlq submit or the API (docs/pipelines.md)"
    ]


def test_a_schedule_is_one_line(alice, form):  # noqa: F811
    errors = yaml_errors(alice, form, Path("examples/nightly.yaml").read_text())
    assert errors == [block("schedule")]


def test_an_unknown_field_is_named_as_the_api_names_it(alice, form):  # noqa: F811
    text = "team: research-foundation-models\ncommand: [a]\nbogus_field: 1\nresources: {gpu: 8}\n"
    assert yaml_errors(alice, form, text) == [
        NOT_A_SPEC_FIELD.format(path="bogus_field"),
        NOT_A_SPEC_FIELD.format(path="resources.gpu"),
    ]
    assert NOT_A_SPEC_FIELD.format(path="bogus_field") == "bogus_field: unknown field. The form leaves it out."


def test_a_notify_block_is_left_out_saying_so(alice, form):  # noqa: F811
    text = "team: research-foundation-models\ncommand: [a]\nnotify: {email: true, on: [failed]}\n"
    assert yaml_errors(alice, form, text) == [block("notify")]


def test_a_value_the_form_would_change_is_shown_as_json_not_a_repr(alice, form):  # noqa: F811
    text = "team: research-foundation-models\ncommand: [a]\nenv: {A: true}\n"
    assert yaml_errors(alice, form, text) == [NOT_IN_FORM.format(path="env.A", value="true")]


def test_a_clone_of_a_pipeline_says_the_form_does_not_take_it(demo, user):
    data = make_spec(team="production-ranking", client_job_id="p")
    del data["command"]  # each step has its own
    steps = [{"name": "prepare", "command": ["a"]}, {"name": "train", "after": ["prepare"], "command": ["b"]}]
    data["pipeline"] = {"steps": steps}
    team, spec = services.check_job_submission(user=user("bob"), data=data)
    job, _ = services.do_submit_job(user=user("bob"), team=team, spec=spec)
    response = logged_in("bob").get(f"/jobs/{job.pk}/clone/", follow=True)
    assert response.context["state"].yaml_errors == [block("pipeline")]
    assert escape(block("pipeline")) in response.content.decode()


def test_the_pages_dry_run_says_a_taken_client_job_id_would_be_refused(alice, form, user):  # noqa: F811
    team, spec = services.check_job_submission(user=user("alice"), data=make_spec(client_job_id="dup"))
    job, _ = services.do_submit_job(user=user("alice"), team=team, spec=spec)
    response = post(alice, form, "dry_run", client_job_id="dup")
    refusal = SPEC_CONFLICT.format(team="research-foundation-models", job_id=job.pk, client_job_id="dup")
    assert response.context["state"].alerts == [refusal]
