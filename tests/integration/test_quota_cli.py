"""QA's `mlq quota` defects against the real API (the Django app in process): its help's
examples named a team the demo does not have, `--set h100=32` was an unknown class, `-o wide`
printed the plain table, and a lead's own weight went through."""

import json
import shlex

import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model

from agents.management.commands.seed_demo import DIVISIONS, TEAMS
from mlqueue import cli
from mlqueue.client import Client
from scheduling.leader.worker import run_pass
from scheduling.models import SchedulerLease
from teams.models import ApiToken, Quota
from tests.conftest import make_spec
from tests.integration.test_cli_groups import DjangoTransport
from tests.nodes import heartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture
def mlq_as(demo, monkeypatch, tmp_path):
    """mlq_as("rita", *args) -> click's result of running mlq as rita against this process's API."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    transport = DjangoTransport()

    def run(username: str, *args):
        _, token = ApiToken.issue(user=get_user_model().objects.get(username=username))

        def build():
            return Client(server="http://testserver", token=token, transport=transport)

        return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)

    return run


def help_examples(mlq_as) -> list[list[str]]:
    text = mlq_as("ops", "quota", "--help").stdout
    return [shlex.split(line)[1:] for line in text.splitlines() if line.strip().startswith("mlq quota ")]


def test_the_help_examples_name_demo_teams_and_work(mlq_as):
    examples = help_examples(mlq_as)
    assert len(examples) == 4
    for args in examples:
        assert args[1] in {*DIVISIONS, *TEAMS}, args
        ran = mlq_as("ops", *args)
        assert ran.exit_code == 0, (args, ran.output)


def test_set_takes_a_gpu_type_in_any_case(mlq_as):
    ran = mlq_as("rita", "quota", "research-foundation-models", "--set", "h100=33", "--set", "CPU=151", "--reason", "r")
    assert ran.exit_code == 0, ran.output
    team = Quota.objects.filter(team__name="research-foundation-models")
    assert dict(team.values_list("resource_class", "guaranteed")) == {"gpu:H100": 33, "gpu:A100": 10, "cpu": 151}


def test_a_lead_setting_her_own_weight_is_refused_with_who_may(mlq_as):
    ran = mlq_as("rita", "quota", "research-foundation-models", "--set", "H100.weight=1000", "--reason", "x")
    assert ran.exit_code != 0
    assert "only site admins and leads of research" in ran.stderr
    assert Quota.objects.get(team__name="research-foundation-models", resource_class="gpu:H100").weight == 1.0


def test_wide_adds_use_borrowed_lent_and_share(mlq_as, api):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    spec = make_spec(
        client_job_id=None, team="research-foundation-models", resources={"gpu_count": 8, "gpu_type": "H100"}
    )
    alice = api("alice")
    for index in range(5):  # 40 H100 against a guarantee of 32: 8 borrowed
        assert alice.post("/api/v1/jobs", {**spec, "name": f"w{index}"}, format="json").status_code == 201
    run_pass(epoch=1)

    plain = mlq_as("rita", "quota", "research-foundation-models").stdout.splitlines()
    wide = mlq_as("rita", "quota", "research-foundation-models", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["CLASS", "GUARANTEED", "BORROW", "LIMIT", "WEIGHT", "USED", "BORROWED", "LENT", "SHARE"]
    assert plain[0].split() == wide[0].split()[:5]
    h100 = next(line.split() for line in wide if line.startswith("gpu:H100"))
    assert h100[:7] == ["gpu:H100", "32", "64", "1.0", "40", "8", "0"]


def test_history_lists_a_teams_quota_changes_newest_first(mlq_as):
    """QA: a lead read her team's quota history in the API alone."""
    for guaranteed in ("33", "34"):
        assert (
            mlq_as(
                "rita", "quota", "research-foundation-models", "--set", f"H100={guaranteed}", "--reason", "r"
            ).exit_code
            == 0
        )
    shown = mlq_as("alice", "quota", "research-foundation-models", "--history", "-o", "json")
    assert shown.exit_code == 0, shown.output
    changes = [row for row in json.loads(shown.stdout) if row["kind"] == "QUOTA_CHANGED"]
    assert [row["data"]["after"]["guaranteed"] for row in changes[:2]] == [34, 33]
    assert all(row["actor"] == "rita" for row in changes[:2])
    table = mlq_as("alice", "quota", "research-foundation-models", "--history").stdout
    assert table.splitlines()[0].split() == ["AT", "BY", "KIND", "MESSAGE"]
    both = mlq_as("rita", "quota", "research-foundation-models", "--history", "--set", "H100=35")
    assert both.exit_code == 2 and "give --set or --history, not both" in both.output
