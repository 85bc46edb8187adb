"""Hold, release and requeue from the job page (QA: they were only in the API and mlq): offered
by state to who may change the job, done through the API's services and rules."""

import pytest
from django.test import Client

from scheduling.leader.worker import run_pass
from scheduling.models import Job, Task
from tests.conftest import make_spec
from tests.integration.test_agent_api import leader  # noqa: F401 (the fixture)
from tests.nodes import heartbeat

HTMX = {"HTTP_HX_REQUEST": "true"}
BUTTONS = ("job-hold", "job-release", "job-requeue")


def client_of(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


def offered(username: str, job_id: int) -> set[str]:
    panel = client_of(username).get(f"/jobs/{job_id}/panel/", **HTMX).content.decode()
    return {button for button in BUTTONS if f'id="{button}"' in panel}


def test_hold_and_release_a_pending_job_from_its_page(api):
    job_id = api("alice").post("/api/v1/jobs", make_spec(client_job_id="held"), format="json").json()["id"]
    assert offered("alice", job_id) == {"job-hold"}
    response = client_of("alice").post(f"/jobs/{job_id}/hold/", {"reason": "dataset not ready"}, follow=True)
    assert f"Job {job_id} is held" in response.content.decode()
    job = Job.objects.get(pk=job_id)
    assert (job.held, job.held_reason, job.held_by_name) == (True, "dataset not ready", "alice")
    assert offered("alice", job_id) == {"job-release"}
    client_of("alice").post(f"/jobs/{job_id}/release/")
    assert Job.objects.get(pk=job_id).held is False
    again = client_of("alice").post(f"/jobs/{job_id}/release/", follow=True).content.decode()
    assert f"job {job_id} is not held" in again  # the service's refusal, as a flash


def test_only_who_may_change_the_job_gets_the_buttons_and_the_post(api):
    pauls = api("paul").post("/api/v1/jobs", make_spec(team="production-ranking"), format="json").json()["id"]
    assert offered("bob", pauls) == set() and offered("paul", pauls) == {"job-hold"}
    refused = client_of("bob").post(f"/jobs/{pauls}/hold/", {"reason": ""})
    assert refused.status_code == 403
    assert Job.objects.get(pk=pauls).held is False
    bad = client_of("paul").post(f"/jobs/{pauls}/hold/", {"reason": "x\u200b"})
    assert bad.status_code == 400 and "Nothing was held." in bad.content.decode()


@pytest.mark.django_db
def test_requeue_a_running_job_from_its_page(api, leader):  # noqa: F811
    heartbeat()
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    assert offered("alice", job_id) == {"job-requeue"}
    response = client_of("alice").post(f"/jobs/{job_id}/requeue/", {"reason": "bad node"}, follow=True)
    assert "is being stopped gracefully" in response.content.decode()
    assert set(Task.objects.filter(job_id=job_id).values_list("stop_reason", flat=True)) == {"REQUEUED"}
    assert offered("alice", job_id) == set()  # being stopped: not twice
