"""Real agents say whether they run images when they join, and a job that names an image goes
to one that does. The "runtime" is a --container-hook (`env MLQ_IMAGE={image}` before the
job's command), so no podman is needed; tests/e2e/test_containers.py runs podman itself."""

import pytest

from scheduling.models import Job, Node, Task
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# The node without a runtime sorts first: a tie between the two would go to it.
PLAIN = {"name": "z1-r1-cpu-a", "zone": "z1", "rack": "z1-r1", "gpu_type": "", "gpu_count": 0}
HOOKED = {**PLAIN, "name": "z1-r1-cpu-b"}


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path).start(agents=[])
    running.add_agent(PLAIN)
    running.add_agent(HOOKED, args=("--container-hook", "env MLQ_IMAGE={image}"))
    names = [PLAIN["name"], HOOKED["name"]]
    wait_for(lambda: Node.objects.filter(name__in=names, state="READY").count() == 2, timeout=20, what="the nodes")
    yield running
    running.stop()


def test_a_job_naming_an_image_runs_on_the_node_whose_agent_runs_images(cluster, api):
    assert dict(Node.objects.filter(name__in=[PLAIN["name"], HOOKED["name"]]).values_list("name", "runs_images")) == {
        PLAIN["name"]: False,
        HOOKED["name"]: True,
    }
    body = {
        "team": "research-foundation-models",
        "name": "in-its-image",
        "image": "registry.example.com/x:1",
        "command": ["sh", "-c", 'echo "image=$MLQ_IMAGE"'],
        "resources": {"tasks": 1, "cpu_per_rank": 1, "memory_per_rank_gb": 1},
    }
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    try:
        wait_for(lambda: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=60, what="the job")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    assert Task.objects.get(job_id=job_id).node.name == HOOKED["name"]
    log = api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()["text"]
    assert log == "image=registry.example.com/x:1\n"
