"""Firing schedules (scheduling/schedules.py) on a frozen clock: missed fire times collapse into
one run, the starting deadline, forbid and replace, an owner who left pauses the schedule, a
replayed fire returns the same run, secrets stay encrypted, and the leader's sweep fires."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError

from mlqueue.errors import Conflict
from scheduling import schedules
from scheduling.leader.schedule_sweep import ScheduleSweep
from scheduling.models import FireOutcome, Job, JobState, Schedule
from scheduling.secrets import decrypt_env
from teams.models import AuditEvent, Membership

pytestmark = pytest.mark.django_db

TEAM = "research-foundation-models"
SPEC = {"name": "nightly-eval", "team": TEAM, "command": ["python", "eval.py"], "resources": {"tasks": 1}}


def at(hour: int, minute: int = 0, day: int = 20) -> datetime:
    return datetime(2026, 4, day, hour, minute, tzinfo=UTC)


def create(username: str = "alice", spec: dict | None = None, **timing) -> Schedule:
    user = get_user_model().objects.get(username=username)
    data = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "spec": spec or SPEC, **timing}
    team, checked, spec = schedules.check_schedule_create(user=user, data=data)
    schedule, created = schedules.do_create_schedule(user=user, team=team, timing=checked, spec=spec)
    assert created
    return schedule


def fire_at(clock, when: datetime):
    clock.move_to(when)
    return schedules.fire_due(now=when)


def runs(schedule: Schedule) -> list[tuple[datetime, str]]:
    return list(Job.objects.filter(schedule=schedule).order_by("id").values_list("scheduled_for", "state"))


def test_a_schedule_fires_at_its_time_once_through_the_submit_service(clock, demo):
    schedule = create()
    assert schedule.next_run_at == at(9, 5)
    assert fire_at(clock, at(9, 4)) == []
    [fire] = fire_at(clock, at(9, 5))
    job = Job.objects.get(schedule=schedule)
    assert (fire.outcome, fire.message, fire.job_id) == (FireOutcome.SUBMITTED, f"submitted job {job.pk}", job.pk)
    assert (job.client_job_id, job.scheduled_for, job.owner.username) == (
        f"schedule-{schedule.pk}-20260420T090500Z",
        at(9, 5),
        "alice",
    )
    assert job.events.get().message.endswith(f"the run of schedule {schedule.pk} for 2026-04-20 09:05 UTC")
    assert fire_at(clock, at(9, 5) + timedelta(seconds=30)) == []  # claimed: next_run_at is 09:10 now
    schedule.refresh_from_db()
    assert (schedule.next_run_at, schedule.last_outcome, schedule.last_job_id) == (at(9, 10), "SUBMITTED", job.pk)


def test_missed_fire_times_collapse_into_one_run_for_the_latest(clock, demo):
    schedule = create()
    [fire] = fire_at(clock, at(9, 47))  # 09:05 .. 09:45 were missed: one run, for 09:45
    assert fire.scheduled_for == at(9, 45)
    assert runs(schedule) == [(at(9, 45), JobState.PENDING)]
    schedule.refresh_from_db()
    assert schedule.next_run_at == at(9, 50)


def test_a_fire_later_than_the_starting_deadline_is_skipped_and_recorded(clock, demo):
    schedule = create(cron="0 9 * * *", timezone="UTC", starting_deadline_minutes=60)
    assert schedule.next_run_at == at(9, day=21)
    [fire] = fire_at(clock, at(10, 30, day=21))
    assert (fire.outcome, fire.message) == ("SKIPPED_DEADLINE", "90 min late, past starting_deadline_minutes (60)")
    assert runs(schedule) == []
    schedule.refresh_from_db()
    assert (schedule.next_run_at, schedule.last_outcome) == (at(9, day=22), "SKIPPED_DEADLINE")
    [fire] = fire_at(clock, at(9, 59, day=22))  # 59 minutes late: within the deadline
    assert fire.outcome == "SUBMITTED"


def test_forbid_skips_while_the_last_run_is_active_and_runs_once_it_ended(clock, demo, user):
    schedule = create(concurrency="forbid")
    [first] = fire_at(clock, at(9, 5))
    [skipped] = fire_at(clock, at(9, 10))
    assert (skipped.outcome, skipped.message, skipped.job_id) == (
        "SKIPPED_ACTIVE",
        f"its last run, job {first.job_id}, is still PENDING (concurrency: forbid)",
        first.job_id,
    )
    schedules.services.do_cancel_job(job=Job.objects.get(pk=first.job_id), user=user("alice"))
    [again] = fire_at(clock, at(9, 15))
    assert again.outcome == "SUBMITTED"
    assert [when for when, _ in runs(schedule)] == [at(9, 5), at(9, 15)]


def test_replace_cancels_the_active_run_and_its_group_children_then_submits(clock, demo):
    schedule = create(concurrency="replace", spec={**SPEC, "array": {"count": 3, "parallelism": 1}})
    [first] = fire_at(clock, at(9, 5))
    [second] = fire_at(clock, at(9, 10))
    assert second.outcome == "REPLACED", second.message
    old = Job.objects.get(pk=first.job_id)
    assert old.state == JobState.CANCELLED
    assert set(old.children.values_list("state", flat=True)) == {JobState.CANCELLED}
    event = old.events.filter(kind="CANCEL_REQUESTED").get()
    assert event.message == f"replaced by the run of schedule {schedule.pk} (nightly-eval) for 2026-04-20 09:10 UTC"
    assert Job.objects.get(pk=second.job_id).state == JobState.PENDING


def test_replace_keeps_the_active_run_when_the_new_one_is_refused(clock, demo):
    """The active run was cancelled before the new spec was checked: a refused spec killed it
    and started nothing."""
    schedule = create(concurrency="replace")
    [first] = fire_at(clock, at(9, 5))
    Schedule.objects.filter(pk=schedule.pk).update(
        spec={**schedule.spec, "resources": {"gpu_count": 100_000, "gpu_type": "H100"}}
    )
    [second] = fire_at(clock, at(9, 10))
    assert second.outcome == "REFUSED", second.message
    assert Job.objects.get(pk=first.job_id).state == JobState.PENDING  # still there, not cancelled


def test_allow_runs_beside_the_active_run(clock, demo):
    schedule = create(concurrency="allow")
    fire_at(clock, at(9, 5))
    fire_at(clock, at(9, 10))
    assert runs(schedule) == [(at(9, 5), "PENDING"), (at(9, 10), "PENDING")]


@pytest.mark.parametrize(
    ("leave", "why"),
    [
        (lambda alice: Membership.objects.filter(user=alice, team__name=TEAM).delete(), "no longer a member"),
        (
            lambda alice: get_user_model().objects.filter(pk=alice.pk).update(is_active=False),
            "the account is deactivated",
        ),
    ],
)
def test_an_owner_who_may_no_longer_submit_pauses_the_schedule(clock, demo, user, leave, why):
    schedule = create()
    leave(user("alice"))
    [fire] = fire_at(clock, at(9, 5))
    reason = f"paused: its owner alice may no longer submit to team {TEAM} ({why})"
    assert (fire.outcome, fire.message) == ("PAUSED", reason)
    schedule.refresh_from_db()
    assert (schedule.suspended, schedule.suspended_reason) == (True, reason)
    assert runs(schedule) == []
    assert fire_at(clock, at(9, 10)) == []  # suspended: no more fires


def test_a_team_that_gets_teams_below_it_pauses_its_schedules(clock, demo):
    """Once its team had teams below it, a schedule's every fire was refused (a division takes
    no jobs) and recorded REFUSED, fire after fire (found in review): it pauses, with why."""
    from teams.models import Team

    schedule = create()
    Team.objects.create(name="fm-inference", parent=Team.objects.get(name=TEAM))
    [fire] = fire_at(clock, at(9, 5))
    assert fire.outcome == "PAUSED"
    assert "has teams below it (fm-inference): submit to one of them" in fire.message
    schedule.refresh_from_db()
    assert schedule.suspended


def test_a_submit_the_owner_has_no_right_to_any_more_pauses_with_its_reason(clock, demo, user):
    schedule = create(username="rita", spec={**SPEC, "priority": "P0"})  # rita leads the team
    Membership.objects.filter(user=user("rita"), team__name=TEAM).update(role="member")
    [fire] = fire_at(clock, at(9, 5))
    assert fire.outcome == "PAUSED"
    assert fire.message == (
        f"paused: the submit was refused: P0 is for incidents: only leads of {TEAM} (or of a team above it) and site"
        " admins may submit at P0."
    )
    schedule.refresh_from_db()
    assert schedule.suspended


def test_run_now_twice_in_one_second_returns_the_same_run(clock, demo, user):
    schedule = create(concurrency="allow")
    first, _ = schedules.do_run_now(user=user("alice"), schedule=schedule)
    again, _ = schedules.do_run_now(user=user("alice"), schedule=schedule)
    assert (again.pk, again.job_id, again.message) == (first.pk, first.job_id, f"submitted job {first.job_id}")
    assert schedule.fires.count() == 1  # one fire time, one row
    assert runs(schedule) == [(at(9), "PENDING")]
    schedule.refresh_from_db()
    assert schedule.next_run_at == at(9, 5)  # run now leaves the cron's times alone


def test_secret_env_is_stored_encrypted_and_reaches_the_run(clock, demo):
    schedule = create(spec={**SPEC, "secret_env": {"WANDB_API_KEY": "s3cret"}})
    assert schedule.spec["secret_env"] == {"WANDB_API_KEY": "***"}
    assert "s3cret" not in schedule.secret_env_ciphertext
    [fire] = fire_at(clock, at(9, 5))
    job = Job.objects.get(pk=fire.job_id)
    assert job.spec["secret_env"] == {"WANDB_API_KEY": "***"}
    assert decrypt_env(job.secret_env_ciphertext) == {"WANDB_API_KEY": "s3cret"}


def test_the_fire_history_is_bounded(clock, demo, monkeypatch):
    monkeypatch.setattr(schedules, "HISTORY_KEPT", 3)
    schedule = create(concurrency="forbid")
    for minute in range(5, 35, 5):
        fire_at(clock, at(9, minute))
    kept = list(schedule.fires.values_list("scheduled_for", flat=True))
    assert kept == [at(9, 30), at(9, 25), at(9, 20)]


def test_the_leaders_sweep_fires_at_most_once_per_interval(clock, demo):
    schedule = create()
    sweep = ScheduleSweep(interval_s=3600)
    clock.move_to(at(9, 5))
    assert sweep.maybe_fire(now=at(9, 5)) == 1
    clock.move_to(at(9, 10))
    assert sweep.maybe_fire(now=at(9, 10)) is None  # within its interval (monotonic, frozen too)
    assert len(runs(schedule)) == 1


def test_nothing_due_is_one_query(clock, demo, django_assert_num_queries):
    create()
    with django_assert_num_queries(1):
        assert schedules.fire_due(now=at(9, 4)) == []


def test_a_suspended_schedule_resumed_does_not_fire_the_times_it_missed(clock, demo, user):
    schedule = create()
    alice = user("alice")
    changes = schedules.check_schedule_change(user=alice, schedule=schedule, data={"suspended": True, "reason": "x"})
    schedules.do_change_schedule(user=alice, schedule=schedule, changes=changes)
    assert fire_at(clock, at(10)) == []
    changes = schedules.check_schedule_change(user=alice, schedule=schedule, data={"suspended": False})
    schedule = schedules.do_change_schedule(user=alice, schedule=schedule, changes=changes)
    assert schedule.next_run_at == at(10, 5)
    assert (schedule.suspended, schedule.suspended_reason) == (False, "")


def test_an_edit_between_listing_and_claiming_wins(clock, demo, user):
    """A firer that read the schedule before an edit claims nothing: the claim names updated_at."""
    schedule = create()
    clock.move_to(at(9, 5))
    stale = Schedule.objects.get(pk=schedule.pk)
    Schedule.objects.filter(pk=schedule.pk).update(updated_at=at(9, 5) + timedelta(seconds=1))
    claimed = Schedule.objects.filter(
        pk=stale.pk, next_run_at=stale.next_run_at, updated_at=stale.updated_at, suspended=False
    ).update(next_run_at=at(9, 10))
    assert claimed == 0


def test_a_submit_failing_with_an_internal_error_is_recorded_not_retried_every_call(clock, demo, caplog):
    """A bug (here a spec broken by hand) fails the same way at every try: retrying it every
    10 s forever only filled the log. The fire is recorded as REFUSED and the schedule goes on."""
    broken = create()
    Schedule.objects.filter(pk=broken.pk).update(spec=["not", "a", "spec"])  # as a bad hand edit would
    healthy = create(spec={**SPEC, "name": "other"}, name="other")
    fires = fire_at(clock, at(9, 5))
    assert sorted(fire.schedule_id for fire in fires) == [broken.pk, healthy.pk]
    failed = next(fire for fire in fires if fire.schedule_id == broken.pk)
    assert (failed.outcome, failed.message) == (
        FireOutcome.REFUSED,
        "the fire failed with an internal error (TypeError); this fire time is not retried, "
        "the next one is tried as usual: the admins have it in the log",
    )
    assert f"schedule {broken.pk}: the fire for 2026-04-20 09:05:00+00:00 failed" in caplog.text
    broken.refresh_from_db()
    assert (broken.next_run_at, broken.suspended, Job.objects.filter(schedule=broken).count()) == (at(9, 10), False, 0)


def test_an_internal_error_cancelling_the_last_run_is_recorded_and_its_writes_undone(clock, demo, monkeypatch):
    """The error was outside the submit's savepoint: the fire was retried at every call."""
    schedule = create(concurrency="replace")
    [first] = fire_at(clock, at(9, 5))
    cancel = schedules.services.do_cancel_job

    def cancel_then_fail(**kwargs):
        cancel(**kwargs)
        raise TypeError("a bug")

    monkeypatch.setattr(schedules.services, "do_cancel_job", cancel_then_fail)
    [fire] = fire_at(clock, at(9, 10))
    assert (fire.outcome, fire.message.split(";")[0]) == (
        FireOutcome.REFUSED,
        "the fire failed with an internal error (TypeError)",
    )
    assert Job.objects.get(pk=first.job_id).state == JobState.PENDING  # the cancel was undone with the fire
    schedule.refresh_from_db()
    assert schedule.next_run_at == at(9, 15)
    assert fire_at(clock, at(9, 11)) == []


