"""Submit many jobs in one request: `POST /api/v1/jobs/batch` with `{"jobs": [spec, ...]}`.

- **Checks** (`check_job_batch`): every spec as a single submit checks it (fields, team,
  rights, priority, dependencies, whether the cluster could ever hold it). All or nothing: one
  bad spec refuses the batch (400, or 403 for a right the caller lacks) and the answer names
  the index and field of every bad spec (`jobs[3].resources.gpu_count`); nothing is written.
- **Writes** (`do_submit_job_batch`): per spec, the single submit's idempotency on
  (team, client_job_id): 201 new, 200 the same spec again (earlier or earlier in this batch),
  409 the same id with another spec; a 409 does not hold back the others. The new jobs, their
  tasks, dependencies and SUBMITTED events go in one transaction with one INSERT per table, and
  the scheduler is woken once. A group (array, sweep, pipeline) in a batch creates its children
  as a single submit does (a few statements more for each group).
- **Races**: a concurrent submit of the same id makes the batch's INSERT fail on the unique
  (team, client_job_id), once that submit has committed; the whole transaction rolls back and
  the batch is written again, finding that job. Each such retry finds at least one more of the
  batch's ids taken, so there are at most as many as the batch has ids, and each id still ends
  as exactly one job.
"""

from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables
from rest_framework import status
from rest_framework.exceptions import ValidationError

from mlqueue.errors import FieldPermissionDenied
from scheduling import groups, notify
from scheduling.models import Job, JobDependency, Task
from scheduling.secrets import encrypt_env, env_macs, masked
from scheduling.services import (
    SPEC_CONFLICT,
    SubmitChecks,
    keep_as_prefetched,
    new_dependency_rows,
    new_job_row,
    new_task_rows,
    submitted_event,
    visible_dependency_ids,
)
from scheduling.spec import job_columns, spec_digest
from teams.models import AuditEvent, Team

NOT_AN_OBJECT = 'expected an object {"jobs": [spec, ...]}.'
UNKNOWN_BATCH_FIELD = 'unknown field: a batch is {"jobs": [spec, ...]}.'
JOBS_NOT_A_LIST = "expected a list of job specs."
JOBS_EMPTY = "give at least one job spec."
TOO_MANY_JOBS = "at most {limit} jobs in one batch, got {count}: send the rest in another batch."
TOO_MANY_MADE = (
    "a batch makes at most {limit} jobs, the children of its arrays, sweeps and pipelines included;"
    " these specs make {count}: send them in several batches."
)
NO_SCHEDULES = "a batch submits jobs: create a schedule with POST /api/v1/jobs, one at a time."


def batch_limit() -> int:
    return settings.MLQ_SUBMIT_BATCH_MAX


def batch_specs(data) -> list:
    """The batch's list of specs, or a 400 naming `jobs` (or the body)."""
    if not isinstance(data, dict):
        raise ValidationError({"body": [NOT_AN_OBJECT]})
    unknown = sorted(map(str, set(data) - {"jobs"}))
    if unknown:
        raise ValidationError({name: [UNKNOWN_BATCH_FIELD] for name in unknown})
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise ValidationError({"jobs": [JOBS_NOT_A_LIST]})
    if not jobs:
        raise ValidationError({"jobs": [JOBS_EMPTY]})
    if len(jobs) > batch_limit():
        raise ValidationError({"jobs": [TOO_MANY_JOBS.format(limit=batch_limit(), count=len(jobs))]})
    return jobs


