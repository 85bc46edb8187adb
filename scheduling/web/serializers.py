"""How jobs, tasks and events look in the API (output only; input is spec.JobSpecSerializer)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mlqueue.serializer_fields import ChoiceField, FieldsBuiltOnce, NoUnknownFields
from scheduling.group_state import waiting_reasons
from scheduling.groups import summary
from scheduling.models import Job, JobDependency, JobState, Task
from scheduling.secrets import masked_spec
from scheduling.selectors import LeaseState, scheduler_state
from scheduling.spec import StrictStringField
from scheduling.stop_requests import CAUSES, stopping
from scheduling.web.borrowing import BORROWED, GUARANTEE, capacity
from teams.models import AuditEvent


class PendingReasonSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class TaskSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    node = serializers.CharField(
        source="node.name", default=None, allow_null=True, help_text="its node (null: not placed)"
    )

    class Meta:
        model = Task
        fields = [
            "rank",
            "state",
            "node",
            "gpu_indices",
            "attempt",
            "epoch",
            "failure_class",
            "stop_reason",
            "exit_code",
            "exit_signal",
            "exit_cause",
            "assigned_at",
            "started_at",
            "finished_at",
            "last_checkpoint_at",
            "checkpoint_step",
        ]
        read_only_fields = fields  # output only: no validators to build for every answer
        extra_kwargs = {
            # Read-only drops a model field's blank=True: given back, the schema's enum has ""
            # (BlankEnum), as the answers do while none is set.
            "failure_class": {"allow_blank": True},
            "last_checkpoint_at": {
                "help_text": "this attempt's last checkpoint the job confirmed (null: none yet; "
                "a preemption loses everything since then, or since the start)"
            },
            "checkpoint_step": {"help_text": "the step the job gave with that checkpoint, if any"},
            "exit_cause": {
                "help_text": "why the rank was lost when it was not the job's doing and is known: "
                'no_container_runtime, no_task_user, lease_expired, lost (its agent restarted), node_lost; "" otherwise'
            },
            "stop_reason": {
                "allow_blank": True,
                "help_text": "why the scheduler stopped this rank, if it did (PEER_FAILED: another rank of its gang "
                'failed, and this one ended because of it, whatever its failure_class says); "" if it did not',
            },
            "exit_signal": {
                "help_text": 'the signal that ended the process, e.g. "SIGKILL" (exit_code is then null); '
                '"" if it exited by itself'
            },
        }


class GroupSerializer(serializers.Serializer):
    kind = ChoiceField(["array", "sweep", "pipeline"])
    count = serializers.IntegerField(help_text="elements (an array), trials (a sweep) or steps (a pipeline)")
    parallelism = serializers.IntegerField(help_text="the most children on nodes at once")
    max_failures = serializers.IntegerField(allow_null=True)
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    early_stopped = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="a pipeline's steps skipped: their condition could not be met")
    run_dir = serializers.CharField(required=False, help_text="a pipeline: the run's {run_dir}")


_MOMENT = serializers.DateTimeField()


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    owner = serializers.CharField(source="owner.username")
    tasks = serializers.IntegerField(source="task_count")
    pending_reason = serializers.SerializerMethodField()
    group = serializers.SerializerMethodField(help_text="a group's parent: its children by state (null otherwise)")
    parent = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="a group's child: the group's job id (null otherwise)"
    )
    array_index = serializers.SerializerMethodField(help_text="an array's element: its index (null otherwise)")
    trial = serializers.SerializerMethodField(help_text="a sweep's trial: its number (null otherwise)")
    step = serializers.CharField(source="step_name", help_text="a pipeline's step: its name (else empty)")
    schedule = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="a schedule's run: the schedule's id (null otherwise, or once it is deleted)",
    )
    estimated_start_as_of = serializers.SerializerMethodField(
        help_text="pending jobs with a forecast start: when the cluster snapshot that forecast simulated was "
        "taken (the starts are as old as this; null: no forecast start)"
    )
    estimated_start_stale = serializers.SerializerMethodField(
        help_text="the forecast start is older than the leader leaves it while it keeps forecasting (5 forecast "
        "intervals plus twice the forecast's duration): no leader, or forecasts failing or far slower"
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "client_job_id",
            "name",
            "team",
            "owner",
            "state",
            "priority",
            "max_runtime_hours",
            "gpu_type",
            "gpu_count",
            "gpus_per_task",
            "tasks",
            "pending_reason",
            "estimated_start",
            "likely_start",
            "estimated_start_as_of",
            "estimated_start_stale",
            "submitted_at",
            "started_at",
            "finished_at",
            "group",
            "parent",
            "array_index",
            "trial",
            "step",
            "params",
            "schedule",
            "scheduled_for",
        ]
        read_only_fields = fields  # output only: no validators to build for every answer
        extra_kwargs = {
            "max_runtime_hours": {
                "help_text": "the time limit in force (a PATCH changes it; spec.max_runtime_hours is as submitted)"
            },
            "params": {"help_text": "a sweep's trial: its parameters"},
            "scheduled_for": {"help_text": "a schedule's run: the fire time it is the run of (UTC)"},
            "estimated_start": {
                "help_text": "pending jobs: the latest start, from the start-time forecast's run "
                "where every job runs to its max_runtime, if nothing that outranks it "
                "arrives (null: beyond the forecast)"
            },
            "likely_start": {
                "help_text": "pending jobs: the likely start, from the start-time forecast's run with "
                "the teams' observed runtimes"
            },
        }

    def to_representation(self, job: Job):
        """A start forecast is of a job still waiting: one that left the queue otherwise than
        by a placement (a cancel, a failed dependency) keeps its last columns, not shown."""
        data = super().to_representation(job)
        if job.state != JobState.PENDING:
            data["estimated_start"] = data["likely_start"] = None
        return data

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_estimated_start_as_of(self, job: Job):
        forecast = self._forecast_of(job)
        return _MOMENT.to_representation(forecast.forecast_at) if forecast and forecast.forecast_at else None

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_estimated_start_stale(self, job: Job) -> bool:
        forecast = self._forecast_of(job)
        return forecast is not None and forecast.forecast_stale

    def _forecast_of(self, job: Job) -> LeaseState | None:
        """The lease row, for a pending job with a stored start: read once per answer, however
        many jobs it lists."""
        if job.state != JobState.PENDING or (job.estimated_start is None and job.likely_start is None):
            return None
        if "scheduler_state" not in self.context:
            self.context["scheduler_state"] = scheduler_state()
        return self.context["scheduler_state"]

    @extend_schema_field(GroupSerializer(allow_null=True))
    def get_group(self, job: Job):
        if not job.group_kind:
            return None
        counts = self.context.get("group_counts")
        return summary(job, counts.get(job.pk, {}) if counts is not None else None)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_array_index(self, job: Job):
        return job.group_index if job.parent_id and job.params is None and not job.step_name else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_trial(self, job: Job):
        return job.group_index if job.parent_id and job.params is not None else None

    @extend_schema_field(PendingReasonSerializer(allow_null=True))
    def get_pending_reason(self, job: Job):
        if job.state != JobState.PENDING:
            return None
        if job.group_kind and not job.held:  # its first waiting child's reason
            found = self.context.get("group_reasons")
            reason = (found if found is not None else waiting_reasons([job.pk])).get(job.pk)
            if reason is not None:
                return {"code": reason[0], "message": reason[1]}
        return {"code": job.reason_code, "message": job.reason_message}


class StoppingSerializer(serializers.Serializer):
    cause = ChoiceField(
        CAUSES,
        help_text="PREEMPTED: for a job of a higher class; RECLAIM: for a team taking back its guarantee; DRAIN: its "
        "node is draining (an admin, a maintenance window, a spot notice); NODE_HEALTH: its node or a GPU failed; "
        "REQUEUED: a user's requeue; CANCELLED; TIMEOUT: past max_runtime; PEER_FAILED: another rank failed; "
        "EARLY_STOPPED: its sweep's rule",
    )
    message = serializers.CharField(
        help_text="the stop request's, as the timeline gives it: \"preempted for job 35 (P0, team research-vision): "
        'P2 yields to P0"'
    )
    preempted_for = serializers.IntegerField(allow_null=True, help_text="the job it is preempted for, if any")
    signal = ChoiceField(["SIGTERM", "SIGKILL"], help_text="the signal sent so far")
    requested_at = serializers.DateTimeField(allow_null=True, help_text="when the stop was asked (SIGTERM sent)")
    kill_at = serializers.DateTimeField(
        allow_null=True, help_text="when its ranks still running are SIGKILLed: the end of its grace period"
    )


class CapacitySerializer(serializers.Serializer):
    runs_on = ChoiceField(
        [GUARANTEE, BORROWED],
        help_text="GUARANTEE: within its team's guarantee of its class; BORROWED: above it, on capacity other teams "
        "are guaranteed or no team is (its team's jobs of a class fill the guarantee highest priority first, then "
        "by start)",
    )
    reclaimable = serializers.BooleanField(
        help_text="a reclaim may take it back, for a team owed its guarantee: borrowed, and not a P0"
    )
    message = serializers.CharField(
        help_text='"runs on borrowed capacity, above the guarantee of team research-vision (32 H100; its jobs use '
        '96): it may be reclaimed when another team needs its guarantee back"'
    )


class DependencyEntrySerializer(serializers.Serializer):
    job = serializers.IntegerField()
    on = ChoiceField(["success", "failure", "any"])


class JobDetailSerializer(JobSerializer):
    tasks = TaskSerializer(many=True, read_only=True)
    task_count = serializers.IntegerField()
    depends_on = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    dependencies = serializers.SerializerMethodField(
        help_text="what it waits on: each job id with its condition (success, failure or any)"
    )
    spec = serializers.SerializerMethodField(help_text='the spec as accepted; secret_env values read "***"')
    stopping = serializers.SerializerMethodField(
        help_text="a running job being stopped: why, and when it is killed if it has not exited (null otherwise; "
        "its state stays RUNNING until its ranks exit)"
    )
    capacity = serializers.SerializerMethodField(
        help_text="a job on its nodes: whether it runs on its team's guarantee or on borrowed capacity a reclaim may "
        "take back, as the scheduler counts it now (null otherwise; the job's own answer only, not a list's)"
    )

    class Meta(JobSerializer.Meta):
        fields = JobSerializer.Meta.fields + [
            "stopping",
            "capacity",
            "task_count",
            "spec",
            "depends_on",
            "dependencies",
            "held",
            "held_by_name",
            "held_reason",
            "not_before",
            "restarts_used",
            "retries_used",
            "max_restarts",
            "max_retries",
            "preemptions",
            "failure_class",
            "cancel_requested_at",
            "updated_at",
            "last_checkpoint_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            **JobSerializer.Meta.extra_kwargs,
            "failure_class": {"allow_blank": True},  # "" until it fails (read-only drops blank=True)
            "last_checkpoint_at": {"help_text": "the latest checkpoint any attempt of the job confirmed"},
            "preemptions": {
                "help_text": "times preempted, drained or spot-reclaimed and requeued: counted apart, "
                "they spend neither max_restarts nor max_retries"
            },
        }

    @extend_schema_field(DependencyEntrySerializer(many=True))
    def get_dependencies(self, job: Job) -> list[dict]:
        loaded = getattr(job, "_prefetched_objects_cache", {}).get("depends_on")
        if loaded is not None and len(loaded) == 0:
            return []  # depends_on was loaded (prefetched) and is empty: no condition to look up
        rows = JobDependency.objects.filter(from_job=job).order_by("to_job_id").values_list("to_job_id", "condition")
        return [{"job": job_id, "on": condition} for job_id, condition in rows]

    @extend_schema_field(StoppingSerializer(allow_null=True))
    def get_stopping(self, job: Job):
        found = stopping(job, job.tasks.all())  # the tasks are read only for a job on its nodes
        return StoppingSerializer(found).data if found else None

    @extend_schema_field(CapacitySerializer(allow_null=True))
    def get_capacity(self, job: Job):
        return capacity(job)  # two small queries, for a job on its nodes only

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_spec(self, job: Job) -> dict:
        # Stored masked already; masked again so that no other writer can leak a value here.
        return masked_spec(job.spec)


class QueueEntrySerializer(JobSerializer):
    position = serializers.IntegerField(allow_null=True, help_text="place in line at the last pass (1 = next)")
    reserved_nodes = serializers.ListField(child=serializers.CharField())

    class Meta(JobSerializer.Meta):
        fields = ["position", *JobSerializer.Meta.fields, "reserved_nodes"]


class MetricSummarySerializer(serializers.Serializer):
    name = serializers.CharField()
    best = serializers.FloatField(allow_null=True, help_text="the best value reported (by the sweep's goal)")
    best_step = serializers.IntegerField(allow_null=True)
    last = serializers.FloatField(allow_null=True, help_text="the value at the latest step reported")
    step = serializers.IntegerField(allow_null=True, help_text="the latest step reported")
    reports = serializers.IntegerField()


class ChildSerializer(JobSerializer):
    metric = serializers.SerializerMethodField(help_text="a sweep's trial: its metric so far (null: no metric)")
    rank = serializers.SerializerMethodField(
        help_text="a sweep's trial: its place by the metric (1 = best; null: no metric, or not a trial)"
    )
    after = serializers.SerializerMethodField(help_text="a pipeline's step: the steps it comes after")
    when = serializers.SerializerMethodField(help_text="a pipeline's step: success, failure or always")

    class Meta(JobSerializer.Meta):
        fields = [
            *JobSerializer.Meta.fields,
            "failure_class",
            "retries_used",
            "restarts_used",
            "metric",
            "rank",
            "after",
            "when",
        ]

    def _step(self, job: Job) -> dict:
        steps = self.context.get("steps") or []
        return steps[job.group_index] if job.step_name and job.group_index < len(steps) else {}

    @extend_schema_field(serializers.ListField(child=serializers.CharField(), allow_null=True))
    def get_after(self, job: Job):
        return self._step(job).get("after")

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_when(self, job: Job):
        return self._step(job).get("when")

    @extend_schema_field(MetricSummarySerializer(allow_null=True))
    def get_metric(self, job: Job):
        return self.context.get("metrics", {}).get(job.pk)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_rank(self, job: Job):
        return self.context.get("ranks", {}).get(job.pk)


class MetricPointSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    value = serializers.FloatField()
    time = serializers.DateTimeField(allow_null=True, help_text="when the job reported it, by its own clock")
    attempt = serializers.IntegerField()
    rank = serializers.IntegerField()


class MetricSeriesField(serializers.DictField):
    """name -> its points in step order."""

    def __init__(self, **kwargs):
        super().__init__(child=serializers.ListField(child=MetricPointSerializer()), **kwargs)


class TruncatedSeriesSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    name = serializers.CharField()


class JobMetricsSerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    series = MetricSeriesField(help_text="the job's metrics by name (empty for a group's parent)")
    children = serializers.DictField(
        child=MetricSeriesField(), help_text="a group's parent: each child's series, by child id (else empty)"
    )
    truncated = TruncatedSeriesSerializer(
        many=True, help_text="series cut at the bound: ask again with after_step = their last step"
    )
    points_per_series = serializers.IntegerField(help_text="the most points one series holds in one answer")


class JobEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = AuditEvent
        fields = ["id", "kind", "actor", "from_state", "to_state", "reason", "message", "data", "created_at"]


class CancelSerializer(NoUnknownFields, serializers.Serializer):
    # Shown in the job's events and pending reason: no invisible or control characters (a
    # right-to-left override reversed what followed it on every page).
    reason = StrictStringField(required=False, allow_blank=True, max_length=500, default="", printable_only=True)


class DryRunPlacementSerializer(serializers.Serializer):
    nodes = serializers.ListField(child=serializers.DictField(), help_text='[{"node": name, "tasks": n}, ...]')


class ReasonSerializer(serializers.Serializer):
    code = serializers.CharField()
    category = serializers.CharField(required=False)
    message = serializers.CharField()
    field = serializers.CharField(required=False, help_text="can_ever_run false: the spec field at fault")


class DryRunSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    can_ever_run = serializers.BooleanField(help_text="whether an empty cluster could hold it (false: POST is a 400)")
    shape = serializers.CharField(help_text='what it asks for, e.g. "8 x 8 H100"')
    placement = DryRunPlacementSerializer(allow_null=True, help_text="where it would go now; null if it would wait")
    reason = ReasonSerializer(allow_null=True, help_text="why it would wait, or why it can never run")
    suggestions = serializers.ListField(child=serializers.CharField())
    group = serializers.DictField(
        required=False,
        help_text="an array or a sweep: {kind, count, parallelism, max_failures}, an array's indices, a sweep's "
        "method, seed (seed_drawn: drawn for this answer; submit with it to run these trials) and first 20 trials "
        "[{trial, params}]; the placement and reason are one child's",
    )
    steps = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="a pipeline: each step's answer (valid, can_ever_run, shape, placement, reason, suggestions) "
        "with its name as `step`; the top is the first step that could never run, else the first step's",
    )
    schedule = serializers.DictField(
        required=False,
        help_text="a spec with a schedule: block: its timing as a submit would keep it and next_fires (the "
        "first three fire times); the rest of the answer is one run's, as if fired now",
    )
    existing = serializers.DictField(
        required=False,
        help_text="the spec's client_job_id names a job already: {status: 200, job_id, message} for the same "
        "spec (a submit creates nothing and answers that job), {status: 409, message} for another spec "
        "(a submit is refused with that message)",
    )


class HistogramSerializer(serializers.Serializer):
    fit = serializers.CharField(help_text='nodes that could take one task, of how many, e.g. "3/36"')
    rejections = serializers.ListField(child=serializers.DictField(), help_text='[{"why": ..., "nodes": n}, ...]')


class ReservationSerializer(serializers.Serializer):
    reserved_nodes = serializers.ListField(child=serializers.CharField())
    nominated_nodes = serializers.ListField(child=serializers.CharField())


class EndedSerializer(serializers.Serializer):
    state = serializers.CharField()
    at = serializers.DateTimeField(allow_null=True)
    by = serializers.CharField(help_text="who or what ended it: a user, `scheduler`, an agent")
    reason = serializers.CharField(help_text="its reason code, e.g. CANCELLED, DEPENDENCY, TIMEOUT")
    message = serializers.CharField()


class WhySerializer(serializers.Serializer):
    job_id = serializers.IntegerField()
    child_id = serializers.IntegerField(
        allow_null=True, help_text="a waiting group's: the child it waits as (its first waiting one), which answers"
    )
    state = serializers.CharField()
    reason = ReasonSerializer(allow_null=True, help_text="pending jobs only: the last pass's reason")
    histogram = HistogramSerializer(allow_null=True)
    reservation = ReservationSerializer(allow_null=True)
    latest_start = serializers.DateTimeField(
        allow_null=True, help_text="the forecast's start if all run to their limit"
    )
    likely_start = serializers.DateTimeField(allow_null=True, help_text="the forecast's start from observed runtimes")
    estimated_start_as_of = serializers.DateTimeField(
        allow_null=True, help_text="when the snapshot the starts were forecast from was taken (null: no forecast start)"
    )
    estimated_start_stale = serializers.BooleanField(
        help_text="the forecast is older than the leader leaves it while it keeps forecasting: the starts are stale"
    )
    suggestions = serializers.ListField(child=serializers.CharField(), help_text="changes that would fit it now")
    stopping = StoppingSerializer(
        allow_null=True, help_text="a running job being stopped: why, and when it is killed (as the job's own)"
    )
    capacity = CapacitySerializer(allow_null=True, help_text="a job on its nodes: as the job's own answer says it")
    ended = EndedSerializer(allow_null=True, help_text="a finished job: the transition into its final state")


class BulkCancelResultSerializer(serializers.Serializer):
    cancelled = serializers.ListField(child=serializers.IntegerField())
    stopping = serializers.ListField(
        child=serializers.IntegerField(), help_text="those of `cancelled` whose tasks are still stopping on their nodes"
    )
    skipped = serializers.ListField(child=serializers.DictField(), help_text='[{"id": n, "why": "..."}, ...]')


class JobBatchSerializer(serializers.Serializer):
    """POST /api/v1/jobs/batch's body (for the schema: scheduling/submit_batch.py checks it)."""

    jobs = serializers.ListField(
        child=serializers.DictField(), help_text="job specs, each as POST /api/v1/jobs takes one (at most 1,000)"
    )


class BatchOutcomeSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="the spec's place in `jobs`")
    status = serializers.IntegerField(help_text="201 created, 200 the same job again, 409 another spec under this id")
    id = serializers.IntegerField(help_text="the job (for 409: the one that has the client_job_id)")
    client_job_id = serializers.CharField(allow_null=True)
    name = serializers.CharField(required=False)
    team = serializers.CharField(required=False)
    state = serializers.CharField(required=False)
    detail = serializers.CharField(required=False, help_text="why a 409")


class JobBatchResultSerializer(serializers.Serializer):
    created = serializers.IntegerField()
    existing = serializers.IntegerField(help_text="200s: submitted before with the same spec")
    conflicts = serializers.IntegerField(help_text="409s: the id is taken by another spec")
    jobs = BatchOutcomeSerializer(many=True)
