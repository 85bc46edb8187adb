"""The pages people use: the live queue and the job page. Thin views over selectors and
services; fragments are served to htmx for live refreshes."""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from rest_framework.exceptions import APIException, PermissionDenied

from mlqueue.client.specs import dump_yaml
from mlqueue.text import INVISIBLE, invisible_char
from scheduling import job_control, job_metrics, node_health, services
from scheduling.models import Job, Priority, TaskState
from scheduling.secrets import masked_spec
from scheduling.selectors import can_change_job, scheduler_state, visible_jobs
from scheduling.spec import SPEC_FIELD_ORDER
from scheduling.states import JOB_FINISHED, ON_NODE, QUEUED_OR_RUNNING
from scheduling.stop_requests import stopping
from scheduling.web import logstream
from scheduling.web.api import NO_SUCH_ATTEMPT
from scheduling.web.borrowing import capacity
from scheduling.web.explanations import explain_job, what_would_help
from scheduling.web.group_page import group_section
from scheduling.web.post_only import post_only
from scheduling.web.queue import SORTS, QueueQuery, group_rows, queue_page, short_duration
from teams.selectors import visible_team_names

LOG_TAIL_CHARS = 20_000  # what the job page shows of a log; static/js/mlqueue.js keeps it to this too


def log_tail(text: str) -> tuple[str, bool]:
    """The last LOG_TAIL_CHARS of a log, from a line's start (a line longer than that is cut),
    and whether anything was left out. static/js/mlqueue.js cuts the followed log the same way."""
    if len(text) <= LOG_TAIL_CHARS:
        return text, False
    part = text[-LOG_TAIL_CHARS:]
    newline = part.find("\n")
    if text[-LOG_TAIL_CHARS - 1] != "\n" and 0 <= newline < len(part) - 1:
        part = part[newline + 1 :]
    return part, True


@login_required
def queue(request):
    query = QueueQuery.from_params(request.GET)
    rows, page = queue_page(request.user, query)
    context = {
        "rows": rows,
        "page": page,
        "query": query,
        "sorts": SORTS,
        "section": "queue",
        "states": ["active", "all", *TaskState.values],
        "priorities": Priority.values,
        "teams": visible_team_names(request.user),
        "querystring": _without(request.GET, "page"),  # the pager adds its own page
        "forecast": forecast_age(),
    }
    template = "scheduling/queue_table.html" if request.headers.get("HX-Request") else "scheduling/queue.html"
    return render(request, template, context)


@login_required
def queue_group(request, job_id: int):
    """An expanded group row of the queue: its children, as ordinary rows (an htmx fragment)."""
    parent = get_object_or_404(visible_jobs(request.user).exclude(group_kind=""), pk=job_id)
    rows, total = group_rows(parent)
    return render(request, "scheduling/queue_group.html", {"parent": parent, "rows": rows, "total": total})


def spec_yaml(spec: dict) -> str:
    """The spec as a user would write it: the documented field order, block style, and
    secret_env values as *** (stored so; masked again so no other writer can leak one here)."""
    spec = masked_spec(spec)
    ordered = {name: spec[name] for name in SPEC_FIELD_ORDER if name in spec}
    return dump_yaml(ordered, sort_keys=False, default_flow_style=False)


def _job_for(request, job_id: int) -> Job:
    return get_object_or_404(visible_jobs(request.user), pk=job_id)


@login_required
def job_page(request, job_id: int, refused: dict | None = None):
    """`refused`: a button's reason the page refused (`done`, `reason`, `error`), kept in its
    box with the error beside it."""
    job = _job_for(request, job_id)
    context = {
        **_panel_context(job, request.user),
        **group_section(job),
        **_metrics_context(job),
        "section": "queue",
        "spec_yaml": spec_yaml(job.spec),
        "refused": refused,
    }
    return render(request, "scheduling/job.html", context)


METRIC_CHART_POINTS = 2_000  # per series on the page, spread over the whole run; the API has every point


def _metrics_context(job: Job) -> dict:
    """The job's metrics for its chart (name -> [[step, value], ...]) and the table of each
    one's last value; a group's parent has none of its own (its children have theirs)."""
    if job.group_kind:
        return {}
    found, _ = job_metrics.metric_series([job.pk], spread=METRIC_CHART_POINTS)
    series = found.get(job.pk, {})
    return {
        "metric_chart": {name: [[p["step"], p["value"]] for p in points] for name, points in series.items()},
        "metric_last": job_metrics.last_values(job.pk),
        "metric_spread": METRIC_CHART_POINTS,
        "metric_thinned": job_metrics.longer_than(job.pk, METRIC_CHART_POINTS),
    }


