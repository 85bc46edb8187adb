"""Writes about jobs: submit and cancel. `check_*` validates, `do_*` writes (and records why)."""

from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables
from rest_framework.exceptions import PermissionDenied, ValidationError

from mlqueue.compiled import CompiledRead
from mlqueue.errors import Conflict, FieldPermissionDenied
from scheduling import cancelling, groups, notify
from scheduling.core.feasibility import can_ever_run
from scheduling.core.model import JobShape, Topology
from scheduling.inventory import inventory
from scheduling.models import GroupKind, Job, JobDependency, Task, TaskState
from scheduling.pipeline_spec import normalized_step
from scheduling.secrets import encrypt_env, env_macs, masked
from scheduling.selectors import can_change_job, visible_jobs
from scheduling.spec import JobSpecSerializer, dependency_edges, job_columns, normalized, spec_digest
from teams.models import AuditEvent, EventKind, Membership, Team
from teams.selectors import can_edit_quotas, descendant_ids, is_member

UNKNOWN_TEAM = "no team named {name!r}."
NOT_A_MEMBER = "you are not a member of team {name}."
P0_RESERVED = "P0 is for incidents: only leads of {name} (or of a team above it) and site admins may submit at P0."
A_DIVISION = (
    "team {name} has teams below it ({children}): submit to one of them. Quotas are guaranteed to the "
    "teams; a job of the division itself would use its teams' guarantees with nothing to reclaim them."
)
UNKNOWN_DEPENDENCY = "job {id} does not exist or is not visible to you."
SPEC_CONFLICT = (
    "team {team} already has job {job_id} with client_job_id {client_job_id!r} and a different spec; "
    "use a new client_job_id to submit a different job."
)
ALREADY_ENDED = "job {job_id} already ended {state}; there is nothing to cancel."
NOT_YOURS_TO_CANCEL = (
    "only the job's owner ({owner}), leads of {team} (or of a team above it) and site admins may {verb} job {job_id}."
)


# A crash report (DEBUG's page, a mail to ADMINS) lists each frame's variables: not these.
@sensitive_variables("data", "spec", "serializer")
def check_job_submission(*, user, data) -> tuple[Team, dict]:
    """Validate a submitted spec for `user`: fields, team, rights, dependencies and whether an
    empty cluster could ever hold it. Returns the team and the normalized spec, whose
    secret_env still holds the values in the clear: pass it to do_submit_job, never show it."""
    return SubmitChecks(user).check_submission(data)


@sensitive_variables("data", "spec", "serializer")
def check_job_spec(*, user, data) -> tuple[Team, dict]:
    """check_job_submission but for whether the cluster could ever hold the job: the dry run
    answers that as data rather than as a 400."""
    return SubmitChecks(user).check_spec(data)