def test_a_cron_that_cannot_be_read_any_more_pauses_the_schedule(clock, demo):
    broken = create()
    Schedule.objects.filter(pk=broken.pk).update(cron="not a cron")  # as a bad hand edit would
    [fire] = fire_at(clock, at(9, 5))
    assert fire.outcome == FireOutcome.PAUSED
    broken.refresh_from_db()
    assert broken.suspended
    assert broken.suspended_reason.startswith(
        "paused: its cron 'not a cron' in time zone Europe/Berlin cannot be read ("
    )
    assert fire_at(clock, at(9, 6)) == []


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_database_error_rolls_the_fire_back_to_be_tried_again_and_the_others_go_on(
    clock, demo, caplog, monkeypatch, error
):
    broken = create()
    healthy = create(spec={**SPEC, "name": "other"}, name="other")
    submit = schedules.services.do_submit_job

    def lost_connection(**kwargs):
        if kwargs["schedule"].pk == broken.pk:
            raise error("server closed the connection unexpectedly")
        return submit(**kwargs)

    monkeypatch.setattr(schedules.services, "do_submit_job", lost_connection)
    [fire] = fire_at(clock, at(9, 5))
    assert fire.schedule_id == healthy.pk
    assert f"schedule {broken.pk}: firing failed" in caplog.text
    broken.refresh_from_db()
    assert (broken.next_run_at, broken.last_outcome) == (at(9, 5), "")  # rolled back: tried again next time
    monkeypatch.setattr(schedules.services, "do_submit_job", submit)
    [fire] = fire_at(clock, at(9, 6))
    assert (fire.schedule_id, fire.outcome) == (broken.pk, FireOutcome.SUBMITTED)


