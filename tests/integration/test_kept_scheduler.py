"""The worker keeps one `Scheduler` from pass to pass: on the real store, over passes that
place, fill the cluster and leave jobs waiting, it decides exactly as a fresh pass would."""

from dataclasses import replace

from django.utils import timezone

from scheduling.cluster import KeptReads
from scheduling.core.scheduler import Scheduler, schedule
from scheduling.leader.leadership import LeaseRowLeadership
from scheduling.leader.worker import SchedulerWorker, run_pass
from scheduling.models import Job, SchedulerLease
from scheduling.store_view import build_view
from tests.conftest import make_spec
from tests.nodes import heartbeat

EPOCH = 5


def submit(api, user: str, **overrides) -> Job:
    spec = make_spec(client_job_id=overrides["name"], **overrides)
    response = api(user).post("/api/v1/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def test_a_kept_scheduler_decides_as_a_fresh_pass_on_the_store(api, demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=EPOCH, holder="test:1", renewed_at=timezone.now())
    heartbeat()
    kept = Scheduler()
    for round_ in range(3):
        submit(api, "alice", name=f"gang-{round_}")  # 64 H100: the seed gang
        for index in range(3):
            submit(
                api,
                "bob",
                team="production-ranking",
                name=f"one-{round_}-{index}",
                resources={"gpu_count": 4, "gpus_per_task": 4},
            )
        view = build_view(now=timezone.now())
        assert kept.schedule(view.snapshot) == schedule(view.snapshot)
        report = run_pass(epoch=EPOCH, scheduler=kept)
        assert report.placed or round_  # the first pass places; later ones find the H100 nodes full
    waiting = Job.objects.filter(state="PENDING")
    assert waiting.exists() and all(job.pending_reason_code for job in waiting)


def test_the_worker_keeps_one_scheduler():
    assert isinstance(SchedulerWorker(leadership=None).scheduler, Scheduler)


def test_a_new_term_starts_with_a_fresh_scheduler(db):
    """What a scheduler kept from an earlier term may be stale (where the backlog gate held,
    above all): taking the lead starts a fresh one, which a term keeps while it lasts."""
    worker = SchedulerWorker(leadership=LeaseRowLeadership())
    earlier = worker.scheduler
    earlier.reclaim_turn = frozenset({"gpu:H100"})
    assert worker._ensure_leading()  # takes the lead: a new term
    kept = worker.scheduler
    assert kept is not earlier and kept.reclaim_turn == frozenset()
    assert worker._ensure_leading()  # still leading
    assert worker.scheduler is kept


def a_cluster_half_full(api) -> Job:
    """Three 4-GPU jobs and a gang submitted, and a second gang, for which the first pass will
    leave no room (returned): a pass then leaves jobs both running and waiting."""
    SchedulerLease.objects.filter(pk=1).update(epoch=EPOCH, holder="test:1", renewed_at=timezone.now())
    heartbeat()
    for index in range(3):
        submit(
            api, "bob", team="production-ranking", name=f"one-{index}", resources={"gpu_count": 4, "gpus_per_task": 4}
        )
    submit(api, "alice", name="gang")
    return submit(api, "alice", name="gang-2")


def test_the_store_read_again_gives_equal_objects_which_the_kept_scheduler_swaps_for_its_own(api, demo):
    """The worker reads its snapshot afresh every pass. With nothing changed but the clock, every
    node and job read again is equal to the last read's, so the kept Scheduler meets the same
    objects it indexed (Scheduler._as_kept) and brings its index up to date instead of
    building it again."""
    a_cluster_half_full(api)
    kept = Scheduler()
    run_pass(epoch=EPOCH, scheduler=kept)  # places some: running and waiting jobs both
    first = build_view(now=timezone.now()).snapshot
    previous = kept.schedule(first)
    again = build_view(now=timezone.now()).snapshot
    assert again.running and again.pending
    assert again.nodes == first.nodes and again.nodes is not first.nodes
    assert {j.job_id: j for j in again.running} == {j.job_id: j for j in first.running}
    assert {j.job_id: j for j in again.pending} == {j.job_id: j for j in first.pending}
    state, (nodes, running, pending) = kept.state, kept.last
    # Where the backlog gate held last pass is what the kept one remembers (hysteresis), and
    # what `schedule()` is told.
    assert kept.schedule(again) == schedule(replace(again, reclaim_turn=previous.reclaim_turn))
    assert kept.state is state
    assert kept.last[0] is nodes
    assert all(kept.last[1][job_id] is job for job_id, job in running.items())
    assert all(kept.last[2][job_id] is job for job_id, job in pending.items())


def test_the_leaders_kept_reads_give_back_the_same_objects_for_what_did_not_change(api, demo):
    """With `KeptReads` (the worker keeps one) a node or job read again with the same values is
    the object the last read built, so the kept Scheduler meets its own objects without
    comparing them field by field; a job whose values changed is built again, equal to what a
    read without them gives, and a job gone is forgotten."""
    waiting = a_cluster_half_full(api)
    run_pass(epoch=EPOCH, scheduler=Scheduler())
    reads = KeptReads()
    first = build_view(now=timezone.now(), kept=reads).snapshot
    again = build_view(now=timezone.now(), kept=reads).snapshot
    assert again.running and again.pending
    assert again.nodes is first.nodes
    assert all(a is b for a, b in zip(again.running, first.running, strict=True))
    assert all(a is b for a, b in zip(again.pending, first.pending, strict=True))

    Job.objects.filter(pk=waiting.pk).update(priority="P3", pending_reason_message="rewritten")
    now = timezone.now()
    changed = build_view(now=now, kept=reads).snapshot
    fresh = build_view(now=now).snapshot
    assert changed == fresh  # what a read without kept objects gives
    [job] = [j for j in changed.pending if j.job_id == waiting.pk]
    assert job.priority == "P3" and all(j is not job for j in first.pending)
    assert all(a is b for a, b in zip(changed.running, first.running, strict=True))

    Job.objects.filter(pk=waiting.pk).update(state="CANCELLED")
    build_view(now=timezone.now(), kept=reads)
    assert waiting.pk not in reads.pending
