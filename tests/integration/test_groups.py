"""Job groups (issue 16): an array's or a sweep's children are ordinary jobs, placed at most
`parallelism` at once, retried one by one; the parent's state follows theirs; cancelling the
parent cancels what has not finished."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import reports
from scheduling.leader.reconcile import reconcile
from scheduling.leader.worker import run_pass
from scheduling.models import Job
from scheduling.store_view import load_groups
from scheduling.web.explanations import HIGHER_LIMIT, QUOTA_WAIT, WOULD_START
from teams.models import AuditEvent, EventKind
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.integration.test_scheduler_pass import submit as submit_spec

# A quota wait of a job that fits the free room, its figures not in its reason.
ROOM_FOR_A_HIGHER_LIMIT = QUOTA_WAIT.format(quota="its team's quota") + WOULD_START.format(
    help=HIGHER_LIMIT.format(lead="from a lead of its team")
)

ONE_GPU = {"gpu_count": 1, "gpu_type": "H100"}


def submit(api, user="alice", **overrides) -> Job:
    return submit_spec(api, user, client_job_id=None, resources=ONE_GPU, topology_hint="none", **overrides)


def children(parent: Job) -> list[Job]:
    return list(Job.objects.filter(parent=parent).order_by("group_index"))


def states(parent: Job) -> list[str]:
    return [child.state for child in children(parent)]


def test_an_array_makes_one_child_per_element_with_its_index_in_the_command(api, leader):
    parent = submit(
        api,
        array={"count": 5, "parallelism": 2},
        command=["python", "infer.py", "--shard", "{index}", "--of", "{count}"],
    )
    kids = children(parent)
    assert [kid.group_index for kid in kids] == [0, 1, 2, 3, 4]
    assert kids[3].command == ["python", "infer.py", "--shard", "3", "--of", "5"]
    assert kids[3].name == f"{parent.name}[3]"
    assert parent.group_kind == "array" and parent.tasks.count() == 0
    assert all(kid.tasks.count() == 1 for kid in kids)


def test_an_array_never_has_more_children_placed_than_its_parallelism(api, leader):
    parent = submit(api, array={"count": 5, "parallelism": 2})
    run_pass(epoch=leader)
    assert states(parent) == ["ASSIGNED", "ASSIGNED", "PENDING", "PENDING", "PENDING"]
    waiting = children(parent)[2]
    assert waiting.pending_reason_code == "GROUP_LIMIT"
    assert waiting.pending_reason_message == (
        f"its array (job {parent.pk}) runs at most 2 elements at once, and 2 are running or starting; "
        "it starts when one of them ends"
    )
    run_pass(epoch=leader)
    assert states(parent).count("ASSIGNED") == 2

    first = children(parent)[0]
    run_all_ranks(first, exit_code=0)
    parent.refresh_from_db()
    assert parent.state == "RUNNING"
    run_pass(epoch=leader)
    assert states(parent) == ["SUCCEEDED", "ASSIGNED", "ASSIGNED", "PENDING", "PENDING"]


def test_a_failed_element_is_retried_alone_and_the_array_succeeds(api, leader):
    parent = submit(api, array={"count": 3})
    run_pass(epoch=leader)
    kids = children(parent)
    run_all_ranks(kids[0], exit_code=0)
    run_all_ranks(kids[1], exit_code=3)
    run_all_ranks(kids[2], exit_code=0)
    run_pass(epoch=leader)  # settles element 1 as a retry after its back-off
    kids = children(parent)
    assert [k.state for k in kids] == ["SUCCEEDED", "PENDING", "SUCCEEDED"]
    assert kids[1].retries_used == 1 and kids[0].tasks.get().attempt == 1
    parent.refresh_from_db()
    assert parent.state == "PENDING"

    Job.objects.filter(pk=kids[1].pk).update(not_before=None)
    run_pass(epoch=leader)
    run_all_ranks(Job.objects.get(pk=kids[1].pk), exit_code=0)
    parent.refresh_from_db()
    assert parent.state == "SUCCEEDED"
    assert parent.finished_at is not None


def test_an_array_past_max_failures_fails_and_the_leader_cancels_the_rest(api, leader):
    parent = submit(api, array={"count": 4, "parallelism": 2, "max_failures": 0}, restart_policy={"max_retries": 0})
    run_pass(epoch=leader)
    run_all_ranks(children(parent)[0], exit_code=1)
    run_pass(epoch=leader)  # the verdict: failed for good; the rest cancelled before anything starts
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("FAILED", "GROUP")
    kids = children(parent)
    assert kids[0].state == "FAILED"
    assert all(k.cancel_requested_at is not None for k in kids[1:])
    assert [k.state for k in kids[1:]] == ["ASSIGNED", "CANCELLED", "CANCELLED"]
    assert kids[1].tasks.get().stop_reason == "CANCELLED"  # the running one is being stopped
    running = kids[1].tasks.get()
    reports.do_report_exited(job_id=kids[1].pk, rank=0, attempt=running.attempt, exit_code=143)
    assert Job.objects.get(pk=kids[1].pk).state == "CANCELLED"
    parent.refresh_from_db()
    assert parent.state == "FAILED"


def test_the_leader_cancels_a_failed_arrays_unplaced_rest_in_bulk(api, leader):
    """A 10,000-element array past its max_failures had its rest cancelled one child a
    transaction inside the leader's pass; those never placed now go CANCEL_BATCH at a time."""
    parent = submit(api, array={"count": 60, "parallelism": 2, "max_failures": 0}, restart_policy={"max_retries": 0})
    run_pass(epoch=leader)
    run_all_ranks(children(parent)[0], exit_code=1)
    with CaptureQueriesContext(connection) as queries:
        run_pass(epoch=leader)
    kids = children(parent)
    assert [k.state for k in kids[2:]] == ["CANCELLED"] * 58
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("FAILED", "GROUP")
    requests = AuditEvent.objects.filter(job__in=kids[2:], kind=EventKind.CANCEL_REQUESTED)
    assert {(e.actor_name, e.message) for e in requests} == {("scheduler", f"its group (job {parent.pk}) failed")}
    assert requests.count() == 58
    assert len(queries.captured_queries) < 400  # not a dozen statements for each of the 58


