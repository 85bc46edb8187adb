"""REST endpoints for jobs. Thin: parse, call a service or selector, serialize."""

from collections.abc import Callable

from django.conf import settings
from django.db.models import Max, Prefetch
from django.http import Http404, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.errors import Conflict
from mlqueue.metrics_report import NAME as METRIC_NAME
from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import check_parameters, check_submit_parameters
from mlqueue.serializer_fields import ChoiceField
from scheduling import groups, job_changes, job_control, job_metrics, schedules, services, submit_batch, sweeps
from scheduling.group_state import waiting_reasons
from scheduling.models import Job, JobState, Priority, Task
from scheduling.queue_state import queue_positions
from scheduling.selectors import (
    ME,
    NO_VISIBLE_TEAM,
    owner_filter_refusal,
    scheduler_state,
    visible_jobs,
    visible_team_ids,
)
from scheduling.spec import JobSpecSerializer
from scheduling.web import logstream, schedules_api, throttles
from scheduling.web.consumers import session_user
from scheduling.web.dryrun import dry_run_answer, resubmit_answer
from scheduling.web.explanations import why_answer
from scheduling.web.filters import JobFilter
from scheduling.web.serializers import (
    BulkCancelResultSerializer,
    CancelSerializer,
    ChildSerializer,
    DryRunSerializer,
    JobBatchResultSerializer,
    JobBatchSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobMetricsSerializer,
    JobSerializer,
    QueueEntrySerializer,
    WhySerializer,
)
from teams.models import ApiToken, AuditEvent
from teams.selectors import is_member

NO_SUCH_RANK = "job {job} has {ranks}."
NO_SUCH_ATTEMPT = "rank {rank} of job {job} has made {made} attempt(s)."
NO_SUCH_JOB_ATTEMPT = "job {job} has made {made} attempt(s)."
GROUP_HAS_NO_LOG = (
    "job {job} is {kind}: its children have the logs (mlq children {job} / GET /api/v1/jobs/{job}/children)"
)
A_GROUP = {"array": "an array", "sweep": "a sweep", "pipeline": "a pipeline"}


class OldestFirst(NewestFirst):
    ordering = ("created_at", "id")


