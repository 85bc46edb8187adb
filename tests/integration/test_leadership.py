"""Who leads: one scheduler at a time on Postgres, each takeover a new epoch, recorded as a
LEADER event in the same statement as the epoch bump (the fault campaign's evidence that no
write of a deposed epoch was accepted)."""

import pytest

from scheduling.fencing import Deposed, fenced
from scheduling.leader.leadership import PostgresLeadership
from scheduling.models import SchedulerLease
from teams.models import AuditEvent

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_leads_the_other_waits_and_each_takeover_is_a_leader_event():
    first, second = PostgresLeadership(), PostgresLeadership()
    try:
        epoch = first.try_acquire()
        assert epoch is not None and second.try_acquire() is None
        first.step_down()
        assert second.try_acquire() == epoch + 1
        events = list(AuditEvent.objects.filter(kind="LEADER").order_by("id").values_list("data", "message"))
        assert [data["epoch"] for data, _ in events] == [epoch, epoch + 1]
        assert events[1][1] == f"{second.holder} took the lead with epoch {epoch + 1}"
        assert SchedulerLease.objects.get().epoch == epoch + 1
        with pytest.raises(Deposed):
            with fenced(epoch):
                pass
    finally:
        first.step_down()
        second.step_down()
