"""`mlq maintenance list|create|cancel` against the real API (the Django app in process, as
tests/integration/test_cli_groups.py runs it), as the demo's site admin and as a user."""

import json

import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model

from mlqueue import cli
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.cli.cluster import UNCHANGED
from mlqueue.cli.maintenance import IN_THE_PAST, NOT_FROM_NOW
from mlqueue.client import Client
from scheduling.models import MaintenanceWindow
from teams.models import ApiToken
from tests.integration.test_cli_groups import DjangoTransport

pytestmark = pytest.mark.django_db


@pytest.fixture
def mlq_as(demo, monkeypatch, tmp_path):
    """mlq_as("ops", *args) -> click's result of running mlq as that user against this process's API."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    transport = DjangoTransport()

    def run(username, *args):
        _, token = ApiToken.issue(user=get_user_model().objects.get(username=username))

        def build():
            return Client(server="http://testserver", token=token, transport=transport)

        return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)

    return run


def test_create_list_cancel(clock, mlq_as):
    created = mlq_as(
        "ops",
        "maintenance",
        "create",
        "--rack",
        "z1-r1",
        "--at",
        "2026-04-20T10:00Z",
        "--hours",
        "4",
        "--reason",
        "PDU",
    )
    window = MaintenanceWindow.objects.get()
    assert created.exit_code == 0, created.output
    assert created.output == (
        f"scheduled maintenance #{window.pk} (rack z1-r1): SCHEDULED, 2026-04-20T10:00:00Z for 4 h, 8 node(s)\n"
    )
    listed = mlq_as("ops", "maintenance", "list")
    assert listed.output.splitlines()[0].split() == [
        "ID",
        "TARGET",
        "STATE",
        "STARTS",
        "(UTC)",
        "HOURS",
        "NODES",
        "REASON",
    ]
    assert listed.output.splitlines()[1].split() == [
        str(window.pk),
        "rack",
        "z1-r1",
        "SCHEDULED",
        "2026-04-20T10:00:00Z",
        "4",
        "8",
        "PDU",
    ]
    as_json = json.loads(mlq_as("ops", "maintenance", "list", "-o", "json").output)
    assert [row["id"] for row in as_json] == [window.pk]
    cancelled = mlq_as("ops", "maintenance", "cancel", str(window.pk))
    assert cancelled.output.startswith(f"cancelled maintenance #{window.pk} (rack z1-r1): CANCELLED")
    assert mlq_as("ops", "maintenance", "list").output.splitlines()[1:] == []  # the header alone
    old = json.loads(mlq_as("ops", "maintenance", "list", "--state", "CANCELLED", "-o", "json").output)
    assert [(row["id"], row["state"]) for row in old] == [(window.pk, "CANCELLED")]


def test_bad_input_is_named_and_users_are_refused(clock, mlq_as):
    past = mlq_as(
        "ops", "maintenance", "create", "--zone", "z1", "--at", "2026-04-20T08:00Z", "--hours", "1", "--reason", "x"
    )
    assert past.exit_code == EXIT_REFUSED
    assert "--at: must be in the future (it is 2026-04-20 09:00:00 UTC now)." in past.output
    two = mlq_as(
        "ops",
        "maintenance",
        "create",
        "--zone",
        "z1",
        "--rack",
        "z1-r1",
        "--at",
        "2026-04-20T10:00Z",
        "--hours",
        "1",
        "--reason",
        "x",
    )
    assert two.exit_code == 2 and "give exactly one of --rack, --zone or --node (repeatable)" in two.output
    endless = mlq_as("ops", "maintenance", "create", "--zone", "z1", "--at", "2026-04-20T10:00Z", "--reason", "x")
    assert endless.exit_code == 2 and "give --hours or --until" in endless.output
    user = mlq_as("alice", "maintenance", "list")
    assert user.exit_code == EXIT_REFUSED
    assert "only site admins may see or schedule maintenance windows." in user.output
    assert not MaintenanceWindow.objects.exists()


def test_times_from_now_and_without_an_offset(clock, mlq_as):
    """`--at +2h` is two hours from now by the CLI's clock (frozen here at 09:00 UTC, as the
    server's); a time without an offset is UTC; a relative form the CLI does not know is the
    CLI's to refuse as a usage error, naming the forms it takes (QA: `-30m`, `+40s`, `+1y` went
    to the server as typed and came back "Datetime has wrong format")."""
    window = "maintenance", "create", "--reason", "PDU"
    later = mlq_as("ops", *window, "--rack", "z1-r1", "--at", "+2h", "--hours", "1")
    assert (
        later.output.startswith("scheduled maintenance #") and "SCHEDULED, 2026-04-20T11:00:00Z for 1 h" in later.output
    )
    span = mlq_as("ops", *window, "--rack", "z1-r2", "--at", "+30m", "--until", "+1.5d")
    assert "SCHEDULED, 2026-04-20T09:30:00Z for 35.5 h" in span.output
    naive = mlq_as("ops", *window, "--zone", "z2", "--at", "2026-04-20T12:00", "--hours", "2")
    assert "SCHEDULED, 2026-04-20T12:00:00Z for 2 h" in naive.output
    for typed, said in (("+2w", NOT_FROM_NOW), ("+40s", NOT_FROM_NOW), ("+1y", NOT_FROM_NOW), ("-30m", IN_THE_PAST)):
        unknown = mlq_as("ops", *window, "--zone", "z1", "--at", typed, "--hours", "1")
        assert unknown.exit_code == 2 and said.format(value=typed) in unknown.output
    assert MaintenanceWindow.objects.count() == 3


def test_a_node_verb_that_changes_nothing_says_so_and_a_drained_node_reads_drained(mlq_as):
    """QA: `mlq uncordon` of a node in service, and `mlq include-gpus` of a node with nothing
    excluded, printed the table alone as if they had done something; a drained node with no
    task left read DRAINING, as one still draining does."""
    node = "z1-r1-h100-01"
    again = mlq_as("ops", "uncordon", node, "--reason", "already fine")
    assert again.exit_code == 0 and UNCHANGED.format(node=node) in again.stderr
    nothing = mlq_as("ops", "include-gpus", node, "--reason", "x")
    assert nothing.exit_code == 0 and f"{node}: no GPU was excluded: nothing changed" in nothing.stderr
    drained = mlq_as("ops", "drain", node, "--reason", "DIMM")
    assert drained.exit_code == 0 and "nothing changed" not in drained.stderr
    [row] = [line.split() for line in drained.stdout.splitlines() if line.startswith(node)]
    assert row[2:4] == ["DRAINED", "0"]  # ADMIN, TASKS: no task was on it
    twice = mlq_as("ops", "drain", node, "--reason", "DIMM")
    assert UNCHANGED.format(node=node) in twice.stderr
