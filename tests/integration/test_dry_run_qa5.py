"""QA 5: on the demo fleet, 64 H100 in tasks of 4 with 100 CPUs each was refused blaming
`resources.gpu_count` ("the largest zone, z1, holds 8") beside 64 free H100 in z1. The dry run
and the submit's 400 now name the per-task field that binds, with the value that fits."""

import pytest

from scheduling.models import Job
from scheduling.web.dryrun import NEVER_FITS
from tests.conftest import make_spec

CPUS = (
    "100 CPUs per task leaves room for 1 task of 4 H100 per node (192 CPUs): the largest zone, z1, holds 8 such"
    " tasks, the job needs 16; 96 CPUs or fewer per task fits 2 per node"
)
MEMORY = (
    "1100 GB of memory per task leaves room for 1 task of 4 H100 per node (2048 GB): the largest zone, z1, holds 8"
    " such tasks, the job needs 16; 1024 GB of memory or less per task fits 2 per node"
)
SMALL_TASKS = (
    "60 CPUs per task leaves room for 3 tasks of 2 H100 per node (192 CPUs): the largest zone, z1, holds 24 such"
    " tasks, the job needs 32; 48 CPUs or fewer per task fits 4 per node"
)


def spec(**resources) -> dict:
    return make_spec(client_job_id=None, resources={"gpu_count": 64, "gpu_type": "H100", **resources})


@pytest.mark.parametrize(
    ("resources", "field", "message"),
    [
        ({"gpus_per_task": 4, "cpu_per_rank": 100}, "resources.cpu_per_rank", CPUS),
        ({"gpus_per_task": 4, "memory_per_rank_gb": 1100}, "resources.memory_per_rank_gb", MEMORY),
        ({"gpus_per_task": 2, "cpu_per_rank": 60}, "resources.cpu_per_rank", SMALL_TASKS),
    ],
)
def test_the_dry_run_and_the_submit_name_the_field_that_binds(api, resources, field, message):
    body = api("alice").post("/api/v1/jobs/dry-run", spec(**resources), format="json").json()
    assert (body["can_ever_run"], body["placement"]) == (False, None)
    assert body["reason"] == {"code": NEVER_FITS, "message": message, "field": field}
    submitted = api("alice").post("/api/v1/jobs", spec(**resources), format="json")
    assert submitted.status_code == 400
    assert submitted.json()["fields"] == {field: [message]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "resources",
    [{"gpus_per_task": 4, "cpu_per_rank": 96}, {"gpus_per_task": 4, "memory_per_rank_gb": 1024}],
)
def test_the_value_it_names_is_accepted(api, resources):
    body = api("alice").post("/api/v1/jobs/dry-run", spec(**resources), format="json").json()
    assert body["can_ever_run"] is True