@login_required
def job_panel(request, job_id: int):
    return render(request, "scheduling/job_panel.html", _panel_context(_job_for(request, job_id), request.user))


@login_required
def job_group(request, job_id: int):
    """The job page's group section alone, re-fetched when one of its children changes."""
    job = _job_for(request, job_id)
    context = {"job": job, "can_cancel": _can_cancel(job, request.user), **group_section(job)}
    return render(request, "scheduling/_group.html", context)


@login_required
def job_help(request, job_id: int):
    """The panel's "What would help?": computed only when asked, as it loads the whole cluster."""
    job = _job_for(request, job_id)
    found = what_would_help(job) if job.state == TaskState.PENDING else None
    return render(request, "scheduling/job_help.html", {"job": job, "help": found})


def _panel_context(job: Job, user) -> dict:
    tasks = node_health.with_gpu_use(list(job.tasks.select_related("node").order_by("rank")))
    return {
        "job": job,
        "tasks": tasks,
        # As the API's job answer and `mlq status` say it (a query only while it is being stopped).
        "stopping": stopping(job, tasks),
        "capacity": capacity(job),  # as the API's job answer and `mlq why` say it
        "events": job.events.order_by("-created_at", "-id")[:200],
        "why": explain_job(job) if job.state == TaskState.PENDING else None,
        "ranks": range(job.task_count),
        "now_day": timezone.now().strftime("%Y%m%d"),
        "forecast": _forecast_age(job),
        "can_cancel": _can_cancel(job, user),
        **_controls(job, user),
    }


def _controls(job: Job, user) -> dict:
    """Which of hold, release and requeue to offer (the services check again on the POST)."""
    if not can_change_job(user, job):
        return {}
    finished = job.state in JOB_FINISHED
    return {
        "can_hold": not job.held and (job.state == TaskState.PENDING or bool(job.group_kind) and not finished),
        "can_release": job.held,
        "can_requeue": not job.group_kind
        and job.state in ON_NODE
        and job.cancel_requested_at is None
        and not job.tasks.exclude(stop_reason="").exists(),  # not while it is being stopped
    }


def _forecast_age(job: Job) -> dict | None:
    """A pending job's forecast start: how old it is and whether it is stale (`forecast_age`)."""
    if job.state != TaskState.PENDING or job.estimated_start is None:
        return None
    return forecast_age()


def forecast_age() -> dict | None:
    """How old the stored forecast starts are ("12s", as in "as of 12s ago") and whether they
    are stale (`LeaseState.forecast_stale`); None before any forecast."""
    lease = scheduler_state()
    if lease.forecast_age_s is None:
        return None
    return {"age": short_duration(lease.forecast_age_s), "stale": lease.forecast_stale}


def _can_cancel(job: Job, user) -> bool:
    """Offered only to who may (the service checks again on the POST). FAILED without a failure
    class is an attempt awaiting its retry (services.do_cancel_job)."""
    return (
        job.state in QUEUED_OR_RUNNING or job.state == TaskState.FAILED and not job.failure_class
    ) and can_change_job(user, job)


@login_required
def job_log(request, job_id: int):
    """The tail of one rank's log: its latest attempt, or the earlier one `attempt` names (the box
    lists them). The page follows the current attempt from there by the API's event stream
    (static/js/mlqueue.js); `poll` renders the fallback, re-fetched every 3 s."""
    job = _job_for(request, job_id)
    rank_text, stream = request.GET.get("rank", "0"), request.GET.get("stream", "stdout")
    if not (rank_text.isascii() and rank_text.isdigit() and int(rank_text) < job.task_count):
        ranks = "rank 0" if job.task_count == 1 else f"ranks 0 to {job.task_count - 1}"
        return HttpResponseBadRequest(f"rank: job {job.pk} has {ranks}, not {rank_text[:20]!r}.", content_type=TEXT)
    if stream not in ("stdout", "stderr"):
        return HttpResponseBadRequest(f"stream: stdout or stderr, not {stream[:20]!r}.", content_type=TEXT)
    rank = int(rank_text)
    latest = logstream.latest_attempt(job.pk, rank, stream)  # the current one, as the API's
    attempt, refusal = _chosen_attempt(job, rank, latest, request.GET.get("attempt"))
    if refusal:
        return HttpResponseBadRequest(refusal, content_type=TEXT)
    text, offset = logstream.read_log(job.pk, rank, attempt, stream, 0)
    # An earlier attempt is over: nothing to follow, and a re-fetch must not jump to the latest.
    pinned = attempt != latest
    params = {"follow": 1, "rank": rank, "stream": stream, "offset": offset, "attempt": attempt}
    tail, cut = log_tail(text)
    context = {
        "job": job,
        "rank": rank,
        "stream": stream,
        "attempt": attempt,
        "pinned": pinned,
        "attempts": range(max(1, latest - MAX_ATTEMPT_LINKS + 1), latest + 1),
        "tail": tail,
        "cut": cut,
        "tail_chars": LOG_TAIL_CHARS,
        "poll": bool(request.GET.get("poll")),
        "finished": job.state in JOB_FINISHED or pinned,
        "follow_url": f"{reverse('job-logs', args=[job.pk])}?{urlencode(params)}",
    }
    return render(request, "scheduling/job_log.html", context)