@sensitive_variables("data", "item", "specs", "spec", "checked")
def check_job_batch(*, user, data) -> list[tuple[Team, dict]]:
    """Each spec checked as check_job_submission checks one, in order. Raises a ValidationError
    naming `jobs[i].field` for every bad spec; else a FieldPermissionDenied for each spec whose
    team or priority the caller may not use. The specs hold their secret values in the clear."""
    checks, specs, errors, denied = SubmitChecks(user), {}, {}, {}
    items = batch_specs(data)
    for index, item in enumerate(items):
        if isinstance(item, dict) and item.get("schedule") is not None:
            errors[f"jobs[{index}]"] = {"schedule": [NO_SCHEDULES]}
            continue
        try:
            specs[index] = checks.spec_of(item)
        except ValidationError as refused:
            errors[f"jobs[{index}]"] = refused.detail
    checks.visible_ids = visible_dependency_ids(user, list(specs.values()))
    checked = []
    for index, spec in specs.items():
        try:
            team = checks.check_rights(spec, given=items[index])
            checks.check_fits(spec)
        except ValidationError as refused:
            errors[f"jobs[{index}]"] = refused.detail
        except FieldPermissionDenied as refused:
            denied[f"jobs[{index}].{refused.field}"] = [str(refused.detail)]
        else:
            checked.append((team, spec))
    if errors:
        raise ValidationError(errors)
    if denied:
        first = next(iter(denied))
        raise FieldPermissionDenied(first, denied[first][0], also=denied)
    made = sum(groups.jobs_made(spec) for _, spec in checked)
    if made > made_limit():  # one transaction: 5 arrays of 10,000 took 96 s and held the pass up
        raise ValidationError({"jobs": [TOO_MANY_MADE.format(limit=made_limit(), count=made)]})
    return checked


def made_limit() -> int:
    """The jobs one batch may make: its specs, and one group of the largest size."""
    return batch_limit() + settings.MLQ_MAX_GROUP_SIZE


@dataclass
class Prepared:
    """One checked spec ready to write: the stored spec masks its secrets."""

    user: object  # who submits it
    team: Team
    spec: dict
    digests: list[str]  # current secret key's first: see do_submit_job
    ciphertext: str

    @property
    def key(self) -> tuple[int, str] | None:
        cid = self.spec["client_job_id"]
        return (self.team.pk, cid) if cid else None


@dataclass
class Outcome:
    """What became of one spec of the batch: 201 created, 200 the same job again, 409 another spec."""

    status: int
    job_id: int
    team: str
    client_job_id: str | None
    name: str
    state: str
    detail: str = ""
    job: Job | None = field(default=None, repr=False, compare=False)  # a created job, its tasks with it

    def as_json(self, index: int) -> dict:
        found = {"index": index, "status": self.status, "id": self.job_id, "client_job_id": self.client_job_id}
        if self.status == status.HTTP_409_CONFLICT:
            return {**found, "detail": self.detail}
        return {**found, "name": self.name, "team": self.team, "state": self.state}


@sensitive_variables("checked")
def do_submit_job_batch(*, user, checked: list[tuple[Team, dict]]) -> list[Outcome]:
    """Write the batch (check_job_batch's), an Outcome per spec in the same order."""
    return do_submit_jobs([(user, team, spec) for team, spec in checked])


@sensitive_variables("checked", "spec", "secret_values")
def do_submit_jobs(checked: list[tuple[object, Team, dict]]) -> list[Outcome]:
    """Write checked specs, each (user, team, spec) with its own submitter, in one transaction:
    an Outcome per spec in the same order. A batch is one user's; the submit lane's groups
    (scheduling/web/grouped_submits.py) are single submits of whoever sent them."""
    prepared = []
    for user, team, spec in checked:
        secret_values = spec.get("secret_env") or {}
        stored = {**spec, "secret_env": masked(secret_values)}
        digests = [spec_digest(stored, mac) for mac in env_macs(secret_values)]
        prepared.append(Prepared(user, team, stored, digests, encrypt_env(secret_values)))
    attempts = 1 + len({item.key for item in prepared if item.key})
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return _write_batch(prepared)
        except IntegrityError:
            # Lost a race with a submit of one of these ids: write again, finding its job.
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _write_batch(prepared: list[Prepared]) -> list[Outcome]:
    existing = _existing_jobs(prepared)
    outcomes: list[Outcome | None] = [None] * len(prepared)
    first_of: dict[tuple, int] = {}  # a client_job_id's first spec in this batch, when new
    new = []
    for index, item in enumerate(prepared):
        if item.key in existing:
            outcomes[index] = _same_or_conflict(item, existing[item.key])
        elif item.key in first_of:
            continue  # answered once its first spec's job exists
        else:
            new.append(index)
            if item.key:
                first_of[item.key] = index
    jobs = _create_jobs([prepared[index] for index in new])
    created = dict(zip(new, jobs, strict=True))
    for index, job in created.items():
        outcomes[index] = _outcome(status.HTTP_201_CREATED, job, prepared[index].team)
    for index, item in enumerate(prepared):
        if outcomes[index] is None:
            first = created[first_of[item.key]]
            outcomes[index] = _same_or_conflict(item, _Row.of(first, item.team))
    return outcomes


