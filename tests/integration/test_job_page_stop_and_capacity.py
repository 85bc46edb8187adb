"""What the job page says of a job on its nodes (QA): a stop in progress, as `mlq status` says it
(the page showed only "PREEMPTED · SIGTERM" per task: no RECLAIM, no kill deadline), and whether
it runs on its team's guarantee or on borrowed capacity, as the scheduler counts it now (the
page kept the placement's "borrowing idle capacity" on a preempted, PENDING job, and on a job
made P0, which fills the guarantee first and is never reclaimed)."""

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from scheduling import lifecycle
from scheduling.core.decisions import Preemption, PreemptionReason
from scheduling.leader.apply import _preempt
from scheduling.models import Job, Node
from scheduling.models import TaskState as S
from scheduling.stopping import escalate_overdue
from tests.integration.test_cli_groups import mlq  # noqa: F401  (the fixture)
from tests.integration.test_stopping_shown import RECLAIM, submit

TEAM = "research-foundation-models"  # alice's: 32 H100 guaranteed
ON_GUARANTEE = (
    f"It runs within the guarantee of team {TEAM} (32 H100): a reclaim does not take it (a job of a higher priority"
    " class still may)."
)
ON_P0 = f"It runs within the guarantee of team {TEAM} (32 H100): a P0 is never reclaimed or preempted."
ON_BORROWED = (
    f"It runs on borrowed capacity, above the guarantee of team {TEAM} (32 H100; its jobs use 40): it may be reclaimed"
    " when another team needs its guarantee back."
)


def panel(job: Job) -> str:
    client = Client()
    assert client.login(username="alice", password="demo")
    response = client.get(f"/jobs/{job.pk}/panel/")
    assert response.status_code == 200
    return response.content.decode()


def start_on(job: Job, node: Node) -> None:
    lifecycle.transition_gang(
        job.pk, from_state=S.PENDING, to_state=S.ASSIGNED, per_rank={0: {"node": node, "gpu_indices": list(range(8))}}
    )
    lifecycle.transition_gang(job.pk, from_state=S.ASSIGNED, to_state=S.RUNNING, reason="STARTED", message="started")


def test_the_job_page_shows_a_stop_in_progress_and_when_it_is_forced(clock, api, leader):
    job = submit(api)
    urgent = submit(api, client_job_id="urgent")
    start_on(job, Node.objects.filter(gpu_type="H100").order_by("name").first())
    assert 'id="job-stopping"' not in panel(job)

    clock.shift(timedelta(minutes=30))  # 09:30
    message = RECLAIM.format(urgent=urgent.pk)
    assert _preempt(Preemption(job.pk, urgent.pk, PreemptionReason.RECLAIM, message), epoch=leader, now=timezone.now())
    assert (
        f'<dt>Stopping</dt><dd id="job-stopping"><span class="badge">RECLAIM</span> {message}\n'
        '          <span class="muted">(SIGTERM sent at '
        '<time datetime="2026-04-20T09:30:00+00:00" data-local="seconds">09:30:00 UTC</time>, SIGKILL at '
        '<time datetime="2026-04-20T09:32:00+00:00" data-local="seconds">09:32:00 UTC</time> unless it exits first)'
        "</span></dd>"
    ) in panel(job)

    clock.shift(timedelta(minutes=2))  # it ignored SIGTERM: the panel's next refresh says so
    assert escalate_overdue() == 1
    assert (
        '(SIGKILL sent at <time datetime="2026-04-20T09:32:00+00:00" data-local="seconds">09:32:00 UTC</time>)'
    ) in panel(job)


def test_the_job_page_and_mlq_why_say_whether_a_job_runs_on_borrowed_capacity(
    clock,
    api,
    leader,
    mlq,  # noqa: F811
):
    """Five 8-H100 P1 jobs against a guarantee of 32: the newest borrows. Made P0, it fills the
    guarantee first, and the newest P1 borrows instead."""
    nodes = list(Node.objects.filter(gpu_type="H100").order_by("name")[:5])
    jobs = [submit(api, client_job_id=f"fill-{index}") for index in range(5)]
    for job, node in zip(jobs, nodes, strict=True):
        clock.shift(timedelta(minutes=1))
        start_on(job, node)
    first, fourth, newest = jobs[0], jobs[3], jobs[4]
    Job.objects.filter(pk=newest.pk).update(borrowed=False)  # the placement's flag is not what is shown
    assert ON_GUARANTEE in panel(first) and "may be reclaimed</span>" not in panel(first)
    assert '<span class="badge">may be reclaimed</span> ' + ON_BORROWED in panel(newest)
    answer = api("alice").get(f"/api/v1/jobs/{newest.pk}").json()["capacity"]
    assert answer == {"runs_on": "BORROWED", "reclaimable": True, "message": ON_BORROWED[3:-1]}
    why = mlq("why", str(newest.pk))
    assert why.output.splitlines()[:2] == [f"job {newest.pk}: RUNNING", f"capacity: {ON_BORROWED[3:-1]}"]
    assert f"capacity: {ON_GUARANTEE[3:-1]}" in mlq("status", str(first.pk)).output

    Job.objects.filter(pk=newest.pk).update(priority="P0")
    assert ON_P0 in panel(Job.objects.get(pk=newest.pk))
    assert api("alice").get(f"/api/v1/jobs/{fourth.pk}/why").json()["capacity"]["runs_on"] == "BORROWED"


def test_a_pending_job_is_not_labelled_borrowing_by_its_last_placement(api, leader):
    job = submit(api)
    Job.objects.filter(pk=job.pk).update(borrowed=True)  # placed above the guarantee, then preempted
    html = panel(job)
    assert "borrowing idle capacity" not in html and 'id="job-capacity"' not in html
    assert api("alice").get(f"/api/v1/jobs/{job.pk}").json()["capacity"] is None