def test_a_child_that_fails_mid_pass_holds_its_slot_until_its_verdict(api, leader, monkeypatch):
    """An element's failure that lands after a pass's sweep and before its snapshot: until the
    verdict its slot stays taken, so no sibling starts in it (one that would have started after
    the failure that ends the array, past max_failures)."""
    parent = submit(api, array={"count": 4, "parallelism": 2, "max_failures": 0}, restart_policy={"max_retries": 0})
    run_pass(epoch=leader)
    kids = children(parent)

    def fail_after_the_sweep(name):
        if name == "pass.after_sweep":
            run_all_ranks(Job.objects.get(pk=kids[0].pk), exit_code=1)

    monkeypatch.setattr("scheduling.leader.worker.failpoints.hit", fail_after_the_sweep)
    run_pass(epoch=leader)
    assert states(parent) == ["FAILED", "ASSIGNED", "PENDING", "PENDING"]
    assert children(parent)[2].pending_reason_message == (
        f"its array (job {parent.pk}) runs at most 2 elements at once, and 1 is running or starting and 1 "
        "failed just now (a failed one holds its slot until it is retried or failed for good); it starts "
        "when one of them ends"
    )
    monkeypatch.undo()
    run_pass(epoch=leader)  # the verdict: failed for good; the rest cancelled, none started
    assert states(parent) == ["FAILED", "ASSIGNED", "CANCELLED", "CANCELLED"]
    parent.refresh_from_db()
    assert (parent.state, parent.failure_class) == ("FAILED", "GROUP")


def test_a_retried_child_gives_its_slot_back(api, leader):
    """A failed child held its slot only until the verdict: retried, it waits for its back-off
    like any pending child, and its sibling starts in the slot."""
    parent = submit(api, array={"count": 3, "parallelism": 1})
    run_pass(epoch=leader)
    run_all_ranks(children(parent)[0], exit_code=3)
    assert load_groups({parent.pk})[parent.pk].settling == 1
    run_pass(epoch=leader)  # element 0 retried after its back-off: element 1 takes the slot
    assert states(parent) == ["PENDING", "ASSIGNED", "PENDING"]
    assert load_groups({parent.pk})[parent.pk].settling == 0


