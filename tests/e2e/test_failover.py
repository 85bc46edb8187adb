"""Leadership with real processes: one leader among many, failover after kill -9, and a paused
leader whose writes the store rejects after a standby took over."""

import signal
import time

import pytest
from django.db import connection

from scheduling.models import Job, SchedulerLease
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.e2e.processes import scheduler, wait_for
from tests.nodes import heartbeat

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def lease():
    return SchedulerLease.objects.values("epoch", "holder", "renewed_at").first() or {"epoch": 0, "holder": ""}


def holder_pid() -> int | None:
    holder = lease()["holder"]
    return int(holder.rsplit(":", 1)[1]) if holder else None


def advisory_lock_holders() -> int:
    """Advisory locks held on this suite's database (another suite's leaders may share the server)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return cursor.fetchone()[0]


@pytest.fixture
def procs():
    started = []
    yield started
    for proc in started:
        proc.stop()


def renewed_with_one_leader(leader_pid: int, renewals: set) -> bool:
    """At each look: one advisory lock held, by the same leader; True once the lease has been
    renewed twice since the first look (each renewal writes a new renewed_at)."""
    assert advisory_lock_holders() == 1 and holder_pid() == leader_pid
    renewals.add(lease()["renewed_at"])
    return len(renewals) >= 3


def test_one_leader_among_two_and_failover_after_kill_9(procs, tmp_path, demo):
    first, second = scheduler(tmp_path, "a"), scheduler(tmp_path, "b")
    procs += [first, second]
    pids = {first.pid, second.pid}
    wait_for(lambda: holder_pid() in pids, timeout=15, what="a leader")
    leader_pid, epoch = holder_pid(), lease()["epoch"]
    renewals = set()
    wait_for(lambda: renewed_with_one_leader(leader_pid, renewals), timeout=15, what="two renewals")
    leader = first if first.pid == leader_pid else second
    standby = second if leader is first else first

    killed_at = time.monotonic()
    leader.signal(signal.SIGKILL)
    wait_for(lambda: holder_pid() == standby.pid, timeout=10, what="the standby to take over")
    assert time.monotonic() - killed_at < 10
    assert lease()["epoch"] == epoch + 1
    # Its log says so a moment after the lease row does (a loaded machine may take a while).
    wait_for(lambda: f"leads with epoch {epoch + 1}" in standby.output(), timeout=10, what="the standby's log line")


def test_a_paused_leader_is_fenced_off_and_steps_down(procs, tmp_path, api):
    heartbeat()
    timing = ("--lease", "5", "--renew", "1")
    slow = scheduler(tmp_path, "slow", *timing, MLQ_FAULT_APPLY_DELAY_S=3)
    procs.append(slow)
    wait_for(lambda: holder_pid() == slow.pid, timeout=15, what="the slow scheduler to lead")
    old_epoch = lease()["epoch"]
    standby = scheduler(tmp_path, "standby", *timing)
    procs.append(standby)

    # Submit while a pass sleeps before applying: its snapshot was read before the job existed,
    # so no pass of the old leader can have placed the job by the time the next one sleeps.
    # (Submitted at any time, a pass that saw the job could apply it, with the old epoch,
    # before the leader was paused: CI saw that once.)
    wait_for(lambda: "fault injection" in slow.output(), timeout=15, what="the leader's first pass")
    seen = slow.output().count("fault injection")
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    # Pause the leader between deciding and applying, as a long GC pause or a frozen VM would.
    wait_for(lambda: slow.output().count("fault injection") > seen, timeout=15, what="the leader mid-pass")
    slow.signal(signal.SIGSTOP)
    wait_for(lambda: holder_pid() == standby.pid, timeout=15, what="the standby to take over")
    new_epoch = lease()["epoch"]
    assert new_epoch == old_epoch + 1
    wait_for(lambda: Job.objects.get(pk=job_id).state == "ASSIGNED", timeout=10, what="the new leader to place")

    slow.signal(signal.SIGCONT)
    # Its delayed write is refused (it is fenced by its old epoch), then it steps down.
    wait_for(lambda: f"epoch {old_epoch} steps down" in slow.output(), timeout=15, what="the old leader to step down")
    tasks = list(Job.objects.get(pk=job_id).tasks.values_list("state", "epoch", "attempt"))
    assert tasks == [("ASSIGNED", new_epoch, 1)]
    assert AuditEvent.objects.filter(job_id=job_id, reason="PLACED").count() == 1
    assert holder_pid() == standby.pid and lease()["epoch"] == new_epoch
    assert f"epoch {old_epoch} was deposed" in slow.output()
