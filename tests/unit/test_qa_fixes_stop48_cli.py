"""QA stop 48, `mlq`: a spec file with a YAML alias that refers to itself (`env: &e {A: *e}`)
was a RecursionError's traceback where the server refuses any alias in one line; and Ctrl-C
during `submit --follow` said "job 311 was not cancelled" where the docs promise the state
("is still RUNNING (not cancelled)"). No Django, no database."""

import httpx
import pytest

from mlqueue.cli import app
from mlqueue.client import MlqError
from mlqueue.client.answers import _not_finite
from mlqueue.client.specs import load_spec
from mlqueue.yaml_body import YAML_ALIASES  # the API's words
from tests.unit.test_cli import FakeServer, clean_environment, job, run, sdk  # noqa: F401 (an autouse fixture)
from tests.unit.test_cli_qa_fixes import interrupted_after


@pytest.mark.parametrize(
    "text",
    [
        "team: vision\ncommand: [x]\nenv: &e {A: *e}\n",
        "team: vision\ncommand: [x]\na: &a [*a]\n",
        "team: vision\ncommand: &c [python]\nargs: *c\n",  # harmless, but the API refuses it too
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_yaml_alias_is_one_line_naming_the_file_as_the_api_refuses_it(tmp_path, text, dry_run):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    server = FakeServer({})
    result = run(server, "submit", str(path), *(["--dry-run"] if dry_run else []))
    assert (result.exit_code, result.stderr) == (1, f"{path}: {YAML_ALIASES}\n")
    assert "Traceback" not in result.output and not server.requests


def test_the_cli_and_the_api_refuse_aliases_in_the_same_words():
    from mlqueue.client import specs

    assert (
        specs.YAML_ALIASES
        == YAML_ALIASES
        == ("YAML anchors and aliases (&, *) are not supported: write the spec out in full.")
    )


def test_a_merge_without_an_alias_is_still_read(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("team: vision\nresources:\n  <<: {gpu_count: 2}\n  gpu_type: H100\n")
    assert load_spec(path)["resources"] == {"gpu_count": 2, "gpu_type": "H100"}


def test_a_body_inside_itself_is_refused_naming_where_not_walked_forever():
    env = {}
    env["A"] = env
    with pytest.raises(MlqError) as refused:
        _not_finite({"team": "vision", "env": env})
    assert refused.value.detail == "env.A: holds itself (a mapping or list inside itself): JSON cannot send it"
    looped = []
    looped.append(looped)
    with pytest.raises(MlqError, match=r"^0: holds itself"):
        _not_finite(looped)
    shared = [1.0]  # the same list twice, side by side, is no loop
    assert _not_finite({"a": shared, "b": shared, "c": [float("inf")]}) == ("c.0", float("inf"))


def test_the_sdk_refuses_a_body_inside_itself_before_sending_it():
    server = FakeServer({})
    spec = {"team": "vision", "command": ["x"]}
    spec["env"] = {"SELF": spec}
    with pytest.raises(MlqError, match="env.SELF: holds itself"):
        sdk(server).submit(spec)
    assert not server.requests


LINE = {"job_id": 7, "rank": 0, "attempt": 1, "stream": "stdout", "offset": 0, "next_offset": 7, "text": "tick 1\n"}


def test_ctrl_c_during_submit_follow_names_the_state_read_then(spec_file):
    """The followed log reads no state: it is read once on Ctrl-C, as the docs promise."""
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7/logs"): interrupted_after([(200, LINE)]),
            ("GET", "/api/v1/jobs/7"): (200, job(state="RUNNING")),
        }
    )
    result = run(server, "submit", str(spec_file), "--follow")
    assert result.exit_code == app.EXIT_INTERRUPTED == 130
    assert result.stderr.strip().splitlines()[-1] == "mlq: interrupted; job 7 is still RUNNING (not cancelled)"
    assert not server.bodies("POST", "/api/v1/jobs/7/cancel")


def test_ctrl_c_with_a_server_that_does_not_answer_still_exits_at_once(spec_file):
    def down(request):
        raise httpx.ConnectError("refused")

    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7/logs"): interrupted_after([(200, LINE)]),
            ("GET", "/api/v1/jobs/7"): down,
        }
    )
    result = run(server, "submit", str(spec_file), "--follow")
    assert (result.exit_code, result.stderr.strip().splitlines()[-1]) == (130, app.INTERRUPTED_UNSEEN.format(job=7))


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\nteam: vision\ncommand: [python, train.py]\nresources:\n  gpu_count: 1\n")
    return path


def test_a_set_through_a_value_names_its_kind_with_the_right_article(spec_file):
    """QA: "resources.tasks is a int, not a mapping"."""
    spec_file.write_text("team: vision\ncommand: [x]\nresources: {tasks: 2}\n")
    result = run(FakeServer({}), "submit", str(spec_file), "--set", "resources.tasks.count=3")
    assert result.exit_code == 2  # a usage error, as the README says
    assert "resources.tasks.count: resources.tasks is an integer, not a mapping" in result.output
    assert " a int" not in result.output


def test_an_answer_of_another_shape_names_its_kind_with_the_right_article():
    result = run(FakeServer({("GET", "/api/v1/jobs/4"): (200, 5)}), "status", "4")
    assert result.exit_code == 1
    assert result.stderr.startswith("the server's answer is not an mlqueue job (an integer):")


def test_yaml_nested_thousands_deep_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    result = run(FakeServer({}), "submit", str(path))
    assert result.exit_code == 1
    assert result.stderr == f"{path}: the YAML nests thousands of levels deep; a job spec nests three.\n"
