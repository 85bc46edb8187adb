"""A pass over a deep array costs what can start (issue 16): the snapshot holds each group's
head, at most its parallelism of the children that may start now, and the children left out
get the reason their loaded siblings got."""

from datetime import timedelta

from django.utils import timezone

from scheduling import reports
from scheduling.leader.forecasting import Forecaster
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node
from scheduling.store_view import build_view
from tests.integration.test_groups import children, states, submit
from tests.integration.test_scheduler_pass import run_all_ranks
from tests.integration.test_scheduler_pass import submit as submit_spec
from tests.nodes import cordon

REASON = ("pending_reason_code", "pending_reason_message", "pending_histogram", "reserved_nodes", "nominated_nodes")


def loaded(parent: Job) -> list[int]:
    """The ids of `parent`'s children in the snapshot a pass would take now."""
    return sorted(job.job_id for job in build_view(now=timezone.now()).snapshot.pending if job.group == parent.pk)


def reasons(jobs: list[Job]) -> list[tuple]:
    """The distinct reasons stored on `jobs` (code, message, histogram, reserved, nominated nodes)."""
    found = []
    for reason in Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list(*REASON):
        if reason not in found:
            found.append(reason)
    return found


def group_limit(parent: Job, parallelism: int) -> tuple:
    elements, are = ("element", "is") if parallelism == 1 else ("elements", "are")
    message = (
        f"its array (job {parent.pk}) runs at most {parallelism} {elements} at once, and {parallelism} {are} "
        "running or starting; it starts when one of them ends"
    )
    return ("GROUP_LIMIT", message, {}, [], [])


def one_node() -> Node:
    """Every H100 node cordoned but one: 8 GPUs."""
    node = Node.objects.filter(gpu_type="H100").order_by("name").first()
    cordon(Node.objects.exclude(pk=node.pk))
    return node


def test_a_deep_array_loads_its_head_and_the_rest_wait_for_its_limit(api, leader):
    parent = submit(api, array={"count": 50, "parallelism": 3})
    kids = children(parent)
    assert loaded(parent) == sorted(kid.pk for kid in kids[:3])
    assert build_view(now=timezone.now()).left_out == {parent.pk: [kid.pk for kid in kids[:3]]}

    report = run_pass(epoch=leader)
    assert report.placed == 3 and report.pending == 3
    assert states(parent) == ["ASSIGNED"] * 3 + ["PENDING"] * 47
    assert reasons(kids[3:]) == [group_limit(parent, 3)]
    assert run_pass(epoch=leader).applied.reasons_written == 0  # a steady pass writes nothing

    run_all_ranks(children(parent)[1], exit_code=0)
    assert loaded(parent) == sorted(kid.pk for kid in kids[3:6])
    run_pass(epoch=leader)
    assert states(parent)[:5] == ["ASSIGNED", "SUCCEEDED", "ASSIGNED", "ASSIGNED", "PENDING"]
    assert reasons(kids[4:]) == [group_limit(parent, 3)]


def test_held_children_and_children_in_back_off_are_skipped_for_the_next_eligible(api, leader):
    parent = submit(api, array={"count": 8, "parallelism": 3})
    kids = children(parent)
    response = api("alice").post(f"/api/v1/jobs/{kids[0].pk}/hold", {"reason": "bad shard"}, format="json")
    assert response.status_code == 200, response.json()
    later = timezone.now() + timedelta(hours=1)
    Job.objects.filter(pk=kids[1].pk).update(
        not_before=later, pending_reason_code="BACKOFF", pending_reason_message="retry 1 of 2 after 3600 s back-off"
    )
    assert loaded(parent) == sorted(kid.pk for kid in kids[2:5])

    run_pass(epoch=leader)
    assert states(parent) == ["PENDING", "PENDING", "ASSIGNED", "ASSIGNED", "ASSIGNED", "PENDING", "PENDING", "PENDING"]
    held, backing_off = Job.objects.get(pk=kids[0].pk), Job.objects.get(pk=kids[1].pk)
    assert (held.reason_code, held.reason_message) == ("HELD", "held by alice: bad shard")
    assert (backing_off.pending_reason_code, backing_off.pending_reason_message) == (
        "BACKOFF",
        "retry 1 of 2 after 3600 s back-off",
    )
    assert reasons(kids[5:]) == [group_limit(parent, 3)]

    Job.objects.filter(pk=kids[1].pk).update(not_before=timezone.now() - timedelta(seconds=1))
    run_all_ranks(children(parent)[2], exit_code=0)
    assert loaded(parent) == sorted([kids[1].pk, kids[5].pk, kids[6].pk])  # its back-off is over: it loads again
    run_pass(epoch=leader)
    assert Job.objects.get(pk=kids[1].pk).state == "ASSIGNED"


