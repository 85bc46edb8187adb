"""The schedules pages: `/schedules/` lists the schedules the viewer may see, `/schedules/<id>/`
shows one with its fire history and, to who may change it, suspend/resume/run-now buttons
(POST forms with CSRF). Users keep no time-zone preference, so times show in UTC and in the
schedule's own zone."""

from zoneinfo import ZoneInfo

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from rest_framework.exceptions import APIException, ValidationError

from mlqueue.api_errors import flatten_errors
from scheduling import schedules
from scheduling.models import FireOutcome, Job, Schedule
from scheduling.web.pages import spec_yaml
from scheduling.web.post_only import post_only

RUNS_SHOWN = 5  # the list's last runs per schedule
HISTORY_SHOWN = 50


def _row(schedule: Schedule, runs: list[Job]) -> dict:
    """Formatted here: the template's date filter would turn the local time back into UTC."""
    local = schedule.next_run_at.astimezone(ZoneInfo(schedule.timezone)) if schedule.next_run_at else None
    return {"schedule": schedule, "next_local": f"{local:%Y-%m-%d %H:%M %Z}" if local else "", "runs": runs}


@login_required
def page(request):
    rows = []
    for schedule in schedules.visible_schedules(request.user).order_by("team__name", "name"):
        runs = list(Job.objects.filter(schedule=schedule, parent__isnull=True).order_by("-id")[:RUNS_SHOWN])
        rows.append(_row(schedule, runs))
    return render(request, "scheduling/schedules.html", {"rows": rows, "section": "schedules"})


@login_required
def detail(request, schedule_id: int):
    schedule = get_object_or_404(schedules.visible_schedules(request.user), pk=schedule_id)
    context = {
        **_row(schedule, []),
        "fires": schedule.fires.select_related("job")[:HISTORY_SHOWN],
        "may_change": schedules.can_change_schedule(request.user, schedule),
        "spec_yaml": spec_yaml(schedule.spec),
        "section": "schedules",
    }
    return render(request, "scheduling/schedule.html", context)


@login_required
@post_only("schedule-page", "schedule_id")
def action(request, schedule_id: int, verb: str):
    """suspend, resume or run (now), as the API's PATCH and run do; refusals become a message."""
    schedule = get_object_or_404(schedules.visible_schedules(request.user), pk=schedule_id)
    try:
        if verb == "run":
            fire, _made = schedules.do_run_now(user=request.user, schedule=schedule)
            ran = fire.outcome in (FireOutcome.SUBMITTED, FireOutcome.REPLACED)
            (messages.success if ran else messages.error)(request, f"Run now: {fire.message}.")
        else:
            data = {"suspended": verb == "suspend", "reason": request.POST.get("reason", "")}  # checked, not cut
            changes = schedules.check_schedule_change(user=request.user, schedule=schedule, data=data)
            schedules.do_change_schedule(user=request.user, schedule=schedule, changes=changes)
            messages.success(request, f"Schedule {schedule.name} {'suspended' if data['suspended'] else 'resumed'}.")
    except ValidationError as exc:  # "reason: ...", not a dict's repr
        messages.error(request, "; ".join(f"{field}: {m[0]}" for field, m in flatten_errors(exc.detail).items()))
    except APIException as exc:
        messages.error(request, str(exc.detail))
    return redirect("schedule-page", schedule_id=schedule.pk)
