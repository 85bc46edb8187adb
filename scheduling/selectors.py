"""Reads about jobs, scoped to what a user may see, and who may change a job."""
from django.db.models import QuerySet

from scheduling.models import Job
from teams.selectors import can_edit_quotas, is_site_admin, team_ids_of


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