class SubmitChecks:
    """The checks of a submit, for one user. Checking several specs (a batch) with one of these
    reads each team, the caller's rights in it and the fleet once, not once per spec.
    `visible_ids`: the jobs the specs depend on that the caller may see, where read already."""

    def __init__(self, user, *, visible_ids: set[int] | None = None):
        self.user = user
        self.visible_ids = visible_ids
        self._teams: dict[str, Team | Exception] = {}
        self._p0: dict[int, bool] = {}
        self._inventory = None
        self._verdicts: dict[tuple, object] = {}

    @sensitive_variables("data", "spec")
    def check_submission(self, data) -> tuple[Team, dict]:
        team, spec = self.check_spec(data)
        self.check_fits(spec)
        return team, spec

    @sensitive_variables("data", "spec")
    def check_spec(self, data) -> tuple[Team, dict]:
        spec = self.spec_of(data)
        return self.check_rights(spec, given=data), spec

    @sensitive_variables("data", "serializer")
    def spec_of(self, data) -> dict:
        """The spec's fields, normalized (a 400 naming the field)."""
        serializer = JobSpecSerializer(data=data, context={"user": self.user})
        serializer.is_valid(raise_exception=True)
        return normalized(serializer.validated_data)

    @sensitive_variables("spec", "given")
    def check_rights(self, spec: dict, *, given=None) -> Team:
        """The team exists and the caller may submit to it at this priority, and may see every
        job the spec depends on. `given`: the spec as written, whose `depends_on` entries an
        error names (the spec's are sorted by job id)."""
        team = self.team(spec["team"])
        if spec["priority"] == "P0" and not self._may_submit_p0(team):
            raise FieldPermissionDenied("priority", P0_RESERVED.format(name=team.name))
        for index, step in enumerate(spec.get("pipeline", {}).get("steps", ())):  # a step runs at its own
            if step.get("priority") == "P0" and not self._may_submit_p0(team):
                raise FieldPermissionDenied(f"pipeline.steps[{index}].priority", P0_RESERVED.format(name=team.name))
        written = given.get("depends_on") if isinstance(given, dict) else None
        _check_dependencies(self.user, spec["depends_on"], visible_ids=self.visible_ids, written=written)
        return team

    @sensitive_variables("spec")
    def check_fits(self, spec: dict) -> None:
        """Whether an empty cluster could ever hold it; a pipeline's each step (the parent runs nothing)."""
        if spec.get("pipeline") is None:
            self._check_can_ever_run(spec, prefix="")
        for index, step in enumerate(spec.get("pipeline", {}).get("steps", ())):
            self._check_can_ever_run(normalized_step(spec, step), prefix=f"pipeline.steps[{index}].")

    def team(self, name: str) -> Team:
        """The team named, if the caller may submit to it (read once per name)."""
        if name not in self._teams:
            try:
                self._teams[name] = _check_team(self.user, name)
            except (ValidationError, FieldPermissionDenied) as refused:
                self._teams[name] = refused
        found = self._teams[name]
        if isinstance(found, Exception):
            raise found
        return found

    def _may_submit_p0(self, team: Team) -> bool:
        if team.pk not in self._p0:
            self._p0[team.pk] = can_edit_quotas(self.user, team)
        return self._p0[team.pk]

    def _check_can_ever_run(self, spec: dict, *, prefix: str) -> None:
        """Alike shapes get the same verdict: it is worked out once per shape."""
        shape = job_shape(spec)
        key = (shape.key(), shape.tasks)
        if key not in self._verdicts:
            if self._inventory is None:
                self._inventory = inventory()
            self._verdicts[key] = can_ever_run(shape, self._inventory)
        verdict = self._verdicts[key]
        if not verdict.ok:
            raise ValidationError({f"{prefix}{verdict.field}": [verdict.message]})


TEAM_FIELDS = tuple(field.attname for field in Team._meta.concrete_fields)
# The team's row, and whether teams sit below it (one statement: a submit reads it every time).
TEAM_NAMED = CompiledRead(
    lambda name: (
        Team.objects.filter(name=name)
        .annotate(has_children=Exists(Team.objects.filter(parent_id=OuterRef("pk"))))
        .order_by()
        .values_list(*TEAM_FIELDS, "has_children")
    ),
    name=str,
)
JOB_WITH_CLIENT_ID = CompiledRead(
    lambda team_id, cid: Job.objects.filter(team_id=team_id, client_job_id=cid).values_list("pk")[:1],
    team_id=int,
    cid=str,
)


def _check_team(user, name: str) -> Team:
    found = TEAM_NAMED.rows(name=name)
    team = Team.from_db(DEFAULT_DB_ALIAS, TEAM_FIELDS, found[0][:-1]) if found else None
    if team is None:
        raise ValidationError({"team": [UNKNOWN_TEAM.format(name=name)]})
    division = bool(found[0][-1])
    # A member of one of a division's teams is told where to submit, as its members are (QA: a
    # 403, 'not a member of team research', where the README promises the 400 naming its teams).
    if not is_member(user, team) and not (division and _member_below(user, team)):
        raise FieldPermissionDenied("team", NOT_A_MEMBER.format(name=name))
    if division:  # its teams hold the quotas (Kueue queues jobs on leaf queues only)
        children = ", ".join(Team.objects.filter(parent=team).order_by("name").values_list("name", flat=True)[:5])
        raise ValidationError({"team": [A_DIVISION.format(name=name, children=children)]})
    return team


def _member_below(user, division: Team) -> bool:
    """A member of a team below `division` (asked only of a refused submit)."""
    return Membership.objects.filter(user=user, team_id__in=descendant_ids({division.pk})).exists()


def visible_dependency_ids(user, specs: list[dict]) -> set[int]:
    """Which of the jobs these specs depend on `user` may see, in one query."""
    job_ids = {job_id for spec in specs for job_id, _ in dependency_edges(spec.get("depends_on") or [])}
    if not job_ids:
        return set()
    return set(visible_jobs(user).filter(pk__in=job_ids).values_list("pk", flat=True))


