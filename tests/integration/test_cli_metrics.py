"""`mlq metrics JOB` against the real API (the Django app in process), as alice: each series'
last value, span and extremes; a rank's alone; the API's answer for scripts; a job with none.
And `mlq submit --dry-run` of a group: its settings and a sweep's first trials."""

import json

import pytest
import yaml

from scheduling.models import Job
from tests.conftest import make_spec
from tests.integration.test_checkpoints import running_job
from tests.integration.test_cli_groups import mlq  # noqa: F401 (the fixture: mlq as alice)
from tests.integration.test_job_metrics import A, agent_settings, metric, send  # noqa: F401 (autouse: the join token)

pytestmark = pytest.mark.django_db


def test_mlq_metrics_prints_each_series_last_value_and_the_api_answer(api, leader, mlq):  # noqa: F811
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(
        clients[A],
        A,
        metric(job_id, 1, 10, val_loss=0.9, acc=0.5),
        metric(job_id, 2, 20, val_loss=0.4),
        metric(job_id, 3, 30, val_loss=0.6, acc=0.75),
    )
    table = mlq("metrics", str(job_id))
    assert table.exit_code == 0, table.output
    assert [line.split() for line in table.stdout.splitlines()] == [
        ["NAME", "STEPS", "LAST", "MIN", "MAX"],
        ["acc", "10-30", "0.75", "0.5", "0.75"],
        ["val_loss", "10-30", "0.6", "0.4", "0.9"],
    ]
    wide = mlq("metrics", str(job_id), "--name", "acc", "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "STEPS", "LAST", "MIN", "MAX", "ATTEMPT", "RANK", "AT"]
    assert wide[1].split()[:7] == ["acc", "10-30", "0.75", "0.5", "0.75", "1", "0"]
    answer = json.loads(mlq("metrics", str(job_id), "--rank", "0", "-o", "json").stdout)
    assert [p["step"] for p in answer["series"]["val_loss"]] == [10, 20, 30] and answer["truncated"] == []
    none = mlq("metrics", str(job_id), "--name", "nope")
    assert (none.exit_code, none.stdout) == (0, "")
    assert none.stderr.startswith(f"job {job_id} has reported no metrics named nope")
    refused = mlq("metrics", str(job_id), "--rank", "7")
    assert refused.exit_code == 1 and "rank" in refused.stderr


def test_a_dry_run_of_a_group_shows_its_settings_and_a_sweeps_trials(mlq, tmp_path):  # noqa: F811
    """QA: `mlq submit --dry-run` of a 10,000-element array or a random sweep printed one
    child's placement and nothing of the group: no count, no parallelism, no trial to check."""
    array = tmp_path / "array.yaml"
    array.write_text(
        yaml.safe_dump(
            make_spec(client_job_id=None, resources={"gpu_count": 1, "gpu_type": "H100"}, topology_hint="none")
        )
    )
    dry = mlq("submit", str(array), "--array", "0-98:2,200%4", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.stdout.splitlines()
    assert "group: array of 51 elements, at most 4 at once" in lines
    assert "indices: 0-98:2,200" in lines
    assert "each child (one shown):" in lines
    sweep = make_spec(
        client_job_id=None,
        resources={"gpu_count": 1, "gpu_type": "H100"},
        topology_hint="none",
        sweep={"method": "random", "max_trials": 30, "parameters": {"lr": {"min": 1e-4, "max": 1e-2, "log": True}}},
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    drawn = mlq("submit", str(path), "--dry-run")
    seed = json.loads(mlq("submit", str(path), "--dry-run", "--sweep-seed", "7", "-o", "json").stdout)["group"]["seed"]
    assert seed == 7
    first = [line for line in drawn.stdout.splitlines() if line.startswith("seed ")][0]
    drawn_seed = int(first.split()[1])
    assert first == f"seed {drawn_seed} was drawn for this dry run: --sweep-seed {drawn_seed} submits these trials"
    trials = [line for line in drawn.stdout.splitlines() if line.startswith("  trial ")]
    assert len(trials) == 20 and "  ... 10 more" in drawn.stdout
    again = mlq("submit", str(path), "--dry-run", "--sweep-seed", str(drawn_seed))
    assert [line for line in again.stdout.splitlines() if line.startswith("  trial ")] == trials  # the same draw
    assert not Job.objects.exists()  # a dry run writes nothing
