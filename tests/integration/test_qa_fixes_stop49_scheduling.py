"""QA stop 49, scheduling as users see it: a dry run's "what would let it start now" ignored
maintenance windows (each suggested shape, tried, waited for the window again), where `mlq why`
of the same job kept to them. The reservation a window drains by then: tests/unit/core/
test_maintenance_windows.py."""

from scheduling.leader.worker import run_pass
from tests.conftest import make_spec
from tests.integration.test_maintenance import schedule_window, submit


def test_a_dry_run_suggests_off_the_windows_as_why_does(clock, api, leader):
    schedule_window(api)  # z1-r1 at 10:00 for 4 h
    later = schedule_window(api, rack="z2-r1", starts_at="2026-04-20T12:00:00Z", duration_hours=1.5)
    waiting = submit(api, hours=6)
    run_pass(epoch=leader)
    why = api("alice").get(f"/api/v1/jobs/{waiting.pk}/why").json()["suggestions"]
    spec = make_spec(client_job_id=None, resources={"gpu_count": 8, "gpus_per_task": 8}, max_runtime_hours=6)
    dry = api("alice").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert dry["reason"]["code"] == "MAINTENANCE"
    assert dry["suggestions"][0] == f"fits now with a time limit of at most 3 h (ending before maintenance #{later.pk})"
    assert dry["suggestions"] == why
