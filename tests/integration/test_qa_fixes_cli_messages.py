"""QA: messages of `mlq` that named the wrong thing. `--priority P9` listed 'p0', 'p1' (as no
user types them); `--server notaurl` asked for a login to `notaurl`; `--at yesterday` named the
ISO format alone though `+30m` is taken; `--hours 0` was refused as `duration_hours`; a cron
`@fortnightly` was told it "has 1 fields"."""

import pytest
from click.testing import CliRunner

from mlqueue import cli
from mlqueue.cli.app import NOT_A_CHOICE
from mlqueue.cli.maintenance import NOT_A_TIME
from mlqueue.client.sdk import BAD_SERVER, NOT_HTTP
from scheduling.core.cron import MACROS, UNKNOWN_MACRO
from scheduling.models import MaintenanceWindow
from tests.conftest import make_spec
from tests.integration.test_cli_maintenance import mlq_as  # noqa: F401 (the fixture: mlq as a demo user)

pytestmark = pytest.mark.django_db


def test_a_priority_not_among_the_choices_lists_them_as_users_type_them(mlq_as):  # noqa: F811
    refused = mlq_as("alice", "set", "1", "--priority", "P9")
    assert refused.exit_code == 2
    assert NOT_A_CHOICE.format(value="P9", choices="P0, P1, P2, P3") in refused.output
    assert "'p0'" not in refused.output
    state = mlq_as("alice", "jobs", "--state", "done")
    assert state.exit_code == 2 and "'done' is not one of PENDING, " in state.output


@pytest.mark.parametrize(
    ("server", "why"), [("notaurl", NOT_HTTP), ("localhost:8000", NOT_HTTP), ("http://[bad", "Invalid IPv6 URL")]
)
def test_a_server_that_is_no_url_is_said_before_any_token(monkeypatch, tmp_path, server, why):
    config = tmp_path / "mlqueue" / "config.toml"
    config.parent.mkdir()
    config.write_text('server = "https://mlqueue.example.com"\ntoken = "abc"\nuser = "alice"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for name in ("MLQ_SERVER", "MLQ_TOKEN", "MLQ_USER"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli.main, ["--server", server, "jobs"])
    assert result.exit_code == 1
    assert result.output.splitlines() == [BAD_SERVER.format(server=server, error=why)]


def test_a_time_that_is_no_time_names_both_forms(clock, mlq_as):  # noqa: F811
    window = "maintenance", "create", "--rack", "z1-r1", "--reason", "x"
    refused = mlq_as("ops", *window, "--at", "yesterday", "--hours", "4")
    assert refused.exit_code == 2
    assert NOT_A_TIME.format(value="yesterday") in " ".join(refused.output.split())
    assert not MaintenanceWindow.objects.exists()


def test_a_refused_length_names_the_option(clock, mlq_as):  # noqa: F811
    window = "maintenance", "create", "--rack", "z1-r1", "--reason", "x", "--at", "+1h"
    zero = mlq_as("ops", *window, "--hours", "0")
    assert zero.exit_code == 1
    assert zero.output.splitlines() == ["--hours: Ensure this value is greater than or equal to 0.001."]
    backwards = mlq_as("ops", *window, "--until", "+30m")
    assert backwards.output.splitlines() == ["--until: must be after --at (2026-04-20 10:00 UTC)."]


def test_an_unknown_cron_name_lists_the_known_ones(api):
    body = {
        "name": "fortnightly",
        "cron": "@fortnightly",
        "timezone": "UTC",
        "spec": make_spec(client_job_id=None),
    }
    refused = api("alice").post("/api/v1/schedules", body, format="json")
    assert refused.status_code == 400
    message = UNKNOWN_MACRO.format(expr="@fortnightly", macros=", ".join(MACROS))
    assert refused.json()["fields"] == {"cron": [message]}
    assert "@daily" in message and "has 1 fields" not in message