MAX_ATTEMPT_LINKS = 50  # the log box links a rank's newest attempts, at most this many
NOT_AN_ATTEMPT = "attempt: a whole number from 1, not {text!r}."


def _chosen_attempt(job: Job, rank: int, latest: int, text: str | None) -> tuple[int, str]:
    """(the attempt to show, a refusal): `latest` when none is asked for; else one the rank has
    made, as the API's logs endpoint accepts it (a 400 naming `attempt` otherwise)."""
    if text is None or text == "":
        return latest, ""
    if not (text.isascii() and text.isdigit() and len(text) < 10 and int(text) >= 1):
        return latest, NOT_AN_ATTEMPT.format(text=text[:20])
    if int(text) > latest:
        return latest, "attempt: " + NO_SUCH_ATTEMPT.format(rank=rank, job=job.pk, made=latest)
    return int(text), ""


MAX_REASON = 500  # CancelSerializer's
TEXT = "text/plain; charset=utf-8"  # a refusal that echoes the query: never read as HTML
REASON_TOO_LONG = "reason: at most {limit} characters ({length} given): nothing was {done}."


def _without(params, name: str) -> str:
    kept = params.copy()
    kept.pop(name, None)
    return kept.urlencode()


@login_required
@post_only("job-page", "job_id")
def job_cancel(request, job_id: int):
    return _act(request, job_id, "cancelled", services.do_cancel_job, "Job {id} is being cancelled.")


STILL_HELD_WITH_GROUP = (
    "Job {id} is released from its own hold, and stays held with its group, job {group}, until that is released."
)
# The job page's other buttons: (the service, what the flash says, what a refusal says was not done).
CONTROLS = {
    "hold": (job_control.do_hold_job, "Job {id} is held: the scheduler leaves it waiting until released.", "held"),
    "release": (job_control.do_release_job, "Job {id} is released: the next pass considers it again.", "released"),
    "requeue": (
        job_control.do_requeue_job,
        "Job {id} is being stopped gracefully, to wait again as a new attempt.",
        "requeued",
    ),
}


@login_required
@post_only("job-page", "job_id")
def job_control_page(request, job_id: int, verb: str):
    """Hold, release or requeue from the job page: the API's services and rules, a flash."""
    if verb not in CONTROLS:
        raise Http404(f"no such action {verb!r}")
    service, said, done = CONTROLS[verb]
    if verb == "release":  # it takes no reason
        return _act(request, job_id, done, lambda *, job, user, reason: service(job=job, user=user), said)
    return _act(request, job_id, done, service, said)


def _act(request, job_id: int, done: str, service, said: str):
    """Check the reason as the API does, then call `service`; a refusal is the job page with it."""
    job = _job_for(request, job_id)
    reason = request.POST.get("reason", "")
    refusal = ""
    if len(reason) > MAX_REASON:  # as the API and mlq refuse it, not cut short unsaid
        refusal = REASON_TOO_LONG.format(limit=MAX_REASON, length=len(reason), done=done)
    elif char := invisible_char(reason):  # as the API's CancelSerializer: it goes in the job's events
        refusal = f"reason: {INVISIBLE.format(char=char)} Nothing was {done}."
    if refusal:  # the reason stays in its box, the error beside it, as the other forms do
        response = job_page(request, job_id, refused={"done": done, "reason": reason, "error": refusal})
        response.status_code = 400
        return response
    try:
        after = service(job=job, user=request.user, reason=reason)
        # A child released from its own hold while its group is held stays held (a review: the
        # page said "released" of it).
        if done == "released" and getattr(after, "held", False):
            said = STILL_HELD_WITH_GROUP.format(id=job.pk, group=job.parent_id)
        messages.success(request, said.format(id=job.pk))
    except PermissionDenied as exc:
        messages.error(request, str(exc.detail))
        response = job_page(request, job_id)  # the job page, with why, as a 403
        response.status_code = 403
        return response
    except APIException as exc:
        messages.error(request, str(exc.detail))
    return redirect("job-page", job_id=job.pk)


@login_required
def job_clone(request, job_id: int):
    job = _job_for(request, job_id)
    return redirect(reverse("job-new") + f"?clone={job.pk}")
