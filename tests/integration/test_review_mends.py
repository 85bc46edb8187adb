"""What a review of this change found: a YAML set as a mapping's key was a 500; `?format=json`
on the schema answered the OpenAPI media type to a JSON client; a drain again without wait
stopped tasks with nothing in the node's history."""

from scheduling.leader.worker import run_pass
from scheduling.models import Task
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import leader  # noqa: F401 (fixture)
from tests.nodes import cordon, heartbeat


def test_a_yaml_set_as_a_key_is_a_400(api):
    text = "name: s\nteam: research-foundation-models\ncommand: [echo]\nenv: {? !!set {a} : x}\n"
    response = api("alice").generic("POST", "/api/v1/jobs", text.encode(), content_type="application/yaml")
    assert response.status_code == 400, response.content


def test_the_schema_as_json_to_a_json_client(api):
    response = api("alice").get("/api/schema/?format=json", HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    bad = api("alice").get("/api/schema/?format=xml", HTTP_ACCEPT="application/json")
    assert bad.status_code == 400 and b"yaml or json;" in bad.content


def test_a_drain_again_without_wait_records_the_stops_it_makes(api, leader):  # noqa: F811
    from scheduling.models import Node

    name = "z1-r1-h100-01"
    heartbeat()
    cordon(Node.objects.exclude(name=name))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    assert Task.objects.get(job_id=job_id).node.name == name
    waiting = api("ops").post(f"/api/v1/nodes/{name}/drain", {"reason": "DIMM", "wait": True}, format="json")
    assert waiting.json()["changed"] is True
    now = api("ops").post(f"/api/v1/nodes/{name}/drain", {"reason": "DIMM"}, format="json")
    assert now.json()["changed"] is True  # its task is asked to stop now
    messages = list(AuditEvent.objects.filter(node__name=name, reason="DRAINING").values_list("message", flat=True))
    assert messages == [
        "draining (running tasks may finish): DIMM",
        "draining: DIMM: stopping the 1 job(s) a drain with wait left running",
    ]


def test_a_bulk_drain_after_a_drain_with_wait_counts_the_node_it_stops_tasks_on(api, leader):  # noqa: F811
    """(A review of stop 47: the bulk action listed such a node `unchanged` while it stopped its
    tasks.) A node draining for that reason with nothing running stays `unchanged`."""
    from scheduling.models import Node

    busy, idle = "z1-r1-h100-01", "z1-r1-h100-02"
    heartbeat()
    cordon(Node.objects.exclude(name=busy))
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    for name in (busy, idle):
        api("ops").post(f"/api/v1/nodes/{name}/drain", {"reason": "DIMM", "wait": True}, format="json")
    body = {"names": [busy, idle], "action": "drain", "reason": "DIMM"}
    answer = api("ops").post("/api/v1/nodes/bulk", body, format="json").json()
    assert ([node["name"] for node in answer["nodes"]], answer["unchanged"]) == ([busy], [idle])
    assert Task.objects.get(job_id=job_id).stop_requested_at is not None
