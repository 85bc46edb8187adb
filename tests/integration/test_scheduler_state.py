"""Whether a leader is alive, as /api/v1/scheduler and the admin console say it: decided by
Postgres on its own clock, by the duration the leader wrote on the lease row (issue 14)."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from scheduling.leader.leadership import LeaseRowLeadership, PostgresLeadership
from scheduling.models import SchedulerLease
from scheduling.selectors import scheduler_state

HOLDER = "sched-1:42"


def renewed_ago(seconds: float, *, lease_seconds: float | None) -> None:
    """The lease renewed `seconds` ago by the database's clock, as a leader renews it."""
    SchedulerLease.objects.filter(pk=1).update(holder=HOLDER, epoch=3, lease_seconds=lease_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {SchedulerLease._meta.db_table} SET renewed_at = now() - make_interval(secs => %s) WHERE id = 1",
            [seconds],
        )


def console_leader(client) -> str | None:
    html = client.get("/nodes/").content.decode()
    shown = re.search(r'<dd id="leader">(.*?)</dd>', html, re.DOTALL).group(1)
    return None if "the lease has lapsed" in shown else re.sub(r"</?b>", "", shown)


@pytest.fixture
def ops(demo, client):
    client.login(username="ops", password="demo")
    return client


@pytest.mark.parametrize(("lease_seconds", "alive"), [(10.0, True), (5.0, False), (9.5, True), (7.5, False)])
def test_alive_follows_the_duration_on_the_row(demo, lease_seconds, alive):
    renewed_ago(8, lease_seconds=lease_seconds)
    state = scheduler_state()
    assert (state.alive, state.leader, state.lease_seconds) == (alive, HOLDER if alive else None, lease_seconds)


def test_never_renewed_or_without_a_duration_is_not_alive(demo):
    SchedulerLease.objects.filter(pk=1).update(holder=HOLDER, renewed_at=None, lease_seconds=10)
    assert scheduler_state().alive is False
    renewed_ago(0, lease_seconds=None)
    assert scheduler_state().alive is False
    SchedulerLease.objects.all().delete()
    assert (scheduler_state().alive, scheduler_state().epoch, scheduler_state().leader) == (False, 0, None)


@pytest.mark.parametrize("skew", [timedelta(hours=-1), timedelta(seconds=-9), timedelta(seconds=30), timedelta(days=1)])
def test_the_web_hosts_clock_plays_no_part(demo, skew):
    renewed_ago(8, lease_seconds=10)
    with time_machine.travel(timezone.now() + skew, tick=False):
        assert scheduler_state().alive is True
    renewed_ago(8, lease_seconds=5)
    with time_machine.travel(timezone.now() + skew, tick=False):
        assert scheduler_state().alive is False


def test_one_query(demo, django_assert_num_queries):
    renewed_ago(1, lease_seconds=10)
    with django_assert_num_queries(1):
        assert scheduler_state().alive


@pytest.mark.parametrize(("ago", "lease_seconds"), [(2, 10), (8, 10), (8, 5), (30, 10)])
def test_the_api_and_the_console_agree(api, ops, ago, lease_seconds):
    renewed_ago(ago, lease_seconds=lease_seconds)
    alive = ago < lease_seconds
    with time_machine.travel(timezone.now() + timedelta(minutes=5), tick=False):  # neither reads the web's clock
        body = api("victor").get("/api/v1/scheduler").json()
        shown = console_leader(ops)
    assert (body["leading"], body["leader"], body["epoch"], body["lease_seconds"]) == (
        alive,
        HOLDER if alive else None,
        3,
        lease_seconds,
    )
    assert shown == body["leader"]


@pytest.mark.django_db(transaction=True)
def test_the_postgres_leader_writes_its_duration_when_it_takes_and_renews_the_lease():
    leadership = PostgresLeadership(lease_s=4.5, renew_s=1.0, renew_deadline_s=3.0)
    try:
        assert leadership.try_acquire() is not None
        assert SchedulerLease.objects.values_list("lease_seconds", flat=True).get() == 4.5
        SchedulerLease.objects.update(lease_seconds=None)
        assert leadership.renew() is True
        assert SchedulerLease.objects.values_list("lease_seconds", flat=True).get() == 4.5
        assert scheduler_state().leader == leadership.holder
    finally:
        leadership.step_down()


@pytest.mark.django_db(transaction=True)
def test_the_embedded_leader_writes_its_duration_too():
    leadership = LeaseRowLeadership(lease_s=30.0, renew_s=1.0, renew_deadline_s=20.0)
    try:
        assert leadership.try_acquire() is not None
        assert SchedulerLease.objects.values_list("lease_seconds", flat=True).get() == 30.0
        SchedulerLease.objects.update(lease_seconds=None)
        assert leadership.renew() is True
        assert SchedulerLease.objects.values_list("lease_seconds", flat=True).get() == 30.0
        assert scheduler_state().leader == leadership.holder
    finally:
        leadership.step_down()


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_the_existing_row_the_duration_assumed_until_now():
    before, after = [("scheduling", "0018_audit_event_to_teams")], [("scheduling", "0019_lease_duration")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps.get_model("scheduling", "SchedulerLease")
        old.objects.update_or_create(pk=1, defaults={"epoch": 9, "holder": HOLDER, "renewed_at": timezone.now()})
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
    try:
        assert SchedulerLease.objects.values_list("epoch", "lease_seconds").get() == (9, 10.0)
    finally:  # back to the latest schema: later migrations are not 0019's to leave undone
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