def test_cancelling_the_parent_cancels_every_unfinished_child(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    run_pass(epoch=leader)
    run_all_ranks(children(parent)[0], exit_code=0)
    response = api("alice").post(f"/api/v1/jobs/{parent.pk}/cancel", {}, format="json")
    assert response.status_code == 200, response.json()
    kids = children(parent)
    assert [k.state for k in kids] == ["SUCCEEDED", "CANCELLED", "CANCELLED"]
    parent.refresh_from_db()
    assert parent.state == "CANCELLED"


@pytest.mark.parametrize("size", [20, 80])
def test_cancelling_a_large_array_costs_the_same_per_child_whatever_its_size(api, leader, size):
    """Each child's cancel derived the parent's state from a count over every child, and woke
    the scheduler: a 6,000-element array took 601 s to cancel (found by QA). The parent is
    now derived once, at the end, with one wake-up; the queries grow with the children alone."""
    parent = submit(api, array={"count": size, "parallelism": 1})
    with CaptureQueriesContext(connection) as queries:
        response = api("alice").post(f"/api/v1/jobs/{parent.pk}/cancel", {}, format="json")
    assert response.status_code == 200, response.json()
    assert set(states(parent)) == {"CANCELLED"}
    parent.refresh_from_db()
    assert parent.state == "CANCELLED"
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"] and '"parent_id"' in q["sql"]]
    assert len(counts) == 2  # to derive the parent once, and for the answer's summary: not once per child
    group_events = AuditEvent.objects.filter(job=parent, kind=EventKind.TRANSITION, reason="GROUP")
    assert list(group_events.values_list("from_state", "to_state")) == [("PENDING", "CANCELLED")]
    # Never placed: cancelled in bulk, and no child's row read again to be told it is a child
    # (a 2,000-element array's cancel took 4-7 s, 2,000 of them notifications' reads: QA).
    assert len(queries.captured_queries) < 45  # whatever the size
    kid = children(parent)[-1]
    assert list(
        AuditEvent.objects.filter(job=kid).exclude(kind="SUBMITTED").values_list("kind", "to_state", "message")
    ) == [
        ("CANCEL_REQUESTED", "", "cancelled by alice"),
        ("TRANSITION", "CANCELLED", "cancelled by alice"),
    ]
    assert (kid.cancel_requested_at, kid.tasks.get().failure_class) != (None, "")


@pytest.mark.parametrize("size", [20, 80])
def test_the_leader_settles_a_cancelled_arrays_children_in_bulk(api, leader, size):
    """The children a cancel ended before they were placed were then settled one transaction
    each, each counting its group again: a 2,000-element array's cancel held the leader's sweep,
    and every placement, for 30 s (QA). Now their queries do not grow with the children."""
    parent = submit(api, array={"count": size, "parallelism": 1})
    run_pass(epoch=leader)  # element 0 placed: it is stopped and settled as before
    api("alice").post(f"/api/v1/jobs/{parent.pk}/cancel", {}, format="json")
    unplaced = Job.objects.filter(parent=parent, state="CANCELLED", failure_class="")
    assert unplaced.count() == size - 1
    with CaptureQueriesContext(connection) as queries:
        swept = reconcile(epoch=leader, now=timezone.now())
    assert swept.cancelled == size - 1
    assert not unplaced.exists()
    assert set(Job.objects.filter(parent=parent).exclude(group_index=0).values_list("failure_class", flat=True)) == {
        "CANCELLED"
    }
    assert len(queries.captured_queries) < 40  # whatever the size


def test_a_grid_sweep_makes_a_trial_per_combination_with_its_parameters(api, leader):
    parent = submit(
        api,
        sweep={"method": "grid", "parameters": {"lr": [0.001, 0.01], "batch_size": [32, 64]}, "parallelism": 4},
        command=["python", "train.py", "--lr", "{lr}", "--batch-size", "{batch_size}"],
    )
    kids = children(parent)
    assert [k.params for k in kids] == [  # by name: batch_size varies slowest
        {"lr": 0.001, "batch_size": 32},
        {"lr": 0.01, "batch_size": 32},
        {"lr": 0.001, "batch_size": 64},
        {"lr": 0.01, "batch_size": 64},
    ]
    assert kids[2].command == ["python", "train.py", "--lr", "0.001", "--batch-size", "64"]


def test_a_random_sweep_with_a_seed_draws_the_same_trials_twice(api, leader):
    sweep = {
        "method": "random",
        "parameters": {"lr": {"min": 1e-5, "max": 1e-1, "log": True}, "dropout": {"min": 0.0, "max": 0.5}},
        "max_trials": 6,
        "seed": 42,
    }
    first, second = submit(api, sweep=sweep), submit(api, sweep=sweep)
    assert [k.params for k in children(first)] == [k.params for k in children(second)]
    assert all(1e-5 <= k.params["lr"] <= 1e-1 for k in children(first))
    assert len({k.params["lr"] for k in children(first)}) == 6


@pytest.mark.parametrize(
    ("block", "field", "message"),
    [
        ({"array": {"parallelism": 2}}, "count", "give count or indices"),
        ({"array": {"count": 3, "max_failures": 3}}, "max_failures", "must be less than the group's 3 elements"),
        (
            {"sweep": {"method": "grid", "parameters": {"lr": [1, 2]}, "max_failures": 2}},
            "max_failures",
            "must be less than the group's 2 trials, got 2",
        ),
        ({"sweep": {"method": "random", "parameters": {"lr": [1, 2]}}}, "max_trials", "method random needs"),
        ({"sweep": {"method": "grid", "parameters": {"lr": {"min": 0, "max": 1}}}}, "parameters", "a grid takes"),
    ],
)
def test_a_bad_group_block_is_a_400_naming_the_field(api, leader, block, field, message):
    response = api("alice").post("/api/v1/jobs", {**submit_body(), **block}, format="json")
    assert response.status_code == 400, response.json()
    assert message in str(response.json()), response.json()
    assert field in str(response.json())
    assert not Job.objects.exists()


def submit_body() -> dict:
    from tests.conftest import make_spec

    return make_spec(client_job_id=None, resources=ONE_GPU)


def test_an_element_reports_exit_as_an_ordinary_job(api, leader):
    parent = submit(api, array={"count": 1})
    run_pass(epoch=leader)
    kid = children(parent)[0]
    task = kid.tasks.get()
    reports.do_report_started(job_id=kid.pk, rank=0, attempt=task.attempt)
    parent.refresh_from_db()
    assert parent.state == "RUNNING" and parent.started_at is not None


def test_the_api_shows_the_group_and_lists_its_children(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 2})
    run_pass(epoch=leader)
    body = api("alice").get(f"/api/v1/jobs/{parent.pk}").json()
    assert body["group"] == {
        "kind": "array",
        "count": 3,
        "parallelism": 2,
        "max_failures": 0,
        "pending": 1,
        "running": 2,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "early_stopped": 0,
        "skipped": 0,
    }
    kids = api("alice").get(f"/api/v1/jobs/{parent.pk}/children").json()
    assert [(k["array_index"], k["state"], k["parent"]) for k in kids] == [
        (0, "ASSIGNED", parent.pk),
        (1, "ASSIGNED", parent.pk),
        (2, "PENDING", parent.pk),
    ]
    listed = api("alice").get("/api/v1/jobs?top_level=true").json()["results"]
    assert [job["id"] for job in listed] == [parent.pk]
    assert listed[0]["group"]["running"] == 2


