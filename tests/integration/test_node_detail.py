"""One node through the API and `mlq node` (QA: an on-call admin at a terminal had the nodes'
list and their actions, and no node's health, tasks or history without the console), and
`mlq maintenance show|change` (the API could read a window's history and move it; mlq could not)."""

import json
from datetime import timedelta

from django.utils import timezone

from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.cli.maintenance import NOTHING_TO_CHANGE
from scheduling.models import MaintenanceWindow
from tests.integration.test_agent_api import agent, beat, leader  # noqa: F401 (fixtures)
from tests.integration.test_cli_maintenance import mlq_as  # noqa: F401 (fixture)
from tests.integration.test_node_health import NAME, beat_health, health_settings, node_with_job, sample  # noqa: F401


def window_on(api, node: str, **times) -> int:
    body = {"names": [node], "reason": "PDU swap", **times}
    response = api("ops").post("/api/v1/maintenance", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def test_a_node_in_full_for_an_admin(node_with_job, api):  # noqa: F811
    client, job_id, running = node_with_job
    beat_health(
        client,
        {
            **sample(gpu2={"utilization": 88}),
            "check": {"status": "ok", "exit_code": 0, "at": timezone.now().timestamp()},
        },
        running,
    )
    later = (timezone.now() + timedelta(hours=3)).isoformat()
    window = window_on(api, NAME, starts_at=later, duration_hours=2)
    assert api("ops").post(f"/api/v1/nodes/{NAME}/cordon", {"reason": "flaky NVLink"}, format="json").status_code == 200

    found = api("ops").get(f"/api/v1/nodes/{NAME}").json()
    assert (found["name"], found["admin_state"], found["admin_reason"], found["tasks"]) == (
        NAME,
        "CORDONED",
        "flaky NVLink",
        1,
    )
    [task] = found["placed"]
    assert (task["job_id"], task["rank"], task["attempt"], task["state"], task["gpu_indices"], task["team"]) == (
        job_id,
        0,
        1,
        "RUNNING",
        [0, 1, 2, 3],
        "research-foundation-models",
    )
    assert found["telemetry"]["provider"] == "fake" and found["telemetry"]["check"]["status"] == "ok"
    assert [gpu["utilization"] for gpu in found["telemetry"]["gpus"]][:3] == [0, 0, 88]
    assert [(w["id"], w["state"], w["reason"]) for w in found["maintenance"]] == [(window, "SCHEDULED", "PDU swap")]

    events = api("ops").get(f"/api/v1/nodes/{NAME}/events").json()["results"]
    assert (events[0]["actor"], events[0]["reason"]) == ("ops", "CORDONED")  # newest first
    assert "flaky NVLink" in events[0]["message"]


def test_only_site_admins_and_what_is_refused(node_with_job, api):  # noqa: F811
    for path in (f"/api/v1/nodes/{NAME}", f"/api/v1/nodes/{NAME}/events"):
        refused = api("alice").get(path)
        assert refused.status_code == 403
        assert refused.json()["detail"] == "only site admins may see a node's tasks, health and history."
        assert api("ops").get(path.replace(NAME, "z9-nowhere")).status_code == 404
    typo = api("ops").get(f"/api/v1/nodes/{NAME}?histroy=5")
    assert typo.status_code == 400 and "histroy" in typo.json()["fields"]
    assert api("ops").get(f"/api/v1/nodes/{NAME}/events?limit=abc").status_code == 400
    quiet = api("ops").get("/api/v1/nodes/z2-r1-h100-01").json()
    assert quiet["telemetry"] is None and quiet["placed"] == [] and quiet["maintenance"] == []


def test_mlq_node(node_with_job, mlq_as):  # noqa: F811
    client, job_id, running = node_with_job
    beat_health(client, sample(gpu1={"xids": [{"code": 13, "at": timezone.now().timestamp()}]}), running)
    assert mlq_as("ops", "drain", NAME, "--reason", "DIMM").exit_code == 0
    shown = mlq_as("ops", "node", NAME)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[1].split()[:4] == [NAME, "DRAINING", "DRAINING", "1"]
    assert "why: DIMM" in lines
    assert any(line.startswith("telemetry: FAKE, ") for line in lines)
    gpu1 = lines[lines.index(next(line for line in lines if line.startswith("GPU"))) + 2]
    assert "XID 13" in gpu1
    assert "tasks: 1" in lines and any(line.split()[:1] == [str(job_id)] for line in lines)
    newest = lines[lines.index("latest 3 event(s), newest first:") + 2].split()
    assert newest[1:] == ["ops", "DRAINING", "draining:", "DIMM"]

    as_json = json.loads(mlq_as("ops", "node", NAME, "--history", "5", "-o", "json").output)
    assert as_json["name"] == NAME and as_json["events"][0]["message"] == "draining: DIMM"
    refused = mlq_as("alice", "node", NAME)
    assert refused.exit_code == EXIT_REFUSED and "only site admins may see a node's" in refused.output
    unknown = mlq_as("ops", "node", "z9-nowhere")
    assert unknown.exit_code == EXIT_REFUSED


def test_mlq_maintenance_show_and_change(clock, demo, api, mlq_as):  # noqa: F811
    window = window_on(api, "z1-r1-h100-01", starts_at="2026-04-20T12:00:00Z", duration_hours=4)
    moved = mlq_as("ops", "maintenance", "change", str(window), "--at", "+5h", "--reason", "PDU swap, both feeds")
    assert moved.exit_code == 0, moved.output
    assert (
        moved.output
        == f"changed maintenance #{window} (node z1-r1-h100-01): SCHEDULED, 2026-04-20T14:00:00Z for 4 h, 1 node(s)\n"
    )
    longer = mlq_as("ops", "maintenance", "change", str(window), "--hours", "6")
    assert "2026-04-20T14:00:00Z for 6 h" in longer.output
    stored = MaintenanceWindow.objects.get(pk=window)
    assert (stored.reason, stored.ends_at - stored.starts_at) == ("PDU swap, both feeds", timedelta(hours=6))

    shown = mlq_as("ops", "maintenance", "show", str(window))
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[1].split()[:3] == [str(window), "node", "z1-r1-h100-01"]
    assert "nodes: z1-r1-h100-01" in lines and "history, newest first:" in lines
    history = lines[lines.index("history, newest first:") + 2 :]
    assert [line.split()[2] for line in history] == ["CHANGED", "CHANGED", "SCHEDULED"]
    as_json = json.loads(mlq_as("ops", "maintenance", "show", str(window), "-o", "json").output)
    assert as_json["id"] == window and len(as_json["events"]) == 3

    nothing = mlq_as("ops", "maintenance", "change", str(window))
    assert nothing.exit_code == 2 and NOTHING_TO_CHANGE in nothing.output
    both = mlq_as("ops", "maintenance", "change", str(window), "--hours", "1", "--until", "+9h")
    assert both.exit_code == 2 and "give --hours or --until, not both" in both.output
    short = mlq_as("ops", "maintenance", "change", str(window), "--hours", "0.0001")
    assert short.exit_code == EXIT_REFUSED and "--hours: " in short.output
    assert mlq_as("alice", "maintenance", "show", str(window)).exit_code == EXIT_REFUSED
