"""QA's mlq defects against the real API (the Django app in process): `mlq jobs` sends every
--state and the API lists each state's jobs, a cancel that skipped a job exits 1, and a dry run
of a spec that can never run exits 1 with its answer printed."""

import json

import pytest
from django.test import Client

from mlqueue.cli.app import EXIT_FAILED, EXIT_REFUSED
from scheduling import reports
from scheduling.leader.worker import run_pass
from scheduling.models import Job, JobState, SchedulerLease
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_cli_groups import mlq  # noqa: F401 (the fixture: mlq as alice)
from tests.integration.test_cli_jobs import spec_file  # noqa: F401
from tests.nodes import heartbeat

pytestmark = pytest.mark.django_db


def test_jobs_lists_the_jobs_of_every_state_given(mlq, spec_file):  # noqa: F811
    made = [json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"] for _ in range(3)]
    Job.objects.filter(pk=made[0]).update(state=JobState.RUNNING)
    Job.objects.filter(pk=made[1]).update(state=JobState.SUCCEEDED)
    listed = mlq("jobs", "--mine", "--state", "running", "--state", "succeeded", "-o", "json")
    assert listed.exit_code == 0, listed.output
    assert sorted(row["id"] for row in json.loads(listed.stdout)) == made[:2]


def test_a_cancel_of_jobs_none_of_which_was_cancelled_exits_1(mlq, spec_file):  # noqa: F811
    unknown = mlq("cancel", "998", "999")
    assert unknown.exit_code == EXIT_REFUSED, unknown.output
    assert unknown.stdout.strip() == "cancelled: none"
    assert [line.split(",")[0] for line in unknown.stderr.splitlines()] == ["skipped: id=998", "skipped: id=999"]
    ours = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    assert mlq("cancel", str(ours), "999").exit_code == EXIT_REFUSED
    again = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    assert mlq("cancel", str(again), str(again + 1000), "--reason", "r").exit_code == EXIT_REFUSED
    fresh = [json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"] for _ in range(2)]
    done = mlq("cancel", *map(str, fresh))
    assert (done.exit_code, done.stdout.strip(), done.stderr) == (0, f"cancelled: {fresh[0]} {fresh[1]}", "")


def test_a_cancel_by_an_unknown_state_is_a_usage_error(mlq):  # noqa: F811
    refused = mlq("cancel", "--mine", "--state", "bogus")
    assert refused.exit_code == 2 and "'bogus' is not one of" in refused.stderr


def test_a_dry_run_of_a_spec_that_can_never_run_exits_1(mlq, spec_file):  # noqa: F811
    jobs = Job.objects.count()
    never = mlq("submit", spec_file, "--dry-run", "--set", "resources.gpu_count=4096")
    assert never.exit_code == EXIT_FAILED, never.output
    assert never.stdout.splitlines()[1].split() == ["True", "False"]
    assert mlq("submit", spec_file, "--dry-run").exit_code == 0
    assert Job.objects.count() == jobs  # nothing submitted


def test_a_cancel_of_several_names_a_placed_job_as_stopping_not_cancelled(mlq, spec_file):  # noqa: F811
    """QA: `mlq cancel A B` listed a running job under `cancelled:` while it ran on until its
    tasks stopped (the one-job form says `cancel requested; RUNNING until its tasks stop`)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    placed = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    run_pass(epoch=1)
    assert Job.objects.get(pk=placed).state == JobState.ASSIGNED
    waiting = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]  # after the pass: PENDING
    done = mlq("cancel", str(placed), str(waiting))
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"cancelled: {waiting}",
        f"stopping: {placed} (cancel requested: CANCELLED once their tasks stop)",
    ]
    answer = json.loads(mlq("cancel", str(placed), "-o", "json").stdout)
    assert answer["state"] == JobState.ASSIGNED  # still stopping: a second cancel repeats the request


def test_why_and_status_of_a_job_that_did_not_run_to_its_end_say_how_it_ended(mlq, spec_file):  # noqa: F811
    """QA: `mlq why` of a job a dependency cancelled printed `job 119: CANCELLED` alone, and
    `mlq status` no reason: the reason was in its events only."""
    job_id = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    mlq("cancel", str(job_id), "--reason", "wrong data")
    event = AuditEvent.objects.get(job_id=job_id, kind="TRANSITION", to_state="CANCELLED")
    at = Job.objects.get(pk=job_id).finished_at.strftime("%Y-%m-%dT%H:%M:%S")
    why = mlq("why", str(job_id))
    assert why.stdout.splitlines()[0] == f"job {job_id}: CANCELLED"
    assert why.stdout.splitlines()[1].startswith(f"ended CANCELLED at {at}")
    assert why.stdout.splitlines()[1].endswith(f"by {event.actor_name}: wrong data")
    assert why.stdout.splitlines()[1] in mlq("status", str(job_id)).stdout
    ended = json.loads(mlq("why", str(job_id), "-o", "json").stdout)["ended"]
    assert (ended["state"], ended["reason"], ended["message"]) == ("CANCELLED", "CANCELLED", "wrong data")
    running = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    assert json.loads(mlq("why", str(running), "-o", "json").stdout)["ended"] is None
    assert "ended" not in mlq("status", str(running)).stdout


def test_a_running_jobs_cancel_ends_it_by_whom_and_why_not_by_the_ranks_signal(mlq, spec_file):  # noqa: F811
    """QA: a running job a user cancelled said `ended CANCELLED ... by agent:z1-r4-cpu-03:
    rank 1 ended (signal SIGTERM)`; a pending one `by alice: cancelled by alice`."""
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    job_id = json.loads(mlq("submit", spec_file, "-o", "json").stdout)["id"]
    run_pass(epoch=1)
    job = Job.objects.get(pk=job_id)
    for task in job.tasks.all():
        reports.do_report_started(job_id=job_id, rank=task.rank, attempt=task.attempt)
    mlq("cancel", str(job_id), "--reason", "qa cancel")
    run_pass(epoch=1)  # the leader asks its ranks to stop (CANCELLED)
    for task in job.tasks.all():
        reports.do_report_exited(job_id=job_id, rank=task.rank, attempt=task.attempt, exit_code=None, signal="SIGTERM")
    assert Job.objects.get(pk=job_id).state == JobState.CANCELLED
    ended = json.loads(mlq("why", str(job_id), "-o", "json").stdout)["ended"]
    assert (ended["by"], ended["reason"], ended["message"]) == ("alice", "CANCELLED", "qa cancel")


def test_a_rank_stopped_because_its_peer_failed_says_so(mlq, tmp_path):  # noqa: F811
    """QA: a gang's rank the scheduler stopped because another rank failed read `FAILED, SIGTERM
    (INFRA)`, as if its node had failed it: the API gives each rank's stop reason, `mlq status`
    shows it, and the job page no longer labels that rank INFRA."""
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    path = tmp_path / "gang.yaml"
    spec = make_spec(client_job_id=None, resources={"gpu_count": 16})
    spec["restart_policy"]["max_retries"] = 0
    path.write_text(json.dumps(spec))
    job_id = json.loads(mlq("submit", str(path), "-o", "json").stdout)["id"]
    run_pass(epoch=1)
    job = Job.objects.get(pk=job_id)
    tasks = list(job.tasks.order_by("rank"))
    assert len(tasks) == 2
    for task in tasks:
        reports.do_report_started(job_id=job_id, rank=task.rank, attempt=task.attempt)
    reports.do_report_exited(job_id=job_id, rank=0, attempt=tasks[0].attempt, exit_code=3)
    reports.do_report_exited(job_id=job_id, rank=1, attempt=tasks[1].attempt, exit_code=None, signal="SIGTERM")
    shown = json.loads(mlq("status", str(job_id), "-o", "json").stdout)
    assert [(t["rank"], t["exit_code"], t["stop_reason"]) for t in shown["tasks"]] == [
        (0, 3, ""),
        (1, None, "PEER_FAILED"),
    ]
    table = mlq("status", str(job_id)).stdout
    assert "STOPPED" in table and "PEER_FAILED" in table
    client = Client()
    client.force_login(job.owner)
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert "SIGTERM (INFRA)" not in page and "PEER_FAILED" in page
    # The verdict on a gang whose every rank had FAILED: the job was FAILED already; its last
    # timeline entry read "FAILED -> FAILED".
    run_pass(epoch=1)
    verdict = AuditEvent.objects.filter(job_id=job_id).latest("id")
    assert (verdict.from_state, verdict.to_state, verdict.reason) == ("", "FAILED", "APP")
    ended = json.loads(mlq("why", str(job_id), "-o", "json").stdout)["ended"]
    assert (ended["by"], ended["reason"]) == ("scheduler", "APP")
