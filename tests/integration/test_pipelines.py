"""Pipelines and dependency conditions (issue 17): steps are a group's children joined by edges that
carry their `when`; the leader releases a step when its conditions hold, skips one whose conditions
can no longer be met (and skips cascade), and cancels a plain job whose dependency went the wrong way."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import reports
from scheduling.groups import child_env
from scheduling.leader.worker import run_pass
from scheduling.models import Job, JobDependency
from scheduling.store_view import build_view
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.integration.test_scheduler_pass import submit as submit_spec

ONE_GPU = {"gpu_count": 1, "gpu_type": "H100"}
NIGHTLY = {
    "steps": [
        {"name": "prepare", "command": ["python", "prep.py", "--out", "{run_dir}/data"], "resources": {"tasks": 4}},
        {
            "name": "train",
            "after": ["prepare"],
            "command": ["python", "train.py", "--data", "{run_dir}/data", "--prep", "{steps.prepare.job_id}"],
            "resources": {"gpu_count": 16, "gpu_type": "H100"},
        },
        {"name": "evaluate", "after": ["train"], "command": ["python", "eval.py"], "resources": ONE_GPU},
        {"name": "notify-failure", "after": ["train"], "when": "failure", "command": ["python", "page_oncall.py"]},
    ]
}


def submit_pipeline(api, pipeline=NIGHTLY, **overrides) -> Job:
    spec = dict(
        client_job_id=None,
        name="nightly-ranking",
        team="production-ranking",
        checkpoint=None,
        resources={"gpu_count": 0, "gpu_type": None, "cpu_per_rank": 1, "memory_per_rank_gb": 4, "scratch_disk_gb": 0},
        topology_hint="none",
        restart_policy={"max_retries": 0},
        pipeline=pipeline,
    )
    return submit_spec(api, "bob", **{**spec, **overrides})


def steps(parent: Job) -> dict[str, Job]:
    return {job.step_name: job for job in Job.objects.filter(parent=parent).order_by("group_index")}


def step_states(parent: Job) -> dict[str, str]:
    return {name: job.state for name, job in steps(parent).items()}


def finish(job: Job, exit_code: int) -> None:
    run_all_ranks(Job.objects.get(pk=job.pk), exit_code=exit_code)


def test_a_pipeline_makes_its_steps_with_edges_that_carry_when(api, leader, settings):
    settings.MLQ_PIPELINE_RUN_ROOT = "/shared/runs"
    parent = submit_pipeline(api)
    kids = steps(parent)
    assert list(kids) == ["prepare", "train", "evaluate", "notify-failure"]
    assert parent.group_kind == "pipeline" and parent.tasks.count() == 0
    run_dir = f"/shared/runs/nightly-ranking/{parent.pk}"
    assert parent.group["run_dir"] == run_dir
    assert kids["prepare"].command == ["python", "prep.py", "--out", f"{run_dir}/data"]
    assert kids["train"].command[-1] == str(kids["prepare"].pk)
    assert (kids["prepare"].task_count, kids["train"].task_count, kids["train"].gpu_count) == (4, 2, 16)
    # Fields default from the top level: the team, the priority, the restart policy.
    assert {k.team.name for k in kids.values()} == {"production-ranking"}
    assert {k.max_retries for k in kids.values()} == {0}
    edges = {
        (kids_by_id(kids)[e.from_job_id], kids_by_id(kids)[e.to_job_id], e.condition)
        for e in JobDependency.objects.filter(from_job__parent=parent)
    }
    assert edges == {
        ("train", "prepare", "success"),
        ("evaluate", "train", "success"),
        ("notify-failure", "train", "failure"),
    }


def kids_by_id(kids: dict[str, Job]) -> dict[int, str]:
    return {job.pk: name for name, job in kids.items()}


def test_steps_run_in_order_and_the_failure_step_is_skipped_when_train_succeeds(api, leader):
    parent = submit_pipeline(api)
    run_pass(epoch=leader)
    kids = steps(parent)
    assert step_states(parent) == {
        "prepare": "ASSIGNED",
        "train": "PENDING",
        "evaluate": "PENDING",
        "notify-failure": "PENDING",
    }
    assert kids["train"].pending_reason_message == f"waiting for job {kids['prepare'].pk} to succeed"
    assert Job.objects.get(pk=kids["notify-failure"].pk).pending_reason_message == (
        f"waiting for job {kids['train'].pk} to fail"
    )
    body = api("bob").get(f"/api/v1/jobs/{parent.pk}").json()
    assert body["pending_reason"] is None and body["state"] == "RUNNING"
    finish(kids["prepare"], 0)
    run_pass(epoch=leader)
    assert step_states(parent)["train"] == "ASSIGNED"
    finish(kids["train"], 0)
    run_pass(epoch=leader)
    assert step_states(parent) == {
        "prepare": "SUCCEEDED",
        "train": "SUCCEEDED",
        "evaluate": "ASSIGNED",
        "notify-failure": "SKIPPED",
    }
    skipped = AuditEvent.objects.get(job=kids["notify-failure"], reason="DEPENDENCY")
    assert skipped.message == f"step train (job {kids['train'].pk}) ended SUCCEEDED; this step ran only on its failure"
    finish(kids["evaluate"], 0)
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("SUCCEEDED", "")


def test_when_train_fails_the_failure_step_runs_evaluate_is_skipped_and_the_pipeline_fails(api, leader):
    parent = submit_pipeline(api)
    run_pass(epoch=leader)
    kids = steps(parent)
    finish(kids["prepare"], 0)
    run_pass(epoch=leader)
    finish(kids["train"], 1)
    run_pass(epoch=leader)  # the verdict: failed for good (max_retries 0); then the sweep
    run_pass(epoch=leader)
    assert step_states(parent) == {
        "prepare": "SUCCEEDED",
        "train": "FAILED",
        "evaluate": "SKIPPED",
        "notify-failure": "ASSIGNED",
    }
    parent.refresh_from_db()
    assert parent.state == "RUNNING"  # the failure's handler still runs
    finish(kids["notify-failure"], 0)
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("FAILED", "GROUP")


def test_skips_cascade_and_always_steps_run_after_them(api, leader):
    pipeline = {
        "steps": [
            {"name": "a", "command": ["true"]},
            {"name": "b", "after": ["a"], "when": "failure", "command": ["true"]},
            {"name": "c", "after": ["b"], "command": ["true"]},
            {"name": "cleanup", "after": ["c"], "when": "always", "command": ["true"]},
        ]
    }
    parent = submit_pipeline(api, pipeline=pipeline)
    run_pass(epoch=leader)
    finish(steps(parent)["a"], 0)
    run_pass(epoch=leader)
    assert step_states(parent) == {"a": "SUCCEEDED", "b": "SKIPPED", "c": "SKIPPED", "cleanup": "ASSIGNED"}
    finish(steps(parent)["cleanup"], 0)
    parent.refresh_from_db()
    assert parent.state == "SUCCEEDED"  # skipped by design: nothing failed


def test_cancel_mid_way_cancels_what_has_not_finished(api, leader):
    parent = submit_pipeline(api)
    run_pass(epoch=leader)
    kids = steps(parent)
    finish(kids["prepare"], 0)
    run_pass(epoch=leader)
    response = api("bob").post(f"/api/v1/jobs/{parent.pk}/cancel", {}, format="json")
    assert response.status_code == 200
    run_pass(epoch=leader)  # asks train's agents to stop
    train = Job.objects.get(pk=kids["train"].pk)
    assert set(train.tasks.values_list("stop_reason", flat=True)) == {"CANCELLED"}
    for task in train.tasks.all():
        reports.do_report_exited(
            job_id=train.pk, rank=task.rank, attempt=task.attempt, exit_code=None, signal="SIGTERM"
        )
    run_pass(epoch=leader)
    assert step_states(parent) == {
        "prepare": "SUCCEEDED",
        "train": "CANCELLED",
        "evaluate": "CANCELLED",
        "notify-failure": "CANCELLED",
    }
    parent.refresh_from_db()
    assert parent.state == "CANCELLED"


def test_children_api_gives_each_step_its_name_state_after_and_when(api, leader):
    parent = submit_pipeline(api)
    body = api("bob").get(f"/api/v1/jobs/{parent.pk}/children").json()
    assert [(c["step"], c["state"], c["after"], c["when"]) for c in body] == [
        ("prepare", "PENDING", [], "success"),
        ("train", "PENDING", ["prepare"], "success"),
        ("evaluate", "PENDING", ["train"], "success"),
        ("notify-failure", "PENDING", ["train"], "failure"),
    ]
    assert {c["array_index"] for c in body} == {None}
    group = api("bob").get(f"/api/v1/jobs/{parent.pk}").json()["group"]
    assert (group["kind"], group["count"], group["skipped"]) == ("pipeline", 4, 0)


def test_a_step_gets_the_pipeline_variables(api, leader):
    parent = submit_pipeline(api)
    train = Job.objects.select_related("parent").get(parent=parent, step_name="train")
    assert child_env(train) == {
        "MLQ_GROUP_ID": str(parent.pk),
        "MLQ_PIPELINE_RUN_ID": str(parent.pk),
        "MLQ_PIPELINE_RUN_DIR": parent.group["run_dir"],
        "MLQ_PIPELINE_STEP": "train",
    }


# --- dependency conditions on plain jobs -------------------------------------------------------


def plain(api, **overrides) -> Job:
    return submit_spec(
        api, client_job_id=None, resources=ONE_GPU, topology_hint="none", restart_policy={"max_retries": 0}, **overrides
    )


@pytest.mark.parametrize(
    ("on", "exit_code", "after"),
    [
        ("failure", 1, "ASSIGNED"),
        ("failure", 0, "CANCELLED"),
        ("any", 0, "ASSIGNED"),
        ("any", 1, "ASSIGNED"),
        ("success", 1, "CANCELLED"),
    ],
)
def test_a_condition_releases_or_cancels_the_job(api, leader, on, exit_code, after):
    first = plain(api)
    second = plain(api, depends_on=[{"job": first.pk, "on": on}])
    run_pass(epoch=leader)
    finish(first, exit_code)
    run_pass(epoch=leader)
    run_pass(epoch=leader)
    second.refresh_from_db()
    assert second.state == after


def test_a_job_cancelled_by_its_condition_says_which_dependency_and_how_it_ended(api, leader):
    first = plain(api)
    second = plain(api, depends_on=[{"job": first.pk, "on": "failure"}])
    run_pass(epoch=leader)
    second.refresh_from_db()
    assert second.pending_reason_message == f"waiting for job {first.pk} to fail"
    finish(first, 0)
    run_pass(epoch=leader)
    second.refresh_from_db()
    assert (second.state, second.failure_class) == ("CANCELLED", "DEPENDENCY")
    assert AuditEvent.objects.get(job=second, reason="DEPENDENCY").message == (
        f"dependency {first.pk} ended SUCCEEDED; this job ran only on its failure"
    )


def test_the_api_shows_each_dependency_with_its_condition(api, leader):
    first, second = plain(api), plain(api)
    third = plain(api, depends_on=[second.pk, {"job": first.pk, "on": "any"}])
    body = api("alice").get(f"/api/v1/jobs/{third.pk}").json()
    assert sorted(body["depends_on"]) == [first.pk, second.pk]
    assert body["dependencies"] == [{"job": first.pk, "on": "any"}, {"job": second.pk, "on": "success"}]
    assert third.spec["depends_on"] == [{"job": first.pk, "on": "any"}, second.pk]


# --- the page --------------------------------------------------------------------------------


def test_the_pipeline_page_draws_each_step_with_its_state_and_a_link(api, leader, logged_in):
    parent = submit_pipeline(api)
    run_pass(epoch=leader)
    kids = steps(parent)
    finish(kids["prepare"], 0)
    html = logged_in("bob").get(f"/jobs/{parent.pk}/").content.decode()
    assert 'id="pipeline-dag"' in html
    for name, state in (("prepare", "SUCCEEDED"), ("train", "PENDING"), ("notify-failure", "PENDING")):
        assert f'href="/jobs/{kids[name].pk}/" class="dag-step" data-step="{name}" data-state="{state}"' in html
    assert html.count('class="dag-edge"') == 3
    assert html.count('stroke-dasharray="5 3"') == 1  # notify-failure's edge: when failure
    assert f"<code>{parent.group['run_dir']}</code>" in html
    assert "<dt>Asks</dt><dd>nothing itself: each step asks for its own (below)" in html


def test_a_step_page_links_back_to_its_pipeline(api, leader, logged_in):
    parent = submit_pipeline(api)
    train = steps(parent)["train"]
    html = logged_in("bob").get(f"/jobs/{train.pk}/").content.decode()
    assert f'Step train of pipeline\n  <a href="/jobs/{parent.pk}/">{parent.pk}</a>' in html


# --- refused at submit -------------------------------------------------------------------------


def refused(api, user: str, spec: dict) -> dict:
    before = (Job.objects.count(), JobDependency.objects.count())
    response = api(user).post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 400, response.json()
    assert (Job.objects.count(), JobDependency.objects.count()) == before  # nothing half-written
    return response.json()["fields"]


def test_a_step_no_node_could_ever_hold_is_refused_naming_the_step(api, leader):
    too_big = {"gpu_count": 4096, "gpu_type": "H100"}
    pipeline = {"steps": [{"name": "a", "command": ["true"]}, {"name": "b", "command": ["true"], "resources": too_big}]}
    fields = refused(api, "bob", make_spec(team="production-ranking", client_job_id=None, pipeline=pipeline))
    assert list(fields) == ["pipeline.steps[1].resources.gpu_count"]


def test_an_unknown_or_invisible_dependency_is_refused_naming_its_entry(api, leader):
    mine = plain(api)
    theirs = submit_spec(api, "bob", team="production-ranking", client_job_id=None)
    spec = make_spec(client_job_id=None, depends_on=[mine.pk, {"job": theirs.pk, "on": "failure"}])
    assert refused(api, "alice", spec) == {
        "depends_on.1.job": [f"job {theirs.pk} does not exist or is not visible to you."]
    }
    twice = make_spec(client_job_id=None, depends_on=[mine.pk, {"job": mine.pk, "on": "any"}])
    assert refused(api, "alice", twice) == {
        "depends_on": [f"job {mine.pk} is listed twice, on success and on any: give each job once."]
    }
    bad_on = make_spec(client_job_id=None, depends_on=[{"job": mine.pk, "on": "afterok"}])
    not_a_condition = '"afterok" is not a valid choice (one of success, failure, any).'
    assert refused(api, "alice", bad_on) == {"depends_on.0.on": [not_a_condition]}


def test_the_queue_row_of_a_pipeline_names_its_waiting_steps(api, leader, logged_in):
    parent = submit_pipeline(api)
    run_pass(epoch=leader)
    html = logged_in("bob").get("/queue/").content.decode()
    row = re.search(rf'<tr id="job-{parent.pk}".*?</tr>', html, re.S)[0]
    assert '<code class="small pending-range">steps train, evaluate, notify-failure</code>' in row


def test_the_pipelines_depends_on_holds_its_first_steps(api, leader):
    first = submit_spec(api, "bob", team="production-ranking", client_job_id=None)
    parent = submit_pipeline(api, depends_on=[{"job": first.pk, "on": "any"}])
    kids = steps(parent)
    edges = set(JobDependency.objects.filter(to_job=first).values_list("from_job_id", "condition"))
    assert edges == {(kids["prepare"].pk, "any"), (parent.pk, "any")}  # the parent's: for the record


def test_a_dry_run_of_a_pipeline_answers_for_each_step(api, leader):
    pipeline = {
        "steps": [
            {"name": "a", "command": ["true"]},
            {"name": "b", "after": ["a"], "command": ["true"], "resources": {"gpu_count": 4096, "gpu_type": "H100"}},
        ]
    }
    spec = make_spec(team="production-ranking", client_job_id=None, pipeline=pipeline)
    body = api("bob").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert [(s["step"], s["can_ever_run"]) for s in body["steps"]] == [("a", True), ("b", False)]
    assert (body["can_ever_run"], body["reason"]["field"]) == (False, "pipeline.steps[1].resources.gpu_count")
    assert Job.objects.count() == 0


def test_the_snapshot_loads_every_edge_in_one_query(api, leader):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            build_view(now=timezone.now())
        return len(captured.captured_queries)

    first = plain(api)
    plain(api, depends_on=[first.pk])
    submit_pipeline(api)
    few = queries()
    submit_pipeline(api)
    for _ in range(3):
        plain(api, depends_on=[{"job": first.pk, "on": "any"}])
    assert queries() == few  # more jobs, steps and edges: no more queries


def forbidden(api, user: str, path: str, body: dict) -> dict:
    before = (Job.objects.count(), JobDependency.objects.count())
    response = api(user).post(path, body, format="json")
    assert response.status_code == 403, response.json()
    assert (Job.objects.count(), JobDependency.objects.count()) == before  # nothing half-written
    return response.json()


P0_STEP = {"steps": [{"name": "a", "command": ["true"]}, {"name": "incident", "command": ["true"], "priority": "P0"}]}


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/dry-run"])
def test_a_member_may_not_get_p0_through_a_pipeline_step(api, leader, path):
    spec = make_spec(team="production-ranking", client_job_id=None, pipeline=P0_STEP)
    body = forbidden(api, "bob", path, spec)
    assert list(body["fields"]) == ["pipeline.steps[1].priority"]


def test_a_member_may_not_get_p0_through_a_step_in_a_batch(api, leader):
    spec = make_spec(team="production-ranking", client_job_id=None, pipeline=P0_STEP)
    body = forbidden(api, "bob", "/api/v1/jobs/batch", {"jobs": [make_spec(team="production-ranking"), spec]})
    assert list(body["fields"]) == ["jobs[1].pipeline.steps[1].priority"]


def test_a_lead_may_run_a_p0_step(api, leader, settings):
    spec = make_spec(team="production-ranking", client_job_id=None, pipeline=P0_STEP)
    response = api("paul").post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    assert steps(Job.objects.get(pk=response.json()["id"]))["incident"].priority == "P0"


def test_a_step_runs_in_its_pipelines_team(api, leader):
    pipeline = {"steps": [{"name": "a", "command": ["true"], "team": "research-vision"}]}
    fields = refused(api, "bob", make_spec(team="production-ranking", client_job_id=None, pipeline=pipeline))
    assert list(fields) == ["pipeline.steps[0].team"]


@pytest.mark.parametrize("upstream_ends", ["cancelled", "failed"])
def test_a_pipeline_whose_own_dependency_fails_is_cancelled_whole_and_its_dependents_with_it(
    api, leader, upstream_ends
):
    """QA: every step SKIPPED made the pipeline SUCCEEDED (its `always` cleanup even ran), and a
    job waiting on the pipeline's success ran. It ends CANCELLED, as a plain job or an array."""
    pipeline = {
        "steps": [
            {"name": "train", "command": ["true"]},
            {"name": "evaluate", "after": ["train"], "command": ["true"]},
            {"name": "cleanup", "after": ["evaluate"], "when": "always", "command": ["true"]},
        ]
    }
    upstream = submit_spec(api, "bob", team="production-ranking", client_job_id=None, restart_policy={"max_retries": 0})
    parent = submit_pipeline(api, pipeline=pipeline, depends_on=[upstream.pk])
    publish = submit_spec(api, "bob", team="production-ranking", client_job_id=None, depends_on=[parent.pk])
    if upstream_ends == "cancelled":
        assert api("bob").post(f"/api/v1/jobs/{upstream.pk}/cancel", {}, format="json").status_code == 200
    else:
        run_pass(epoch=leader)
        finish(upstream, 1)
    run_pass(epoch=leader)
    run_pass(epoch=leader)
    assert step_states(parent) == {"train": "CANCELLED", "evaluate": "CANCELLED", "cleanup": "CANCELLED"}
    ended = "CANCELLED" if upstream_ends == "cancelled" else "FAILED"
    train = steps(parent)["train"]
    assert train.failure_class == "DEPENDENCY"
    assert AuditEvent.objects.filter(job=train, to_state="CANCELLED").get().message == (
        f"dependency {upstream.pk} ended {ended}; this pipeline ran only on its success"
    )
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("CANCELLED", "DEPENDENCY")
    # The pipeline's own entry says why, as a job's does (QA: "3 steps: 3 cancelled").
    said = AuditEvent.objects.filter(job=parent, to_state="CANCELLED").get()
    assert (said.reason, said.message) == (
        "DEPENDENCY",
        f"dependency {upstream.pk} ended {ended}; this pipeline ran only on its success",
    )
    publish.refresh_from_db()
    assert (publish.state, publish.failure_class) == ("CANCELLED", "DEPENDENCY")