@dataclass
class _Row:
    """What the batch needs of a job that has the id already."""

    pk: int
    team: Team
    client_job_id: str
    name: str
    state: str
    spec_digest: str

    @classmethod
    def of(cls, job: Job, team: Team) -> "_Row":
        return cls(job.pk, team, job.client_job_id, job.name, job.state, job.spec_digest)


def _existing_jobs(prepared: list[Prepared]) -> dict[tuple, _Row]:
    """The jobs that have the batch's (team, client_job_id)s already, in one query."""
    keys = {item.key for item in prepared if item.key}
    if not keys:
        return {}
    teams = {item.team.pk: item.team for item in prepared}
    rows = Job.objects.filter(
        team_id__in={team_id for team_id, _ in keys}, client_job_id__in={cid for _, cid in keys}
    ).values_list("pk", "team_id", "client_job_id", "name", "state", "spec_digest")
    return {
        (team_id, cid): _Row(pk, teams[team_id], cid, name, state, digest)
        for pk, team_id, cid, name, state, digest in rows
        if (team_id, cid) in keys
    }


def _same_or_conflict(item: Prepared, row: _Row) -> Outcome:
    if row.spec_digest in item.digests:
        return Outcome(status.HTTP_200_OK, row.pk, row.team.name, row.client_job_id, row.name, row.state)
    detail = SPEC_CONFLICT.format(team=row.team.name, job_id=row.pk, client_job_id=row.client_job_id)
    return Outcome(status.HTTP_409_CONFLICT, row.pk, row.team.name, row.client_job_id, row.name, row.state, detail)


def _outcome(code: int, job: Job, team: Team) -> Outcome:
    return Outcome(code, job.pk, team.name, job.client_job_id, job.name, job.state, job=job)


def _create_jobs(prepared: list[Prepared]) -> list[Job]:
    """The new jobs with their tasks (or a group's children), dependencies and SUBMITTED events:
    one INSERT per table for plain jobs. Wakes the scheduler and the live views after commit.
    A plain job keeps its tasks as a prefetch would have loaded them, as a single submit's does:
    its answer reads nothing back."""
    if not prepared:
        return []
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        [
            new_job_row(
                user=p.user, team=p.team, spec=p.spec, digest=p.digests[0], secret_env_ciphertext=p.ciphertext, now=now
            )
            for p in prepared
        ]
    )
    children = {
        job.pk: len(groups.do_create_group(parent=job, spec=p.spec, columns=job_columns(p.spec), now=now))
        for job, p in zip(jobs, prepared, strict=True)
        if job.group_kind
    }
    tasks = {job.pk: new_task_rows(job, now) for job in jobs if not job.group_kind}
    Task.objects.bulk_create([task for rows in tasks.values() for task in rows])
    for job, p in zip(jobs, prepared, strict=True):
        if not job.group_kind:
            keep_as_prefetched(job, tasks[job.pk], p.spec)
    JobDependency.objects.bulk_create(
        [row for job, p in zip(jobs, prepared, strict=True) for row in new_dependency_rows(job, p.spec)]
    )
    AuditEvent.objects.bulk_create(
        [
            submitted_event(job, user=p.user, team=p.team, spec=p.spec, children=children.get(job.pk))
            for job, p in zip(jobs, prepared, strict=True)
        ]
    )
    notify.wake_scheduler("submit")
    by_team: dict[int, list[int]] = {}
    for job in jobs:
        by_team.setdefault(job.team_id, []).append(job.pk)
    for team_id, job_ids in by_team.items():
        notify.jobs_changed(job_ids, team_id=team_id)
    return jobs
