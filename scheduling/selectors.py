"""Reads about jobs, scoped to what a user may see."""
from django.db.models import QuerySet

from scheduling.models import Job
from teams.selectors import is_site_admin, team_ids_of


def visible_jobs(user) -> QuerySet[Job]:
    """Admins see every job; everyone else the jobs of their teams (and teams below them)."""
    jobs = Job.objects.select_related("team", "owner")
    if is_site_admin(user):
        return jobs
    return jobs.filter(team_id__in=team_ids_of(user))