class JobListCreate(generics.ListAPIView):
    serializer_class = JobSerializer
    filterset_class = JobFilter
    throttle_classes = [throttles.SubmitRateThrottle]
    pagination_class = NewestFirst

    def get_queryset(self):
        return visible_jobs(self.request.user)

    def get_serializer(self, *args, **kwargs):
        """A page of jobs counts its groups' children, and finds why the waiting ones wait, in one
        query each, not one per group."""
        if args and isinstance(args[0], list):
            context = kwargs.setdefault("context", self.get_serializer_context())
            parents = [job for job in args[0] if job.group_kind]
            context["group_counts"] = groups.child_counts([job.pk for job in parents])
            context["group_reasons"] = waiting_reasons([job.pk for job in parents if job.state == JobState.PENDING])
        return super().get_serializer(*args, **kwargs)

    @extend_schema(
        request=JobSpecSerializer,
        responses={
            201: JobDetailSerializer,
            200: JobDetailSerializer,
            409: OpenApiResponse(description="same client_job_id, other spec"),
        },
    )
    def post(self, request: Request) -> Response:
        """Submit a job. A spec with a `schedule:` block creates a schedule instead (no job is
        submitted): the answer, 201 (200 if it existed with these settings), is
        `{"created": "schedule", "message": .., "schedule": {..}}` (docs/schedules.md)."""
        check_submit_parameters(request.query_params)
        if isinstance(request.data, dict) and request.data.get("schedule") is not None:
            return self._create_schedule(request)
        team, spec = services.check_job_submission(user=request.user, data=request.data)
        job, created = services.do_submit_job(user=request.user, team=team, spec=spec)
        # A new plain job comes back with its tasks (do_submit_job): nothing to read again. A
        # group's parent (its children's counts) and a job submitted before are read.
        answer = job if created and not job.group_kind else job_with_tasks(job.pk, request.user)
        return Response(
            JobDetailSerializer(answer).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    def _create_schedule(self, request: Request) -> Response:
        team, timing, spec = schedules.check_spec_with_schedule(user=request.user, data=request.data)
        return schedules_api.create_response(request, team, timing, spec, answer=schedules_api.created_answer)

    def throttled(self, request: Request, wait: float | None):
        raise throttles.submit_rate_exceeded(wait)


def job_with_tasks(job_id: int, user):
    """The job with its tasks, if the caller may see it (a member of its team or of a team
    above it, or an admin): a 404 otherwise, as for a job that does not exist. Asked of the job's
    own team (`is_member`, one compiled read), not by listing every team the caller sees."""
    tasks = Prefetch("tasks", queryset=Task.objects.select_related("node").order_by("rank"))
    job = Job.objects.select_related("team", "owner").prefetch_related(tasks, "depends_on").filter(pk=job_id).first()
    if job is None or not is_member(user, job.team):
        raise Http404("No Job matches the given query.")  # get_object_or_404's words: "no such job: 7."
    return job


class JobBatchSubmit(APIView):
    throttle_classes = [throttles.BatchSubmitRateThrottle]

    @extend_schema(
        request=JobBatchSerializer,
        responses={
            201: JobBatchResultSerializer,
            200: JobBatchResultSerializer,
            400: OpenApiResponse(description="a bad spec: `fields` names `jobs[i].field` for each"),
            403: OpenApiResponse(description="a team or priority the caller may not use, named as `jobs[i].team`"),
        },
    )
    def post(self, request: Request) -> Response:
        """Submit up to MLQ_SUBMIT_BATCH_MAX (1,000) jobs: `{"jobs": [spec, ...]}`. All checked first:
        any bad spec refuses the whole batch and nothing is written. Then each spec's
        `client_job_id` decides as for a single submit, reported per spec in `jobs` (in order):
        201 created, 200 submitted before with the same spec, 409 taken by another spec. The answer
        is 201 when any job was created, else 200 (README, "The API")."""
        check_submit_parameters(request.query_params)
        checked = submit_batch.check_job_batch(user=request.user, data=request.data)
        outcomes = submit_batch.do_submit_job_batch(user=request.user, checked=checked)
        counts = {code: sum(o.status == code for o in outcomes) for code in (201, 200, 409)}
        answer = {
            "created": counts[201],
            "existing": counts[200],
            "conflicts": counts[409],
            "jobs": [outcome.as_json(index) for index, outcome in enumerate(outcomes)],
        }
        return Response(answer, status=status.HTTP_201_CREATED if counts[201] else status.HTTP_200_OK)

    def throttled(self, request: Request, wait: float | None):
        raise throttles.submit_rate_exceeded(wait)


class JobDetail(APIView):
    @extend_schema(responses=JobDetailSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        job = job_with_tasks(job_id, request.user)
        check_parameters(request.query_params, paged=False)  # it takes none: `?zz=1` is a 400
        return Response(JobDetailSerializer(job).data)

    @extend_schema(
        request=job_changes.JobChangeSerializer,
        responses={
            200: JobDetailSerializer,
            403: OpenApiResponse(description="not yours to change, or a priority above your rights"),
            409: OpenApiResponse(description="the job's state does not allow the change, or it changed meanwhile"),
        },
    )
    def patch(self, request: Request, job_id: int) -> Response:
        """Change a submitted job: `name`, `priority` (while PENDING, within your rights) or a
        lower `max_runtime_hours` (also while running). See scheduling/job_changes.py."""
        job = get_object_or_404(visible_jobs(request.user).select_related("owner", "team"), pk=job_id)
        changes = job_changes.check_job_change(user=request.user, job=job, data=request.data)
        job_changes.do_change_job(user=request.user, job=job, changes=changes)
        return Response(JobDetailSerializer(job_with_tasks(job_id, request.user)).data)


class JobDryRun(APIView):
    throttle_classes = [throttles.DryRunRateThrottle]

    def throttled(self, request: Request, wait: float | None):
        raise throttles.dry_run_rate_exceeded(wait)

    @extend_schema(request=JobSpecSerializer, responses=DryRunSerializer)
    def post(self, request: Request) -> Response:
        """Validate a spec as a submit would and say whether it could ever run, where it would go
        now, or why it would wait and what would help. Writes nothing. A spec with a `schedule:`
        block is checked as a submit would create the schedule, and the answer adds its next fire
        times (the run is tried as if fired now)."""
        check_parameters(request.query_params, paged=False)  # it takes none: `?zz=1` is a 400
        data = request.data
        if isinstance(data, dict) and data.get("schedule") is not None:
            timing, data = schedules.check_schedule_block(data)
            fires = schedules.next_fires(timing, timezone.now())
            _, spec = services.check_job_spec(user=request.user, data=data)
            return Response({**dry_run_answer(spec), "schedule": {**timing, "next_fires": fires}})
        team, spec = services.check_job_spec(user=request.user, data=data)
        return Response({**dry_run_answer(spec), **resubmit_answer(team=team, spec=spec)})


class JobWhy(APIView):
    @extend_schema(responses=WhySerializer)
    def get(self, request: Request, job_id: int) -> Response:
        """Why a job waits: its reason, node histogram, reservation, forecast starts and what would
        let it start now (computed on this request: it loads the cluster)."""
        job = get_object_or_404(visible_jobs(request.user), pk=job_id)
        check_parameters(request.query_params, paged=False)
        return Response(why_answer(job))


class JobBulkCancel(APIView):
    @extend_schema(
        operation_id="v1_jobs_bulk_cancel",
        request=job_changes.BulkCancelSerializer,
        responses=BulkCancelResultSerializer,
    )
    def post(self, request: Request) -> Response:
        """Cancel jobs by `ids` or by `filter`; each is audited. Jobs you cannot see or cancel, or
        that already ended, are listed in `skipped` with why; `stopping` lists those of `cancelled`
        whose tasks are still stopping (they end CANCELLED once they have)."""
        job_ids, reason = job_changes.check_bulk_cancel(user=request.user, data=request.data)
        return Response(job_changes.do_cancel_jobs(user=request.user, job_ids=job_ids, reason=reason))


class JobEvents(generics.ListAPIView):
    serializer_class = JobEventSerializer
    pagination_class = OldestFirst
    queryset = AuditEvent.objects.none()  # for the schema; the real one is per job

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return self.queryset
        job = get_object_or_404(visible_jobs(self.request.user), pk=self.kwargs["job_id"])
        check_parameters(self.request.query_params)  # it takes none but its pages'
        return job.events.all()


class JobChildren(APIView):
    @extend_schema(responses={200: ChildSerializer(many=True)})
    def get(self, request: Request, job_id: int) -> Response:
        """A group's children: an array's by index; a sweep's best first by its metric (trials that
        have not reported it last), each with its parameters and metric summary; a pipeline's steps
        in the spec's order, each with its `step` name, `after` and `when`."""
        parent = get_object_or_404(visible_jobs(request.user), pk=job_id)
        if not parent.group_kind:
            return Response(ChildSerializer([], many=True).data)
        kids, summaries, ranks = sweeps.ranked_children(parent)
        context = {"metrics": summaries, "ranks": ranks, "steps": parent.group.get("steps")}
        return Response(ChildSerializer(kids, many=True, context=context).data)


class MetricsQuerySerializer(serializers.Serializer):
    name = serializers.RegexField(METRIC_NAME, max_length=100, required=False, help_text="one metric only")
    rank = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    attempt = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False)
    after_step = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, required=False, help_text="only points past this step (the next page)"
    )
    spread = serializers.IntegerField(
        min_value=2,
        max_value=job_metrics.POINTS_PER_SERIES,
        required=False,
        help_text="thin each series to about this many points over its whole run (every k-th, the last kept)",
    )


