"""`mlq schedules` and `mlq submit` of a spec with a schedule: block, against the real API (the
Django app in process, as tests/integration/test_cli_groups.py runs it)."""

import json
from zoneinfo import ZoneInfo

import pytest

from mlqueue.cli.app import EXIT_REFUSED
from scheduling.models import Job, Schedule
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db

SPEC = """\
name: nightly-eval
team: research-foundation-models
command: [python, eval.py]
schedule: {cron: "0 3 * * *", timezone: Europe/Berlin, concurrency: forbid}
"""


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "nightly.yaml"
    path.write_text(SPEC)
    return path


def test_submit_of_a_scheduled_spec_says_a_schedule_was_created(clock, mlq, spec_file):  # noqa: F811
    result = mlq("submit", str(spec_file))
    schedule = Schedule.objects.get()
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"created schedule {schedule.pk} (nightly-eval): '0 3 * * *' in Europe/Berlin, "
        "next 2026-04-21T03:00:00+02:00 (a schedule, not a job)\n"
    )
    assert not Job.objects.exists()


def test_submit_wait_of_a_scheduled_spec_is_a_usage_error(mlq, spec_file):  # noqa: F811
    result = mlq("submit", str(spec_file), "--wait")
    assert result.exit_code == 2
    assert "a spec with a schedule: block makes a schedule, not a job" in result.output
    assert not Schedule.objects.exists()


def test_create_list_show_run_suspend_resume_delete(clock, mlq, spec_file):  # noqa: F811
    created = mlq("schedules", "create", "-f", str(spec_file))
    schedule = Schedule.objects.get()
    assert created.output.startswith(f"created schedule {schedule.pk} (nightly-eval)")
    listed = mlq("schedules", "list")
    assert "nightly-eval" in listed.output and "2026-04-21T03:00:00+02:00" in listed.output
    ran = mlq("schedules", "run", str(schedule.pk))
    job = Job.objects.get(schedule=schedule)
    assert ran.output == f"schedule {schedule.pk}: SUBMITTED: submitted job {job.pk}\n"
    clock.shift(1)  # in the same second it is the same fire time, answered with the same run
    refused = mlq("schedules", "run", str(schedule.pk))
    assert refused.exit_code == EXIT_REFUSED
    assert refused.output.startswith(f"schedule {schedule.pk} did not run: its last run, job {job.pk}, is still")
    fired = Schedule.objects.get().last_fire_at.astimezone(ZoneInfo("Europe/Berlin")).isoformat()
    assert f"SKIPPED_ACTIVE {fired}" in mlq("schedules", "list").output  # in the zone NEXT FIRE is in
    shown = mlq("schedules", "show", str(schedule.pk))
    assert "SKIPPED_ACTIVE" in shown.output and "SUBMITTED" in shown.output
    suspended = mlq("schedules", "suspend", str(schedule.pk), "--reason", "migration")
    assert suspended.output == (
        f"schedule {schedule.pk} (nightly-eval): '0 3 * * *' in Europe/Berlin, "
        "suspended (suspended by alice: migration)\n"
    )
    resumed = mlq("schedules", "resume", str(schedule.pk), "-o", "json")
    assert json.loads(resumed.output)["suspended"] is False
    assert mlq("schedules", "delete", str(schedule.pk)).output == f"schedule {schedule.pk} deleted\n"
    assert not Schedule.objects.exists()


def test_create_refuses_a_spec_without_a_schedule_block_before_sending(mlq, tmp_path):  # noqa: F811
    path = tmp_path / "job.yaml"
    path.write_text("team: research-foundation-models\ncommand: [true]\n")
    result = mlq("schedules", "create", "-f", str(path))
    assert result.exit_code == EXIT_REFUSED
    assert result.output.startswith("the spec has no schedule: block")
    assert not Job.objects.exists()


def test_a_bad_cron_is_the_servers_message_with_its_field(mlq, spec_file):  # noqa: F811
    spec_file.write_text(SPEC.replace('"0 3 * * *"', '"0 3 * *"'))
    result = mlq("schedules", "create", "-f", str(spec_file))
    assert result.exit_code == EXIT_REFUSED
    assert "schedule.cron: '0 3 * *' has 4 fields" in result.output