def test_holding_a_group_holds_its_pending_children_and_releasing_it_releases_them(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    run_pass(epoch=leader)
    response = api("alice").post(f"/api/v1/jobs/{parent.pk}/hold", {"reason": "bad data"}, format="json")
    assert response.status_code == 200, response.json()
    kids = children(parent)
    assert [(k.state, k.held) for k in kids] == [("ASSIGNED", False), ("PENDING", True), ("PENDING", True)]
    run_all_ranks(kids[0], exit_code=0)
    run_pass(epoch=leader)
    assert states(parent) == ["SUCCEEDED", "PENDING", "PENDING"]
    assert children(parent)[1].reason_message == "held by alice: bad data"

    response = api("alice").post(f"/api/v1/jobs/{parent.pk}/release", {}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)
    assert states(parent) == ["SUCCEEDED", "ASSIGNED", "PENDING"]


def test_a_group_is_not_requeued_whole(api, leader):
    parent = submit(api, array={"count": 2})
    run_pass(epoch=leader)
    response = api("alice").post(f"/api/v1/jobs/{parent.pk}/requeue", {}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"job {parent.pk} is an array: requeue its elements one by one "
        f"(GET /api/v1/jobs/{parent.pk}/children lists them)."
    )


def test_a_new_priority_for_a_group_reaches_its_pending_children(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    run_pass(epoch=leader)
    response = api("alice").patch(f"/api/v1/jobs/{parent.pk}", {"priority": "P3"}, format="json")
    assert response.status_code == 200, response.json()
    assert [k.priority for k in children(parent)] == ["P1", "P3", "P3"]  # the placed one keeps the seed spec's P1


def test_why_of_a_waiting_group_answers_for_its_first_waiting_child(api, leader):
    """The parent has no tasks, so no pass explains it: "why" read its stale NOT_YET_SCHEDULED
    while the job's own page said what its children wait for."""
    parent = submit(api, array={"count": 2})
    first, second = children(parent)
    Job.objects.filter(pk__in=[first.pk, second.pk]).update(
        pending_reason_code="QUOTA",
        pending_reason_message="team research-vision is at its borrowing limit",
        pending_histogram={},
        estimated_start=None,
    )
    Job.objects.filter(pk=first.pk).update(estimated_start="2030-01-01T00:00:00Z", reserved_nodes=["n1"])
    body = api("alice").get(f"/api/v1/jobs/{parent.pk}/why").json()
    page = api("alice").get(f"/api/v1/jobs/{parent.pk}").json()["pending_reason"]
    assert (body["job_id"], body["child_id"], body["state"]) == (parent.pk, first.pk, "PENDING")
    assert body["reason"] == {"code": "QUOTA", "category": "policy", "message": page["message"]}
    assert page["message"] == "element 0: team research-vision is at its borrowing limit"
    assert (body["histogram"], body["latest_start"]) == (None, "2030-01-01T00:00:00Z")
    assert body["reservation"] == {"reserved_nodes": ["n1"], "nominated_nodes": []}
    assert body["suggestions"] == [ROOM_FOR_A_HIGHER_LIMIT]  # it waits on its quota, not for room: no reshape


def test_the_same_group_submitted_twice_is_one_group(api, leader):
    body = {"client_job_id": "shards-1", "array": {"count": 4}}
    first = submit_spec(api, "alice", resources=ONE_GPU, **body)
    response = api("alice").post("/api/v1/jobs", {**submit_body(), **body}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["id"] == first.pk
    assert Job.objects.filter(parent=first).count() == 4


def test_a_waiting_group_says_why_its_first_waiting_child_waits(api, leader):
    parent = submit(api, array={"count": 1})
    body = api("alice").get(f"/api/v1/jobs/{parent.pk}").json()
    assert body["pending_reason"] == {
        "code": "NOT_YET_SCHEDULED",
        "message": "element 0: waiting for the scheduler's next pass",
    }
    run_pass(epoch=leader)
    kids = children(parent)
    run_all_ranks(kids[0], exit_code=5)  # fails: a retry after its back-off
    run_pass(epoch=leader)
    listed = api("alice").get("/api/v1/jobs?top_level=true").json()["results"][0]
    assert listed["state"] == "PENDING"
    assert listed["pending_reason"]["code"] == "BACKOFF"
    # A child in back-off is left out of the pass's snapshot (it cannot start): it keeps the
    # reason its requeue wrote.
    assert (
        listed["pending_reason"]["message"]
        == "element 0: rank 0 failed (exit code 5); retry 1 of 2 after 30 s back-off"
    )


def test_cancelling_the_parent_cancels_a_child_awaiting_its_retry(api, leader):
    """QA: a child FAILED and not yet settled (awaiting its retry) was passed over by the
    group's cancel ('cancelled 0 of its 2 elements'), then retried and run again."""
    parent = submit(api, array={"count": 2, "max_failures": 1}, restart_policy={"max_retries": 2})
    run_pass(epoch=leader)
    for kid in children(parent):
        run_all_ranks(kid, exit_code=1)
    response = api("alice").post(f"/api/v1/jobs/{parent.pk}/cancel", {}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)
    run_pass(epoch=leader)
    assert states(parent) == ["CANCELLED", "CANCELLED"]
    assert all(kid.retries_used == 0 for kid in children(parent))
    parent.refresh_from_db()
    assert parent.state == "CANCELLED"


def test_a_child_retried_while_its_group_is_held_is_held_with_it(api, leader):
    """QA: holding a group held its children PENDING at that moment; one retried (or requeued)
    later started at once under the group's hold."""
    parent = submit(api, array={"count": 2}, restart_policy={"max_retries": 2})
    run_pass(epoch=leader)
    assert (
        api("alice").post(f"/api/v1/jobs/{parent.pk}/hold", {"reason": "pause all"}, format="json").status_code == 200
    )
    first = children(parent)[0]
    run_all_ranks(first, exit_code=1)
    run_pass(epoch=leader)  # the verdict: a retry, held with its group
    Job.objects.filter(pk=first.pk).update(not_before=None)
    run_pass(epoch=leader)
    first.refresh_from_db()
    assert (first.state, first.held, first.held_reason) == ("PENDING", True, "pause all")
    retry = AuditEvent.objects.filter(job=first, kind=EventKind.RETRY).get()
    assert retry.message.endswith(f"; held with its group (job {parent.pk}), which is held")
    assert api("alice").post(f"/api/v1/jobs/{parent.pk}/release", {}, format="json").status_code == 200
    first.refresh_from_db()
    assert not first.held


def test_releasing_a_group_leaves_a_child_held_by_itself_held(api, leader):
    parent = submit(api, array={"count": 3, "parallelism": 1})
    own = children(parent)[2]
    assert api("alice").post(f"/api/v1/jobs/{own.pk}/hold", {"reason": "bad shard"}, format="json").status_code == 200
    assert (
        api("alice").post(f"/api/v1/jobs/{parent.pk}/hold", {"reason": "pause all"}, format="json").status_code == 200
    )
    assert api("alice").post(f"/api/v1/jobs/{parent.pk}/release", {}, format="json").status_code == 200
    assert [(k.held, k.held_reason) for k in children(parent)] == [(False, ""), (False, ""), (True, "bad shard")]


def test_jobs_after_a_failed_array_wait_until_its_last_element_has_ended(api, leader):
    """QA: an array past its max_failures is FAILED at once; an `on: any` job after it ran while
    the elements being cancelled were still stopping (Slurm's afterany waits for every task)."""
    parent = submit(api, array={"count": 2, "max_failures": 0}, restart_policy={"max_retries": 0})
    after = submit(api, depends_on=[{"job": parent.pk, "on": "any"}])
    run_pass(epoch=leader)
    first, second = children(parent)
    run_all_ranks(first, exit_code=1)
    run_pass(epoch=leader)  # the verdict: the array FAILED, the other element asked to stop
    run_pass(epoch=leader)
    parent.refresh_from_db()
    assert parent.state == "FAILED"
    after.refresh_from_db()
    assert (after.state, after.pending_reason_message) == ("PENDING", f"waiting for job {parent.pk} to end")
    task = Job.objects.get(pk=second.pk).tasks.get()
    reports.do_report_exited(job_id=second.pk, rank=0, attempt=task.attempt, exit_code=143)
    run_pass(epoch=leader)
    after.refresh_from_db()
    assert after.state == "ASSIGNED"