def test_creating_it_again_with_another_secret_value_is_a_conflict_not_the_same(clock, demo):
    """The stored spec masks secret values, so a rotated token sent again compared equal and was
    answered 200 with the old token kept (every run got it). Now: the same values, the same
    schedule; others, a 409 (as for jobs)."""
    user = get_user_model().objects.get(username="alice")
    create(spec={**SPEC, "secret_env": {"TOK": "OLD_TOKEN"}})

    def again(value: str):
        data = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "spec": {**SPEC, "secret_env": {"TOK": value}}}
        team, checked, spec = schedules.check_schedule_create(user=user, data=data)
        return schedules.do_create_schedule(user=user, team=team, timing=checked, spec=spec)

    assert again("OLD_TOKEN")[1] is False
    with pytest.raises(Conflict):
        again("NEW_TOKEN")


def test_a_run_the_leader_fires_and_places_in_one_pass_is_not_assigned_before_it_was_submitted(demo):
    """The pass took its clock before its sweep fired the run: assigned 50-170 ms before it was
    submitted, a negative queue wait, in 3 of 4 demo runs."""
    from django.utils import timezone

    from scheduling.leader.worker import run_pass
    from scheduling.models import SchedulerLease
    from tests.nodes import heartbeat

    with time_machine.travel(at(9, 4, day=21), tick=True) as traveller:
        schedule = create(spec={**SPEC, "resources": {"gpu_count": 1, "gpu_type": "H100"}})
        traveller.move_to(at(9, 5, day=21))
        SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now())
        heartbeat()
        run_pass(epoch=4, schedules=ScheduleSweep(interval_s=0))
        job = Job.objects.get(schedule=schedule)
        assert job.state == JobState.ASSIGNED
        assert job.tasks.get().assigned_at >= job.submitted_at


def test_a_fire_a_little_past_its_deadline_says_by_how_much_in_seconds(clock, demo):
    """QA: 75 s late read "1 min late, past starting_deadline_minutes (1)"."""
    create(cron="0 9 * * *", timezone="UTC", starting_deadline_minutes=1)
    [fire] = fire_at(clock, at(9, 1, day=21) + timedelta(seconds=15))
    assert (fire.outcome, fire.message) == ("SKIPPED_DEADLINE", "1 min 15 s late, past starting_deadline_minutes (1)")


def test_a_run_now_is_audited_when_it_was_pressed_not_at_its_fire_time(clock, demo):
    """QA: its audit entry carried the fire time, in whole seconds, and listed before a change
    made just before it."""
    schedule = create()
    user = get_user_model().objects.get(username="alice")
    pressed = at(9, 30) + timedelta(microseconds=530_545)
    fire, _ = schedules.do_run_now(user=user, schedule=schedule, now=pressed)
    assert fire.scheduled_for == at(9, 30)
    ran = AuditEvent.objects.filter(kind="SCHEDULE", message__contains="now, as its owner").get()
    assert ran.created_at == pressed
