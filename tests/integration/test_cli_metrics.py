"""`mlq metrics JOB` against the real API (the Django app in process), as alice: each series'
last value, span and extremes; a rank's alone; the API's answer for scripts; a job with none."""

import json

import pytest

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