def _check_dependencies(user, depends_on: list, *, visible_ids: set[int] | None = None, written=None) -> None:
    """Every job depended on exists and is visible to `user`; the error names the entry
    (`depends_on.1.job`): the first such of `written`, the entries as the spec wrote them, where
    given (QA: `[99999, 27]` was refused as `depends_on.1`, its place once sorted). A new job
    cannot close a cycle: nothing depends on it yet."""
    if not depends_on:  # most submits: no need to read which teams' jobs the user may see
        return
    found = visible_ids if visible_ids is not None else visible_dependency_ids(user, [{"depends_on": depends_on}])
    entries = written if isinstance(written, list) else depends_on
    for index, entry in enumerate(entries):
        job_id = entry.get("job") if isinstance(entry, dict) else entry
        if job_id not in found:
            message = [UNKNOWN_DEPENDENCY.format(id=job_id)]
            raise ValidationError({"depends_on": {index: {"job": message} if isinstance(entry, dict) else message}})


def job_shape(spec: dict) -> JobShape:
    res = spec["resources"]
    return JobShape(
        gpu_type=res["gpu_type"] or None,
        tasks=res["tasks"],
        gpus_per_task=res["gpus_per_task"],
        cpus_per_task=res["cpu_per_rank"],
        memory_gb_per_task=res["memory_per_rank_gb"],
        node_selector=spec["node_selector"],
        topology=Topology(spec["topology_hint"]),
        scratch_disk_gb=res["scratch_disk_gb"],
        image=bool(spec.get("image")),
    )


@sensitive_variables("spec", "secret_values")
def do_submit_job(*, user, team: Team, spec: dict, schedule=None, scheduled_for=None) -> tuple[Job, bool]:
    """Create the job, its tasks and its first event in one transaction. Idempotent on
    (team, client_job_id): the same spec again returns the first job (created=False); a
    different spec under the same id raises Conflict. `spec` is check_job_submission's, with
    the secret values in the clear: they are encrypted here and the stored spec keeps "***".
    `schedule`, `scheduled_for`: the schedule and fire time this job is the run of."""
    secret_values = spec.get("secret_env") or {}
    spec, digests = _as_stored(spec)
    if spec["client_job_id"]:
        existing = _existing_job(team, spec["client_job_id"])
        if existing is not None:
            return _same_job_or_conflict(existing, digests), False
    try:
        with transaction.atomic():
            job = _create_job(
                user=user,
                team=team,
                spec=spec,
                digest=digests[0],
                secret_env_ciphertext=encrypt_env(secret_values),
                run_of={"schedule": schedule, "scheduled_for": scheduled_for},
            )
            notify.wake_scheduler("submit")
            notify.jobs_changed([job.pk], team_id=team.pk)
    except IntegrityError:
        # Lost a race with an identical submit: the unique (team, client_job_id) decided.
        existing = _existing_job(team, spec["client_job_id"])
        if existing is None:
            raise
        return _same_job_or_conflict(existing, digests), False
    return job, True


def check_resubmit(*, team: Team, spec: dict) -> Job | None:
    """The job a submit of `spec` would answer instead of creating one (its client_job_id names
    a job of the team with the same spec: a 200), or None (a 201). A job of another spec under
    that id raises Conflict, the submit's 409. Reads only: the dry run asks it."""
    if not spec["client_job_id"]:
        return None
    existing = _existing_job(team, spec["client_job_id"])
    if existing is None:
        return None
    return _same_job_or_conflict(existing, _as_stored(spec)[1])


@sensitive_variables("spec", "secret_values")
def _as_stored(spec: dict) -> tuple[dict, list[str]]:
    """The spec as stored (its secret values as "***") and its digests, one per secret key,
    current first: a resubmit still matches after a key rotation."""
    secret_values = spec.get("secret_env") or {}
    stored = {**spec, "secret_env": masked(secret_values)}
    return stored, [spec_digest(stored, mac) for mac in env_macs(secret_values)]


def _existing_job(team: Team, client_job_id: str) -> Job | None:
    """The team's job with this client_job_id, if any. Most submits find none: the question
    reads one column (a whole job row is 50 columns to compile and decode, 2 ms of CPU), and
    only a repeated id reads the job (None if it went in between, as if never found)."""
    found = JOB_WITH_CLIENT_ID.rows(team_id=team.pk, cid=client_job_id)
    return Job.objects.select_related("team").filter(pk=found[0][0]).first() if found else None


def _same_job_or_conflict(existing: Job, digests: list[str]) -> Job:
    if existing.spec_digest not in digests:
        raise Conflict(
            SPEC_CONFLICT.format(team=existing.team.name, job_id=existing.pk, client_job_id=existing.client_job_id)
        )
    return existing


