"""REST endpoints for jobs. Thin: parse, call a service or selector, serialize."""

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.pagination import StrictCursorPagination
from scheduling import services
from scheduling.models import Job, JobState, Priority, Task, TaskLog
from scheduling.queue_state import queue_positions
from scheduling.selectors import scheduler_state, visible_jobs
from scheduling.spec import JobSpecSerializer
from scheduling.web import throttles
from scheduling.web.filters import JobFilter
from scheduling.web.serializers import (
    CancelSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    QueueEntrySerializer,
)
from teams.models import AuditEvent


class NewestFirst(StrictCursorPagination):
    ordering = "-id"
    page_size = 50
    max_page_size = 500


class OldestFirst(NewestFirst):
    ordering = ("created_at", "id")


class JobListCreate(generics.ListAPIView):
    serializer_class = JobSerializer
    filterset_class = JobFilter
    throttle_classes = [throttles.SubmitRateThrottle]
    pagination_class = NewestFirst

    def get_queryset(self):
        return visible_jobs(self.request.user)

    @extend_schema(
        request=JobSpecSerializer,
        responses={
            201: JobDetailSerializer,
            200: JobDetailSerializer,
            409: OpenApiResponse(description="same client_job_id, other spec"),
        },
    )
    def post(self, request: Request) -> Response:
        team, spec = services.check_job_submission(user=request.user, data=request.data)
        job, created = services.do_submit_job(user=request.user, team=team, spec=spec)
        return Response(
            JobDetailSerializer(_with_tasks(job.pk, request.user)).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    def throttled(self, request: Request, wait: float | None):
        raise throttles.submit_rate_exceeded(wait)


def _with_tasks(job_id: int, user):
    tasks = Prefetch("tasks", queryset=Task.objects.select_related("node").order_by("rank"))
    return get_object_or_404(visible_jobs(user).prefetch_related(tasks, "depends_on"), pk=job_id)


class JobDetail(APIView):
    @extend_schema(responses=JobDetailSerializer)
    def get(self, request: Request, job_id: int) -> Response:
        return Response(JobDetailSerializer(_with_tasks(job_id, request.user)).data)


class JobEvents(generics.ListAPIView):
    serializer_class = JobEventSerializer
    pagination_class = OldestFirst
    queryset = AuditEvent.objects.none()  # for the schema; the real one is per job

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return self.queryset
        job = get_object_or_404(visible_jobs(self.request.user), pk=self.kwargs["job_id"])
        return job.events.all()


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
        return Response(JobDetailSerializer(_with_tasks(job_id, request.user)).data)


class SchedulerStateSerializer(serializers.Serializer):
    leader = serializers.CharField(allow_null=True)
    epoch = serializers.IntegerField()
    leading = serializers.BooleanField(source="alive", help_text="whether the lease was renewed within its duration")
    renewed_at = serializers.DateTimeField(allow_null=True)
    lease_seconds = serializers.FloatField(allow_null=True, help_text="the lease's duration, as its holder keeps to it")
    last_pass_ms = serializers.FloatField(allow_null=True)
    last_pass_at = serializers.DateTimeField(allow_null=True)


class SchedulerState(APIView):
    @extend_schema(responses=SchedulerStateSerializer)
    def get(self, request: Request) -> Response:
        return Response(SchedulerStateSerializer(scheduler_state()).data)


class LogQuerySerializer(serializers.Serializer):
    rank = serializers.IntegerField(min_value=0, required=False, default=0)
    attempt = serializers.IntegerField(min_value=1, required=False)
    stream = serializers.ChoiceField(["stdout", "stderr"], required=False, default="stdout")
    offset = serializers.IntegerField(min_value=0, required=False, default=0)


class JobLogs(APIView):
    @extend_schema(parameters=[LogQuerySerializer], responses={200: None})
    def get(self, request: Request, job_id: int) -> Response:
        """A rank's log from `offset` (default: its latest attempt's stdout from the start)."""
        job = get_object_or_404(visible_jobs(request.user), pk=job_id)
        query = LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        rank, stream, offset = (
            query.validated_data["rank"],
            query.validated_data["stream"],
            query.validated_data["offset"],
        )
        chunks = TaskLog.objects.filter(job=job, rank=rank, stream=stream)
        attempt = (
            query.validated_data.get("attempt")
            or chunks.order_by("-attempt").values_list("attempt", flat=True).first()
            or 1
        )
        text, end = "", offset
        for chunk_offset, chunk in chunks.filter(attempt=attempt, offset__gte=offset).values_list("offset", "text"):
            if chunk_offset != end:
                break  # a gap: later chunks have not arrived yet
            text += chunk
            end += len(chunk)
        return Response(
            {
                "job_id": job.pk,
                "rank": rank,
                "attempt": attempt,
                "stream": stream,
                "offset": offset,
                "next_offset": end,
                "text": text,
            }
        )


class QueueQuerySerializer(serializers.Serializer):
    team = serializers.CharField(required=False)
    priority = serializers.ChoiceField(choices=Priority.values, required=False)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)
    offset = serializers.IntegerField(min_value=0, default=0)


class Queue(APIView):
    """Pending work the caller may see, in the order the scheduler's last pass considered it,
    with each job's reason and its latest and likely starts; jobs the last pass has not ordered yet last."""

    @extend_schema(parameters=[QueueQuerySerializer], responses=QueueEntrySerializer(many=True))
    def get(self, request: Request) -> Response:
        query = QueueQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        jobs = visible_jobs(request.user).filter(state=JobState.PENDING)
        if "team" in params:
            jobs = jobs.filter(team__name=params["team"])
        if "priority" in params:
            jobs = jobs.filter(priority=params["priority"])
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
