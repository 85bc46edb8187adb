"""Which nodes run images: each agent says so when it registers (`runs_images`), the nodes API
shows it, a job that names an image is placed only there, and a submit no node could ever run
is refused on `image` (the API, a batch, a dry run and the submit page alike)."""

import pytest
from django.utils.html import escape

from scheduling.core.feasibility import NO_NODE_RUNS_IMAGES
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node
from scheduling.web.dryrun import NEVER_FITS
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import INVENTORY, JOIN, agent, beat, leader  # noqa: F401 (fixture)
from tests.integration.test_submit_page import URL, form_of, inline_errors, logged_in, post

ABLE, UNABLE = "z1-r1-h100-02", "z1-r1-h100-01"
SPEC = make_spec(resources={"gpu_count": 8})
NONE_RUNS_IMAGES = NO_NODE_RUNS_IMAGES.format(kind="H100", labelled="", count=16)


@pytest.fixture(autouse=True)
def agent_settings(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def register(client, name: str, **inventory):
    return client.post("/api/v1/agents/register", {"name": name, **INVENTORY, **inventory}, format="json")


def test_register_stores_whether_the_agent_runs_images_and_re_registering_updates_it(api):
    client = agent("n1", {**INVENTORY, "runs_images": False})
    assert Node.objects.get(name="n1").runs_images is False
    assert "runs images no (no container runtime)" in AuditEvent.objects.get(reason="REGISTERED").message
    assert register(client, "n1", runs_images=True).status_code == 201
    assert Node.objects.get(name="n1").runs_images is True
    [shown] = [n for n in api("ops").get("/api/v1/nodes").json()["results"] if n["name"] == "n1"]
    assert shown["runs_images"] is True
    page = logged_in("ops").get("/nodes/n1/").content.decode()
    assert '<dd id="runs-images">runs jobs\' images (container runtime)</dd>' in page
    assert register(client, "n1").status_code == 201  # an older agent says nothing: not known
    assert Node.objects.get(name="n1").runs_images is None
    refused = register(client, "n1", runs_images="yes")
    assert refused.status_code == 400 and list(refused.json()["fields"]) == ["runs_images"]


def test_no_node_of_the_class_runs_images_refuses_the_submit_everywhere_it_is_made(api):
    Node.objects.filter(gpu_type="H100").update(runs_images=False)  # as their agents said when they registered
    alice = api("alice")
    refused = alice.post("/api/v1/jobs", SPEC, format="json")
    assert (refused.status_code, refused.json()["fields"]) == (400, {"image": [NONE_RUNS_IMAGES]})
    batch = alice.post("/api/v1/jobs/batch", {"jobs": [make_spec(image=""), SPEC]}, format="json")
    assert (batch.status_code, batch.json()["fields"]) == (400, {"jobs[1].image": [NONE_RUNS_IMAGES]})
    dry = alice.post("/api/v1/jobs/dry-run", SPEC, format="json")
    assert (dry.status_code, dry.json()["can_ever_run"]) == (200, False)
    assert dry.json()["reason"] == {"code": NEVER_FITS, "message": NONE_RUNS_IMAGES, "field": "image"}
    page = logged_in("alice")
    form = {**form_of(page.get(URL)), "command": "python\n-m\ntrain", "resources.gpu_count": "8"}
    response = post(page, form, "submit", image="reg/x:1")
    assert response.status_code == 200 and inline_errors(response, "image") == escape(NONE_RUNS_IMAGES)
    assert not Job.objects.exists()
    assert alice.post("/api/v1/jobs", make_spec(image="", resources={"gpu_count": 8}), format="json").status_code == 201


def test_an_image_job_goes_to_the_node_whose_agent_runs_images(api, leader):  # noqa: F811
    Node.objects.filter(gpu_type="H100").update(runs_images=False)
    unable = agent(UNABLE, {**INVENTORY, "runs_images": False})
    able = agent(ABLE, {**INVENTORY, "runs_images": True})
    beat(unable, UNABLE), beat(able, ABLE)
    image_job = api("alice").post("/api/v1/jobs", SPEC, format="json").json()["id"]
    plain_job = (
        api("alice")
        .post("/api/v1/jobs", make_spec(image="", client_job_id="plain", resources={"gpu_count": 8}), format="json")
        .json()["id"]
    )
    run_pass(epoch=leader)
    assert [a["job_id"] for a in beat(able, ABLE)["assignments"]] == [image_job]
    assert [a["job_id"] for a in beat(unable, UNABLE)["assignments"]] == [plain_job]
