"""`mlq` against the real API (the Django app in process) as the README sets it up: MLQ_SERVER and
MLQ_TOKEN alone, no user name recorded. `--mine` is the server's "me", `--state` takes every state
the API filters on, and `mlq children` of a job that is not a group is an error."""

import json

import pytest
import yaml
from click.testing import CliRunner
from django.contrib.auth import get_user_model

from mlqueue import cli
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.cli.groups import NOT_A_GROUP
from mlqueue.client import JOB_STATES, Client
from teams.models import ApiToken
from tests.conftest import make_spec
from tests.integration.test_cli_groups import DjangoTransport

pytestmark = pytest.mark.django_db


@pytest.fixture
def mlq_as(demo, monkeypatch, tmp_path):
    """mlq_as(username)(*args) -> click's result of running mlq with that user's token and no config file."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MLQ_USER", raising=False)
    transport = DjangoTransport()

    def as_user(username: str):
        _, token = ApiToken.issue(user=get_user_model().objects.get(username=username))

        def run(*args):
            def build():
                return Client(server="http://testserver", token=token, transport=transport)

            return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)

        return run

    return as_user


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "small.yaml"
    spec = make_spec(client_job_id=None, name="small", resources={"gpu_count": 1}, topology_hint="none")
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_mine_is_the_tokens_owner_with_no_user_name_configured(mlq_as, spec_file):
    alice, rita = mlq_as("alice"), mlq_as("rita")
    ours = json.loads(alice("submit", spec_file, "-o", "json").stdout)["id"]
    theirs = json.loads(rita("submit", spec_file, "-o", "json").stdout)["id"]
    assert {row["id"] for row in json.loads(rita("jobs", "-o", "json").stdout)} >= {ours, theirs}
    for verb in ("jobs", "queue"):
        mine = alice(verb, "--mine", "-o", "json")
        assert mine.exit_code == 0, mine.output
        assert [row["id"] for row in json.loads(mine.stdout)] == [ours], verb


def test_every_state_the_cli_offers_is_one_the_api_filters_on(mlq_as):
    alice = mlq_as("alice")
    for state in JOB_STATES:
        listed = alice("jobs", "--state", state.lower(), "-o", "json")
        assert listed.exit_code == 0, (state, listed.output)


def test_children_of_a_single_job_exits_1(mlq_as, spec_file):
    alice = mlq_as("alice")
    single = json.loads(alice("submit", spec_file, "-o", "json").stdout)["id"]
    refused = alice("children", str(single))
    assert (refused.exit_code, refused.stderr.strip()) == (EXIT_REFUSED, NOT_A_GROUP.format(job=single))