def test_a_child_whose_victims_are_stopping_is_loaded_before_lower_indices(clock, api, leader):
    node = one_node()
    victim = submit_spec(
        api, "bob", team="production-ranking", priority="P3", client_job_id="victim", resources={"gpu_count": 8}
    )
    run_pass(epoch=leader)
    run_all_ranks(victim)
    clock.shift(timedelta(hours=1))  # the victim has run long enough to be preempted
    parent = submit_spec(
        api,
        "rita",
        priority="P0",
        client_job_id=None,
        topology_hint="none",
        resources={"gpu_count": 8, "gpu_type": "H100"},
        array={"count": 4, "parallelism": 1},
    )
    kids = children(parent)
    response = api("rita").post(f"/api/v1/jobs/{kids[0].pk}/hold", {}, format="json")
    assert response.status_code == 200, response.json()
    run_pass(epoch=leader)  # element 1 heads the array and evicts the victim
    starter = Job.objects.get(pk=kids[1].pk)
    assert (starter.pending_reason_code, starter.nominated_nodes) == ("PREEMPTING", [node.name])
    response = api("rita").post(f"/api/v1/jobs/{kids[0].pk}/release", {}, format="json")
    assert response.status_code == 200, response.json()

    assert loaded(parent) == [kids[1].pk]  # not element 0: element 1 takes the group's one slot
    Job.objects.filter(pk=kids[1].pk).update(nominated_nodes=[])  # a reclaimer is not nominated
    assert loaded(parent) == [kids[1].pk]  # its victim still stopping is enough
    Job.objects.filter(pk=kids[1].pk).update(nominated_nodes=[node.name])
    run_pass(epoch=leader)
    assert reasons([kids[0], kids[2], kids[3]]) == [group_limit(parent, 1)]

    task = victim.tasks.get()
    reports.do_report_exited(job_id=victim.pk, rank=0, attempt=task.attempt, exit_code=143)
    run_pass(epoch=leader)
    assert states(parent) == ["PENDING", "ASSIGNED", "PENDING", "PENDING"]


def test_left_out_children_get_the_capacity_reason_when_the_cluster_is_full_and_the_group_is_not(api, leader):
    one_node()
    filler = submit_spec(api, "alice", client_job_id="filler", topology_hint="none", resources={"gpu_count": 8})
    run_pass(epoch=leader)
    assert filler.tasks.get().state == "ASSIGNED"
    parent = submit(api, array={"count": 50, "parallelism": 3})
    run_pass(epoch=leader)
    kids = children(parent)
    assert states(parent) == ["PENDING"] * 50
    last_loaded = Job.objects.get(pk=kids[2].pk)
    assert last_loaded.pending_reason_code == "INSUFFICIENT_CAPACITY" and last_loaded.reserved_nodes == []
    assert last_loaded.pending_histogram["fit"] == "0/36"
    assert reasons(kids[3:]) == [
        ("INSUFFICIENT_CAPACITY", last_loaded.pending_reason_message, last_loaded.pending_histogram, [], [])
    ]


def test_the_forecast_sees_every_waiting_child_not_only_the_head(api, leader):
    one_node()
    filler = submit_spec(
        api, "alice", client_job_id="filler", topology_hint="none", max_runtime_hours=1.0, resources={"gpu_count": 8}
    )
    run_pass(epoch=leader)
    started = filler.tasks.get().assigned_at
    parent = submit_spec(
        api,
        "alice",
        client_job_id=None,
        topology_hint="none",
        max_runtime_hours=1.0,
        resources={"gpu_count": 8, "gpu_type": "H100"},
        array={"count": 5, "parallelism": 2},
    )
    assert len(loaded(parent)) == 2
    run_pass(epoch=leader, forecaster=Forecaster(interval_s=0, inline=True))
    # One node, a whole node each: the elements start one after the other, an hour apart.
    hours = [round((kid.estimated_start - started).total_seconds() / 3600, 2) for kid in children(parent)]
    assert hours == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_left_out_children_do_not_copy_the_reservation_of_their_head(api, leader):
    node = one_node()
    submit_spec(api, "alice", client_job_id="filler", topology_hint="none", resources={"gpu_count": 8})
    run_pass(epoch=leader)
    parent = submit(api, array={"count": 5, "parallelism": 1})
    run_pass(epoch=leader)
    kids = children(parent)
    head = Job.objects.get(pk=kids[0].pk)
    assert head.reserved_nodes == [node.name]
    message, reserved = head.pending_reason_message.split("; reserved ")
    assert reserved.startswith("1 node(s), estimated start ")
    assert reasons(kids[1:]) == [("INSUFFICIENT_CAPACITY", message, head.pending_histogram, [], [])]
