"""REST endpoints for schedules (docs/schedules.md). Thin: parse, call scheduling/schedules.py,
serialize. Who sees and who changes: as for jobs (schedules.visible_schedules,
can_change_schedule)."""

from zoneinfo import ZoneInfo

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.errors import Conflict
from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import check_parameters
from scheduling import schedules
from scheduling.models import FireOutcome, Schedule, ScheduleFire
from scheduling.schedule_spec import ScheduleChangeSerializer, ScheduleCreateSerializer
from scheduling.selectors import visible_team_ids
from teams.api import TeamEventSerializer

# How many fires a schedule's detail lists (the page shows the same; HISTORY_KEPT are kept).
FIRES_SHOWN = 20
SCHEDULE_CREATED = (
    "a schedule was created, not a job: schedule {id} ({name}) submits a run at each fire time of "
    "{cron!r} in {timezone}; the first is {next}."
)
SCHEDULE_EXISTS = "schedule {id} ({name}) already exists with these settings; nothing was created."
# The list's filters (any other parameter is a 400 naming it).
LIST_FILTERS = ("team",)
NO_VISIBLE_TEAM = "no team named {name!r} whose schedules you may see."
NOT_VISIBLE = OpenApiResponse(description="no such schedule, or not one of your teams'")


class FireSerializer(serializers.ModelSerializer):
    job = serializers.PrimaryKeyRelatedField(
        read_only=True,
        allow_null=True,
        help_text="the run (or the active run a skip is about); null: none, or the job is deleted",
    )

    class Meta:
        model = ScheduleFire
        fields = ["scheduled_for", "fired_at", "outcome", "job", "message"]


class ScheduleSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    owner = serializers.CharField(source="owner.username")
    next_run_local = serializers.SerializerMethodField(help_text="next_run_at in the schedule's time zone")
    last_job = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True, help_text="the latest run (null: none yet, or it is deleted)"
    )

    class Meta:
        model = Schedule
        fields = [
            "id",
            "name",
            "team",
            "owner",
            "cron",
            "timezone",
            "concurrency",
            "starting_deadline_minutes",
            "suspended",
            "suspended_reason",
            "next_run_at",
            "next_run_local",
            "last_fire_at",
            "last_outcome",
            "last_job",
            "spec",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {
            "next_run_at": {"help_text": "the next fire time (UTC); null while suspended: none fires"},
            "spec": {"help_text": "the job spec each run is submitted with (secret_env values as ***)"},
        }

    def get_next_run_local(self, schedule: Schedule) -> str | None:
        if schedule.next_run_at is None or schedule.suspended:
            return None
        return schedule.next_run_at.astimezone(ZoneInfo(schedule.timezone)).isoformat()

    def to_representation(self, schedule: Schedule) -> dict:
        """A suspended schedule keeps the next_run_at it had (a resume computes a new one), but
        none fires while it is suspended: null, as the CLI's '-' and the page's "none"."""
        data = super().to_representation(schedule)
        if schedule.suspended:
            data["next_run_at"] = None
        return data


class ScheduleDetailSerializer(ScheduleSerializer):
    fires = serializers.SerializerMethodField()

    class Meta(ScheduleSerializer.Meta):
        fields = [*ScheduleSerializer.Meta.fields, "fires"]

    @extend_schema_field(FireSerializer(many=True))
    def get_fires(self, schedule: Schedule):
        """The last FIRES_SHOWN fire times, newest first."""
        return FireSerializer(schedule.fires.all()[:FIRES_SHOWN], many=True).data


def created_answer(schedule: Schedule, created: bool) -> dict:
    """What POST /api/v1/jobs answers for a spec with a `schedule:` block: say plainly that no
    job was submitted."""
    data = ScheduleSerializer(schedule).data
    if created:
        message = SCHEDULE_CREATED.format(
            id=schedule.pk,
            name=schedule.name,
            cron=schedule.cron,
            timezone=schedule.timezone,
            next=data["next_run_local"] or "none while it is suspended",
        )
    else:
        message = SCHEDULE_EXISTS.format(id=schedule.pk, name=schedule.name)
    return {"created": "schedule", "message": message, "schedule": data}


class ScheduleListCreate(generics.ListAPIView):
    serializer_class = ScheduleSerializer
    pagination_class = NewestFirst
    filter_backends = []

    def get_queryset(self):
        """The caller's teams' schedules; `team`: that team's (a division's: its teams'). Any
        other parameter, and a team the caller sees no schedule of, is a 400 naming it, as the
        jobs list answers (a team that does not exist and one not yours read the same)."""
        query = self.request.query_params
        check_parameters(query, filters=LIST_FILTERS)
        listed = schedules.visible_schedules(self.request.user)
        if "team" in query:
            team_ids = visible_team_ids(self.request.user, query["team"])
            if not team_ids:
                raise ValidationError({"team": [NO_VISIBLE_TEAM.format(name=query["team"])]})
            listed = listed.filter(team_id__in=team_ids)
        return listed

    @extend_schema(
        parameters=[OpenApiParameter("team", str, description="the team's schedules (a division's: its teams')")]
    )
    def get(self, request: Request, *args, **kwargs) -> Response:
        """Your teams' schedules, newest first; `team` for one team's (a division's: its teams')."""
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=ScheduleCreateSerializer,
        responses={
            201: ScheduleDetailSerializer,
            200: ScheduleDetailSerializer,
            409: OpenApiResponse(description="the team has a schedule of that name with other settings"),
        },
    )
    def post(self, request: Request) -> Response:
        """Create a schedule: its timing and the job spec each run is submitted with, validated as
        a submit is (errors name `spec.<field>`). 200 with the schedule when one of that name
        and these very settings exists already."""
        team, timing, spec = schedules.check_schedule_create(user=request.user, data=request.data)
        return create_response(
            request, team, timing, spec, answer=lambda schedule, _: ScheduleDetailSerializer(schedule).data
        )