METRICS_PARAMETERS = ("name", "rank", "attempt", "after_step", "spread")


class JobMetrics(APIView):
    @extend_schema(parameters=[MetricsQuerySerializer], responses=JobMetricsSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        """A job's metrics (`mlqueue.report`), one series per name in step order; a group's
        parent: each child's. At most `points_per_series` points per series and 50,000 in all;
        `truncated` names the series cut short. Any other parameter, a repeated or an empty one,
        and a rank or an attempt the job has not run is a 400 naming it (as for its logs)."""
        job = get_object_or_404(visible_jobs(request.user), pk=job_id)
        check_parameters(request.query_params, filters=METRICS_PARAMETERS, paged=False)
        query = MetricsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        _check_metrics_query(job, query.validated_data.get("rank"), query.validated_data.get("attempt"))
        kids = list(sweeps.children(job).values_list("pk", flat=True)) if job.group_kind else []
        found, cut = job_metrics.metric_series(kids or [job.pk], **query.validated_data)
        answer = {
            "job_id": job.pk,
            "series": {} if kids else found.get(job.pk, {}),
            "children": {str(kid): found[kid] for kid in kids if kid in found},
            "truncated": cut,
            "points_per_series": job_metrics.POINTS_PER_SERIES,
        }
        return Response(answer)


def _check_metrics_query(job: Job, rank: int | None, attempt: int | None) -> None:
    """A rank the job has and an attempt it has made, as a log's (without a rank: an attempt
    any of its ranks has made), else a 400: an empty answer read as a job that reported
    nothing. A group's parent answers for its children, each with its own: not checked."""
    if job.group_kind:
        return
    if rank is not None:
        _check_log_query(job, rank, attempt)
    elif attempt is not None:
        made = Task.objects.filter(job=job).aggregate(made=Max("attempt"))["made"] or 0
        if attempt > max(made, 1):
            raise ValidationError({"attempt": [NO_SUCH_JOB_ATTEMPT.format(job=job.pk, made=made)]})


class JobCancel(APIView):
    @extend_schema(
        request=CancelSerializer,
        responses={
            200: JobDetailSerializer,
            403: OpenApiResponse(description="not the owner, a lead of its team or an admin"),
        },
    )
    def post(self, request: Request, job_id: int) -> Response:
        job = get_object_or_404(visible_jobs(request.user), pk=job_id)
        services.check_may_cancel(user=request.user, job=job)  # 403 before any complaint about the body
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.do_cancel_job(job=job, user=request.user, reason=body.validated_data["reason"])
        return Response(JobDetailSerializer(job_with_tasks(job_id, request.user)).data)


def _control(request: Request, job_id: int, verb: str):
    """The job a hold, release or requeue is about, after the rights check (a 403 before any
    complaint about the body), and the body's reason."""
    job = get_object_or_404(visible_jobs(request.user).select_related("owner", "team"), pk=job_id)
    job_control.check_may_control(user=request.user, job=job, verb=verb)
    body = CancelSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return job, body.validated_data["reason"]


_CONTROL_RESPONSES = {
    200: JobDetailSerializer,
    403: OpenApiResponse(description="not the owner, a lead of its team or an admin"),
}


class JobHold(APIView):
    @extend_schema(
        operation_id="v1_jobs_hold",
        request=CancelSerializer,
        responses={**_CONTROL_RESPONSES, 409: OpenApiResponse(description="the job is not PENDING")},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Hold a PENDING job: the scheduler leaves it waiting until it is released."""
        job, reason = _control(request, job_id, "hold")
        job_control.do_hold_job(user=request.user, job=job, reason=reason)
        return Response(JobDetailSerializer(job_with_tasks(job_id, request.user)).data)


class JobRelease(APIView):
    @extend_schema(
        operation_id="v1_jobs_release",
        request=None,
        responses={**_CONTROL_RESPONSES, 409: OpenApiResponse(description="the job is not held")},
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Release a held job: the scheduler considers it again."""
        job, _ = _control(request, job_id, "release")
        job_control.do_release_job(user=request.user, job=job)
        return Response(JobDetailSerializer(job_with_tasks(job_id, request.user)).data)


class JobRequeue(APIView):
    @extend_schema(
        operation_id="v1_jobs_requeue",
        request=CancelSerializer,
        responses={
            **_CONTROL_RESPONSES,
            409: OpenApiResponse(description="the job is not ASSIGNED or RUNNING, or is being stopped already"),
        },
    )
    def post(self, request: Request, job_id: int) -> Response:
        """Stop a running job gracefully (SIGTERM, SIGKILL after its grace period) and queue it
        again as a new attempt, spending none of its retries or restarts."""
        job, reason = _control(request, job_id, "requeue")
        job_control.do_requeue_job(user=request.user, job=job, reason=reason)
        return Response(JobDetailSerializer(job_with_tasks(job_id, request.user)).data)


class SchedulerStateSerializer(serializers.Serializer):
    leader = serializers.CharField(allow_null=True)
    epoch = serializers.IntegerField()
    leading = serializers.BooleanField(source="alive", help_text="whether the lease was renewed within its duration")
    renewed_at = serializers.DateTimeField(allow_null=True)
    lease_seconds = serializers.FloatField(allow_null=True, help_text="the lease's duration, as its holder keeps to it")
    last_pass_ms = serializers.FloatField(allow_null=True)
    last_pass_at = serializers.DateTimeField(allow_null=True)
    forecast_at = serializers.DateTimeField(
        allow_null=True, help_text="when the snapshot the stored start forecasts come from was taken"
    )
    forecast_ms = serializers.FloatField(allow_null=True, help_text="how long that forecast took")
    forecast_age_s = serializers.FloatField(allow_null=True, help_text="its age now, by the database's clock")
    forecast_stale = serializers.BooleanField(
        help_text="older than 5 forecast intervals plus twice its duration: the starts are not being refreshed"
    )


class SchedulerState(APIView):
    @extend_schema(responses=SchedulerStateSerializer)
    def get(self, request: Request) -> Response:
        check_parameters(request.query_params, paged=False)
        return Response(SchedulerStateSerializer(scheduler_state()).data)


def still_allowed(request: Request, job_id: int) -> Callable[[], bool]:
    """What an open log stream asks again now and then: whether the request's credentials would
    still read the job, as a new request's would be checked (its token not revoked or expired,
    its session still its user's, the user active and still on a team that sees the job)."""
    token = request.auth if isinstance(request.auth, ApiToken) else None
    session = getattr(request, "session", None)
    session_key = session.session_key if token is None and session is not None else None
    user_id = request.user.pk

    def check() -> bool:
        if token is not None:
            fresh = ApiToken.objects.select_related("user").filter(pk=token.pk, revoked_at__isnull=True).first()
            if fresh is None or fresh.expired(timezone.now()) or not fresh.user.is_active:
                return False
            user = fresh.user
        else:
            user = session_user(session_key, user_id)
            if user is None:
                return False
        return visible_jobs(user).filter(pk=job_id).exists()

    return check


class LogQuerySerializer(serializers.Serializer):
    rank = serializers.IntegerField(min_value=0, required=False, default=0)
    attempt = serializers.IntegerField(min_value=1, required=False)
    stream = ChoiceField(["stdout", "stderr"], required=False, default="stdout")
    offset = serializers.IntegerField(min_value=0, required=False, default=0)
    follow = serializers.BooleanField(
        required=False, default=False, help_text="stream the attempt as server-sent events until it ends"
    )


LOG_PARAMETERS = ("rank", "attempt", "stream", "offset", "follow")


class JobLogs(APIView):
    def perform_content_negotiation(self, request, force=False):
        # EventSource asks for text/event-stream only; errors are still answered in JSON
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(
        parameters=[LogQuerySerializer],
        responses=logstream.LOG_RESPONSES,
    )
    def get(self, request: Request, job_id: int) -> Response | StreamingHttpResponse:
        """A rank's log from `offset` (default: its latest attempt's stdout from the start);
        `follow`: the attempt as server-sent events, new lines as they arrive, until it ends.
        Any other parameter, or one of these repeated or empty, is a 400 naming it."""
        job = get_object_or_404(visible_jobs(request.user), pk=job_id)
        check_parameters(request.query_params, filters=LOG_PARAMETERS, paged=False)
        params = request.query_params.copy()
        resumed = bool(params.get("follow") and request.headers.get("Last-Event-ID"))
        if resumed:
            params["offset"] = request.headers["Last-Event-ID"]  # an EventSource resuming: past the URL's offset
        query = LogQuerySerializer(data=params)
        if not query.is_valid():
            errors = dict(query.errors)
            if resumed and "offset" in errors:  # the header's fault, not the URL's offset
                errors["Last-Event-ID"] = errors.pop("offset")
            raise serializers.ValidationError(errors)
        rank, stream, offset = (
            query.validated_data["rank"],
            query.validated_data["stream"],
            query.validated_data["offset"],
        )
        _check_log_query(job, rank, query.validated_data.get("attempt"))
        if query.validated_data["follow"]:
            attempt = query.validated_data.get("attempt") or logstream.latest_attempt(job.pk, rank, stream)
            response = StreamingHttpResponse(
                logstream.follow_log(job.pk, rank, attempt, stream, offset, still_allowed(request, job.pk)),
                content_type=logstream.CONTENT_TYPE,
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"  # a proxy in front must pass each event on at once
            return response
        # The same default as `follow`: the task's current attempt (stdout and stderr alike), not
        # the newest with output, which was an earlier one while a new attempt had printed nothing.
        attempt = query.validated_data.get("attempt") or logstream.latest_attempt(job.pk, rank, stream)
        text, end = logstream.read_log(job.pk, rank, attempt, stream, offset)
        return Response(
            {
                "job_id": job.pk,
                "rank": rank,
                "attempt": attempt,
                "stream": stream,
                "offset": offset,
                "next_offset": end,
                "text": text,
                # The stream reached what is kept of it (MLQ_MAX_LOG_CHARS): the rest was not stored.
                "capped": end >= settings.MLQ_MAX_LOG_CHARS,
            }
        )


def _check_log_query(job: Job, rank: int, attempt: int | None) -> None:
    """A rank the job has, and an attempt that rank has made (or its first): else a 400 naming
    the parameter, not an empty log that looks like a silent job. A group's parent runs no task
    (its stored task_count is its children's): a 409 pointing at the children."""
    if job.group_kind:
        raise Conflict(GROUP_HAS_NO_LOG.format(job=job.pk, kind=A_GROUP.get(job.group_kind, "a group")))
    if rank >= job.task_count:
        ranks = "rank 0" if job.task_count == 1 else f"ranks 0-{job.task_count - 1}"
        raise ValidationError({"rank": [NO_SUCH_RANK.format(job=job.pk, ranks=ranks)]})
    if attempt is not None:
        made = Task.objects.filter(job=job, rank=rank).values_list("attempt", flat=True).first() or 0
        if attempt > max(made, 1):
            raise ValidationError({"attempt": [NO_SUCH_ATTEMPT.format(job=job.pk, rank=rank, made=made)]})


class QueueQuerySerializer(serializers.Serializer):
    team = serializers.CharField(required=False, help_text="the team's jobs (a division's: its teams')")
    owner = serializers.CharField(required=False, help_text='a user name, or "me"')
    priority = ChoiceField(choices=Priority.values, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)
    offset = serializers.IntegerField(min_value=0, default=0)


QUEUE_PARAMETERS = ("team", "owner", "priority", "limit", "offset")


class QueuePageSerializer(serializers.Serializer):
    """The queue's answer as sent (the schema said a bare list, which generated clients read)."""

    count = serializers.IntegerField(help_text="entries in the whole queue the caller may see")
    offset = serializers.IntegerField()
    results = QueueEntrySerializer(many=True)


class Queue(APIView):
    """Pending work the caller may see, in the order the scheduler's last pass considered it,
    with each job's reason and its latest and likely starts; jobs the last pass has not ordered yet last.

    A job group's children are entries (they are what the scheduler places, each with its
    `parent` and `array_index` or `trial`); the group's parent is not: it never runs itself
    (`GET /api/v1/jobs/{id}` gives its counts)."""

    @extend_schema(parameters=[QueueQuerySerializer], responses=QueuePageSerializer)
    def get(self, request: Request) -> Response:
        check_parameters(request.query_params, filters=QUEUE_PARAMETERS, paged=False)
        query = QueueQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        jobs = visible_jobs(request.user).filter(state=JobState.PENDING, group_kind="")
        if "team" in params:
            # A team the caller sees no job of is an error, as in the job list: a typo showed an
            # empty queue.
            if not (team_ids := visible_team_ids(request.user, params["team"])):
                raise ValidationError({"team": [NO_VISIBLE_TEAM.format(name=params["team"])]})
            jobs = jobs.filter(team_id__in=team_ids)
        if "priority" in params:
            jobs = jobs.filter(priority=params["priority"])
        if "owner" in params:
            if why := owner_filter_refusal(request.user, params["owner"]):
                raise ValidationError({"owner": [why]})
            me = params["owner"] == ME
            jobs = jobs.filter(owner=request.user) if me else jobs.filter(owner__username=params["owner"])
        positions = queue_positions()
        ids = sorted(jobs.values_list("id", flat=True), key=lambda job_id: (positions.get(job_id, 1 << 30), job_id))
        page = ids[params["offset"] : params["offset"] + params["limit"]]
        by_id = Job.objects.select_related("team", "owner").in_bulk(page)
        entries = []
        for job_id in page:
            if job_id in by_id:
                job = by_id[job_id]
                job.position = positions.get(job_id)
                entries.append(job)
        return Response(
            {"count": len(ids), "offset": params["offset"], "results": QueueEntrySerializer(entries, many=True).data}
        )