def _create_job(*, user, team: Team, spec: dict, digest: str, secret_env_ciphertext: str, run_of: dict) -> Job:
    now = timezone.now()
    job = new_job_row(
        user=user, team=team, spec=spec, digest=digest, secret_env_ciphertext=secret_env_ciphertext, now=now
    )
    for name, value in run_of.items():
        setattr(job, name, value)
    job.save(force_insert=True)
    if job.group_kind:
        children = len(groups.do_create_group(parent=job, spec=spec, columns=job_columns(spec), now=now))
    else:
        children = None
        keep_as_prefetched(job, Task.objects.bulk_create(new_task_rows(job, now)), spec)
    JobDependency.objects.bulk_create(new_dependency_rows(job, spec))
    submitted_event(job, user=user, team=team, spec=spec, children=children).save(force_insert=True)
    return job


def new_job_row(*, user, team: Team, spec: dict, digest: str, secret_env_ciphertext: str, now) -> Job:
    """The job a checked spec makes, not yet saved (a submit saves it, a batch inserts many)."""
    kind = groups.group_kind(spec)
    return Job(
        team=team,
        owner=user,
        spec=spec,
        spec_digest=digest,
        submitted_at=now,
        queued_at=now,
        updated_at=now,
        secret_env_ciphertext=secret_env_ciphertext,
        group_kind=kind,
        group=groups.group_settings(spec) if kind else {},
        **job_columns(spec),
    )


def keep_as_prefetched(job: Job, tasks: list[Task], spec: dict) -> None:
    """A new job's tasks (and its dependencies, when it has none) kept on it as a prefetch would
    have loaded them: the submit's answer (JobDetailSerializer) then reads nothing back."""
    job._prefetched_objects_cache = {"tasks": tasks, **({} if spec["depends_on"] else {"depends_on": []})}


def new_task_rows(job: Job, now) -> list[Task]:
    return [Task(job=job, rank=rank, updated_at=now) for rank in range(job.task_count)]


def new_dependency_rows(job: Job, spec: dict) -> list[JobDependency]:
    return [
        JobDependency(from_job=job, to_job_id=dep, condition=on) for dep, on in dependency_edges(spec["depends_on"])
    ]


def submitted_event(job: Job, *, user, team: Team, spec: dict, children: int | None) -> AuditEvent:
    """The job's SUBMITTED event, not yet saved. `children`: a group's count of children."""
    what = f"{job_shape(spec).describe()}, priority {job.priority}"
    data = {"client_job_id": job.client_job_id, "tasks": job.task_count}
    if job.schedule_id:
        what += f", the run of schedule {job.schedule_id} for {job.scheduled_for:%Y-%m-%d %H:%M} UTC"
        data["schedule_id"] = job.schedule_id
    if children is not None:
        what = _group_description(job, children, what)
        data["children"] = children
    return AuditEvent(
        job=job,
        kind=EventKind.SUBMITTED,
        actor=user,
        actor_name=user.get_username(),
        to_state=TaskState.PENDING,
        message=f"submitted by {user.get_username()} to {team.name}: {what}",
        data=data,
        created_at=job.submitted_at,
    )


def _group_description(job: Job, children: int, each: str) -> str:
    if job.group_kind == GroupKind.PIPELINE:
        steps = "step" if children == 1 else "steps"
        return f"pipeline of {children} {steps} ({', '.join(s['name'] for s in job.group['steps'])})"
    return f"{job.group_kind} of {children} (at most {job.group['parallelism']} at once), each {each}"


def check_may_cancel(*, user, job: Job, verb: str = "cancel") -> None:
    """Who may cancel a job may change it too (`verb` says which the refusal names)."""
    if not can_change_job(user, job):
        raise PermissionDenied(
            NOT_YOURS_TO_CANCEL.format(owner=job.owner.get_username(), team=job.team.name, job_id=job.pk, verb=verb)
        )


def do_cancel_job(*, job: Job, user, reason: str = "") -> Job:
    """Cancel what has not started at once; ask the scheduler to stop what runs (its agents
    kill the processes, then the tasks end CANCELLED). Only who can_change_job may. A group's
    parent cancels every child not finished."""
    check_may_cancel(user=user, job=job)
    if job.state == TaskState.CANCELLED:
        return job
    # FAILED without a failure class is an attempt awaiting its retry: it may still be cancelled.
    if (
        job.state == TaskState.SUCCEEDED
        or job.state == TaskState.SKIPPED
        or job.state in (TaskState.FAILED, TaskState.EARLY_STOPPED)
        and job.failure_class
    ):
        raise Conflict(ALREADY_ENDED.format(job_id=job.pk, state=job.state))
    why = reason or f"cancelled by {user.get_username()}"
    if job.group_kind:
        groups.do_cancel_group(parent=job, actor=user, actor_name=user.get_username(), why=why)
    else:
        cancelling.do_cancel(job.pk, actor=user, actor_name=user.get_username(), why=why)
    job.refresh_from_db()
    return job
