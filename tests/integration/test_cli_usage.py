"""`mlq usage` against the real API (the Django app in process), as alice on a frozen clock."""

import json

import pytest

from mlqueue.cli.app import EXIT_REFUSED
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)
from tests.integration.test_usage_api import RANKING, RFM, attempt, now  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db
WINDOW = ("--from", "2026-04-20T08:00:00Z", "--to", "2026-04-20T12:00:00Z")


@pytest.fixture
def rows(now, mlq):  # noqa: F811
    attempt(1, team=RFM, owner="alice", start=-3, end=-0.5)
    attempt(
        2,
        team=RFM,
        owner="rita",
        start=-2,
        end=-1,
        gpus=16,
        outcome="PREEMPTED",
        lost_gpu_hours=4.0,
        lost_cause="drain",
    )
    attempt(3, team=RANKING, owner="bob", start=-2, gpus=4)  # not alice's to see


def test_a_table_per_owner_with_a_total(mlq, rows):  # noqa: F811
    result = mlq("usage", *WINDOW, "--by", "owner")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "usage from 2026-04-20T08:00:00Z to 2026-04-20T12:00:00Z"
    assert lines[1].split() == [
        "OWNER",
        "GPU-H",
        "CPU-H",
        "COST",
        "(USD)",
        "LOST",
        "GPU-H",
        "WAIT",
        "P50",
        "WAIT",
        "P95",
    ]
    assert lines[2].split() == ["alice", "20.0", "40.0", "0.00", "0.0", "30m", "30m"]
    assert lines[3].split() == ["rita", "16.0", "16.0", "0.00", "4.0", "30m", "30m"]
    assert lines[4].split() == ["TOTAL", "36.0", "56.0", "0.00", "4.0", "30m", "30m"]


def test_wide_shows_causes_and_outcomes_and_json_is_the_apis(mlq, rows):  # noqa: F811
    wide = mlq("usage", *WINDOW, "--class", "H100", "-o", "wide").output
    assert "drain 4" in wide and "PREEMPTED 1, SUCCEEDED 1" in wide
    answer = json.loads(mlq("usage", *WINDOW, "-o", "json").output)
    assert [(row["team"], row["gpu_hours"]) for row in answer["rows"]] == [(RFM, 36.0)]


def test_csv_is_the_servers(mlq, rows):  # noqa: F811
    result = mlq("usage", *WINDOW, "--by", "team,day", "--csv")
    assert result.output.splitlines()[1].startswith(f"{RFM},2026-04-20,36.0,56.0,")


def test_a_refusal_names_the_field(mlq, rows):  # noqa: F811
    result = mlq("usage", "--from", "yesterday")
    assert result.exit_code == EXIT_REFUSED
    assert "from: Datetime has wrong format." in result.output
    assert mlq("usage", "--team", RANKING).exit_code == EXIT_REFUSED
