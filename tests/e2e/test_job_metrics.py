"""Metrics on a real agent: a job calls `mlqueue.report` (the copy the agent puts on its
PYTHONPATH, with `-S` so no other mlqueue can be found), the agent tails the file it named in
MLQ_METRICS_FILE and ships the reports, and the API returns the job's series."""

import sys

import pytest

from scheduling.models import Job, Node
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
TRAINER = (
    "import os, mlqueue\n"
    "for step in (1, 2, 3):\n"
    "    mlqueue.report(step=step, val_loss=1.0 / step)\n"
    "mlqueue.report({'eval/acc': 0.75}, step=3)\n"
    "with open(os.environ['MLQ_METRICS_FILE'], 'a') as f:\n"
    "    f.write('not a report\\n')\n"
    '    f.write(\'{"step": 4, "metrics": {"val_loss": 0.2}}\\n\')  # by hand, without time\n'
    "print('reported to', os.path.basename(os.environ['MLQ_METRICS_FILE']), mlqueue.__file__, flush=True)\n"
)


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def test_a_job_reports_metrics_and_the_api_returns_its_series(cluster, api):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(name=NODE["name"], state="READY").exists(), timeout=20, what="the node")
    body = {
        "team": "research-foundation-models",
        "name": "e2e-metrics",
        "command": [sys.executable, "-S", "-c", TRAINER],
        "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
    }
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    series = lambda: api("alice").get(f"/api/v1/jobs/{job_id}/metrics").json()["series"]  # noqa: E731
    try:
        wait_for(lambda: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=20, what="the job to succeed")
        wait_for(lambda: len(series().get("val_loss", [])) == 4, timeout=10, what="the reports")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    found = series()
    assert [(p["step"], p["value"], p["rank"], p["attempt"]) for p in found["val_loss"]] == [
        (1, 1.0, 0, 1),
        (2, 0.5, 0, 1),
        (3, 1.0 / 3, 0, 1),
        (4, 0.2, 0, 1),
    ]
    assert [(p["step"], p["value"]) for p in found["eval/acc"]] == [(3, 0.75)]
    assert all(p["time"] for p in found["val_loss"])
    log = api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()["text"]
    assert "reported to .mlq-metrics.jsonl" in log and "/python/mlqueue/__init__.py" in log
