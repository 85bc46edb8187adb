"""Reads about jobs, scoped to what a user may see, and who may change a job; the scheduler's
lease as the web shows it."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, DurationField, Func, Q, QuerySet, When
from django.db.models.functions import Now

from scheduling.models import Job, SchedulerLease
from teams.selectors import can_edit_quotas, is_site_admin, team_ids_of

LEASE_FIELDS = ("epoch", "holder", "renewed_at", "lease_seconds", "last_pass_ms", "last_pass_at")


def visible_jobs(user) -> QuerySet[Job]:
    """Admins see every job; everyone else the jobs of their teams (and teams below them)."""
    jobs = Job.objects.select_related("team", "owner")
    if is_site_admin(user):
        return jobs
    return jobs.filter(team_id__in=team_ids_of(user))


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

    @property
    def leader(self) -> str | None:
        return self.holder if self.alive else None


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
    A lease never renewed, or without a duration, is not alive."""
    live = Q(renewed_at__gt=Now() - Seconds("lease_seconds"))
    row = (
        SchedulerLease.objects.filter(pk=1)
        .annotate(alive=Case(When(live, then=True), default=False))
        .values("alive", *LEASE_FIELDS)
        .first()
    )
    return LeaseState(**row) if row else LeaseState()
