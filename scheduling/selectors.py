"""Reads about jobs, scoped to what a user may see, and who may change a job; the scheduler's
lease as the web shows it."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Case, DurationField, ExpressionWrapper, F, Func, Q, QuerySet, When
from django.db.models.functions import Now

from scheduling.models import Job, SchedulerLease
from teams.selectors import can_edit_quotas, is_site_admin, may_name_owner, team_and_below_ids, team_ids_of

LEASE_FIELDS = (
    "epoch",
    "holder",
    "renewed_at",
    "lease_seconds",
    "last_pass_ms",
    "last_pass_at",
    "forecast_at",
    "forecast_ms",
)
# A forecast is stale once older than this many forecast intervals plus twice its own duration.
# Twice: the next forecast starts about when one is written and is written one duration later,
# so a forecast the leader keeps refreshing grows up to about twice its duration old.
STALE_INTERVALS = 5
NO_VISIBLE_TEAM = "no team named {name!r} whose jobs you may see."
NO_SUCH_OWNER = "no user named {name!r}."
ME = "me"  # as an owner: the caller


def visible_jobs(user) -> QuerySet[Job]:
    """Admins see every job; everyone else the jobs of their teams (and teams below them)."""
    jobs = Job.objects.select_related("team", "owner")
    if is_site_admin(user):
        return jobs
    return jobs.filter(team_id__in=team_ids_of(user))


def owner_filter_refusal(user, name: str) -> str | None:
    """Why `user` may not filter jobs by owner `name` (a typo listed nothing, and a bulk cancel
    by it cancelled nothing, both answered 200): not "me", and no user it may name (a former
    member owning jobs it sees still counts). None: it may."""
    if name == ME or may_name_owner(user, name, visible_jobs(user).filter(owner__username=name)):
        return None
    return NO_SUCH_OWNER.format(name=name)


def visible_team_ids(user, name: str) -> set[int]:
    """Team `name` and the teams below it whose jobs `user` may see (none: no such team, or
    none of its jobs are the user's to see; the answer does not tell which)."""
    ids = team_and_below_ids(name)
    return ids if is_site_admin(user) else ids & team_ids_of(user)


def can_change_job(user, job: Job) -> bool:
    """Cancel (and any other change): the job's owner, leads of its team or of a team above it,
    and site admins. Seeing a job (any member of its team or division) is not enough: a
    teammate's training run is not theirs to stop."""
    if not user.is_authenticated:
        return False
    return job.owner_id == user.pk or can_edit_quotas(user, job.team)


@dataclass(frozen=True)
class LeaseState:
    """The scheduler's lease row. `alive`: renewed within its holder's own lease duration, by the
    database's clock; `leader` is the holder only then (otherwise no one leads and no passes run)."""

    epoch: int = 0
    holder: str = ""
    alive: bool = False
    renewed_at: datetime | None = None
    lease_seconds: float | None = None
    last_pass_ms: float | None = None
    last_pass_at: datetime | None = None
    forecast_at: datetime | None = None  # when the snapshot the stored starts come from was taken
    forecast_ms: float | None = None
    forecast_age: timedelta | None = None  # by the database's clock

    @property
    def leader(self) -> str | None:
        return self.holder if self.alive else None

    @property
    def forecast_age_s(self) -> float | None:
        return None if self.forecast_age is None else max(0.0, self.forecast_age.total_seconds())

    @property
    def forecast_stale_after_s(self) -> float:
        return STALE_INTERVALS * settings.MLQ_FORECAST_INTERVAL_S + 2 * (self.forecast_ms or 0.0) / 1000

    @property
    def forecast_stale(self) -> bool:
        """The stored starts are older than a leader that keeps forecasting leaves them: no
        leader, a forecast that fails, or one far slower than the last."""
        age = self.forecast_age_s
        return age is not None and age > self.forecast_stale_after_s


class Seconds(Func):
    """An interval of this many seconds, from a number column."""

    template = "make_interval(secs => %(expressions)s)"
    output_field = DurationField()

    def as_sqlite(self, compiler, connection, **extra_context):
        # Django keeps durations on SQLite as integer microseconds.
        return self.as_sql(compiler, connection, template="CAST(%(expressions)s * 1000000 AS INTEGER)", **extra_context)


def scheduler_state() -> LeaseState:
    """One query. The database decides "alive" on its own clock, the one the leader renews
    `renewed_at` with, by the duration the leader wrote: the web host's clock plays no part.
    A lease never renewed, or without a duration, is not alive. The forecast's age is the
    database's clock too."""
    live = Q(renewed_at__gt=Now() - Seconds("lease_seconds"))
    row = (
        SchedulerLease.objects.filter(pk=1)
        .annotate(
            alive=Case(When(live, then=True), default=False),
            forecast_age=ExpressionWrapper(Now() - F("forecast_at"), output_field=DurationField()),
        )
        .values("alive", "forecast_age", *LEASE_FIELDS)
        .first()
    )
    return LeaseState(**row) if row else LeaseState()