def create_response(request: Request, team, timing: dict, spec: dict, *, answer) -> Response:
    """Create the checked schedule; 201, or 200 when it existed with these settings. `answer`:
    (schedule, created) -> the body (the two ways in answer differently)."""
    schedule, created = schedules.do_create_schedule(user=request.user, team=team, timing=timing, spec=spec)
    return Response(answer(schedule, created), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


def _visible(request: Request, schedule_id: int) -> Schedule:
    return get_object_or_404(schedules.visible_schedules(request.user), pk=schedule_id)


class ScheduleDetail(APIView):
    @extend_schema(responses=ScheduleDetailSerializer)
    def get(self, request: Request, schedule_id: int) -> Response:
        schedule = _visible(request, schedule_id)
        check_parameters(request.query_params, paged=False)
        return Response(ScheduleDetailSerializer(schedule).data)

    @extend_schema(
        request=ScheduleChangeSerializer,
        responses={
            200: ScheduleDetailSerializer,
            403: OpenApiResponse(description="not the owner, a lead of its team or an admin"),
            409: OpenApiResponse(description="resume refused (the owner may no longer submit), or the name is taken"),
        },
    )
    def patch(self, request: Request, schedule_id: int) -> Response:
        """Change any of name, cron, timezone, concurrency, starting_deadline_minutes, spec;
        `suspended: true` (with a `reason`) suspends, `false` resumes. A new cron or time zone,
        and a resume, recompute next_run_at from now."""
        schedule = _visible(request, schedule_id)
        changes = schedules.check_schedule_change(user=request.user, schedule=schedule, data=request.data)
        schedule = schedules.do_change_schedule(user=request.user, schedule=schedule, changes=changes)
        return Response(ScheduleDetailSerializer(schedule).data)

    @extend_schema(responses={204: None, 403: OpenApiResponse(description="not yours to delete")})
    def delete(self, request: Request, schedule_id: int) -> Response:
        """Delete the schedule and its fire history. Its runs stay, with `schedule` null."""
        schedules.do_delete_schedule(user=request.user, schedule=_visible(request, schedule_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ScheduleEvents(generics.ListAPIView):
    """A schedule's audit entries, newest first: created, changed, suspended, resumed, run now
    (`kind` SCHEDULE, who, and in `data` the fields changed, before and after), for whoever
    sees the schedule; 404 for anyone else, as the schedule itself."""

    serializer_class = TeamEventSerializer
    pagination_class = NewestFirst
    filter_backends = []

    def get_queryset(self):
        schedule = _visible(self.request, self.kwargs["schedule_id"])
        check_parameters(self.request.query_params)
        return schedules.schedule_history(schedule)

    @extend_schema(responses={200: TeamEventSerializer(many=True), 404: NOT_VISIBLE})
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)


class ScheduleRun(APIView):
    @extend_schema(
        request=None,
        responses={
            201: FireSerializer,
            200: OpenApiResponse(FireSerializer, description="run now again in the same second: the same fire"),
            409: OpenApiResponse(description="not submitted: the last run is active (forbid), or the owner may not"),
        },
    )
    def post(self, request: Request, schedule_id: int) -> Response:
        """Run now: an ordinary run with scheduled_for = now, as the schedule's owner, honouring
        its concurrency (forbid: 409 while the last run is active; replace: it is cancelled).
        Again in the same second (a double click, a retry): 200 with the fire already made."""
        fire, made = schedules.do_run_now(user=request.user, schedule=_visible(request, schedule_id))
        if fire.outcome not in (FireOutcome.SUBMITTED, FireOutcome.REPLACED):
            raise Conflict(f"schedule {schedule_id} did not run: {fire.message}")
        return Response(FireSerializer(fire).data, status=status.HTTP_201_CREATED if made else status.HTTP_200_OK)
