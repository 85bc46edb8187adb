"""Single submits answered in groups: the work behind the submit lane (mlqueue/submit_lane.py).

Each `POST /api/v1/jobs` of a group is one client's request, answered as JobListCreate.post
answers it: the same checks, the same idempotency on (team, client_job_id), the same JSON and
headers. What a group shares is the write: every submit that passes its checks goes into one
transaction with one INSERT per table (submit_batch.do_submit_jobs), where a submit alone
costs its own transaction and about nine statements. Under load the lane's groups fill up by
themselves (those that arrive while a group is written make the next group); alone, a submit is
a group of one and waits for nothing.

A submit the lane does not answer the same way as Django would, it leaves to Django
(`Submit.answer` stays None): no bearer token, a spec that fails a check, a schedule, an array,
sweep or pipeline, a rate limit reached. All of those are found before anything is written or
counted, so Django answers them with its own words and counts them once. Reading is what checks
do; the submit rate is counted last, only for submits the lane then writes."""

import io
import logging
import time
from dataclasses import dataclass

from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http import Http404, HttpResponse, JsonResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.cache import patch_vary_headers
from django.utils.log import log_response
from prometheus_client import Counter, Histogram
from rest_framework.exceptions import APIException
from rest_framework.renderers import JSONRenderer

from mlqueue.api_errors import exception_handler
from mlqueue.errors import SERVER_ERROR, Conflict
from mlqueue.middleware import database_outages, database_unavailable, is_database_unavailable
from mlqueue.parsers import loads_body
from scheduling import groups, submit_batch
from scheduling.services import SubmitChecks
from scheduling.web.api import JobListCreate, job_with_tasks
from scheduling.web.serializers import JobDetailSerializer
from scheduling.web.throttles import SubmitRateThrottle
from teams.authentication import UNREAD, BearerTokenAuthentication, token_generation

log = logging.getLogger("django.request")  # where Django logs a request's unhandled error
# The lane's submits skip django-prometheus's request counters: these count them instead.
SUBMITS = Counter("mlqueue_submit_lane_total", "Single submits taken by the submit lane, by who answered", ["answered"])
GROUP_SIZE = Histogram(
    "mlqueue_submit_group_size", "Single submits written together in one group", buckets=(1, 2, 4, 8, 16, 32, 64)
)
GROUP_SECONDS = Histogram(
    "mlqueue_submit_group_seconds",
    "A group's own work in its thread: checks, the transaction, the answers",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)


def _allowed_methods() -> str:
    """The view's Allow header (DRF's default_response_headers), HEAD included as as_view() adds it."""
    view = JobListCreate()
    view.setup(None)
    return ", ".join(view.allowed_methods)


ALLOW = _allowed_methods()


@dataclass
class Submit:
    """One request: its ASGI scope and body in; its answer out (None: Django answers it)."""

    scope: dict
    body: bytes
    request: ASGIRequest | None = None
    answer: HttpResponse | None = None


@dataclass
class _Checked:
    submit: Submit
    user: object
    team: object
    spec: dict


def answer_submits(submits: list[Submit]) -> None:
    """Answer each submit the lane can answer (sets `answer`); leave the others to Django."""
    began = time.perf_counter()
    close_old_connections()
    try:
        checks: dict[int, SubmitChecks] = {}  # per user: a team, its rights and the fleet read once
        try:
            generation = token_generation()  # once for the group: a revoke before it is seen
        except Exception:
            generation = UNREAD  # each request reads it, or fails to, as Django's would
        authentication = BearerTokenAuthentication(generation)
        checked = [found for submit in submits if (found := _checked(submit, authentication, checks))]
        ready, taken = _within_rate(checked)
        if ready and not _write(ready):
            for throttle in taken:  # Django counts each again as it submits it
                _give_back(throttle)
    finally:
        close_old_connections()  # hands the connection back to the pool
        answered = sum(submit.answer is not None for submit in submits)
        SUBMITS.labels("lane").inc(answered)
        SUBMITS.labels("django").inc(len(submits) - answered)
        GROUP_SIZE.observe(len(submits))
        GROUP_SECONDS.observe(time.perf_counter() - began)


def _checked(submit: Submit, authentication, checks: dict) -> _Checked | None:
    """The submit's user, team and checked spec; None for Django to answer (it refuses it, or
    answers it otherwise: a schedule, a group)."""
    submit.request = request = ASGIRequest(submit.scope, io.BytesIO(submit.body))
    try:
        found = authentication.authenticate(request)
        if found is None:
            return None
        user = found[0]
        data = loads_body(submit.body)
        if not isinstance(data, dict) or data.get("schedule") is not None:
            return None
        team, spec = checks.setdefault(user.pk, SubmitChecks(user)).check_submission(data)
        if groups.group_kind(spec):
            return None  # a group's parent and children: the single submit's own path
    except Exception:  # refused: Django refuses it again, in its own words
        return None
    return _Checked(submit, user, team, spec)


def _within_rate(checked: list[_Checked]) -> tuple[list[_Checked], list[SubmitRateThrottle]]:
    """Those the submit rate lets through, in order, counted once per user, and the throttles
    that counted them. The others are Django's to refuse (its throttle finds the same count: a
    429 with Retry-After, counting none)."""
    by_user: dict[int, list[_Checked]] = {}
    for entry in checked:
        by_user.setdefault(entry.user.pk, []).append(entry)
    allowed, throttles = set(), []
    for entries in by_user.values():
        throttle = SubmitRateThrottle()
        try:
            taken = throttle.take(entries[0].user, len(entries))
        except Exception:  # the count cannot be read: Django's throttle meets the same
            taken = 0
        if taken:
            throttles.append(throttle)
        allowed.update(id(entry) for entry in entries[:taken])
    return [entry for entry in checked if id(entry) in allowed], throttles


def _give_back(throttle: SubmitRateThrottle) -> None:
    try:
        throttle.give_back()
    except Exception:  # counted twice at worst, as if the client had retried
        log.warning("could not give back a group's submit counts", exc_info=True)


def _write(ready: list[_Checked]) -> bool:
    """Write the group and answer each; False if nothing was written (for Django to submit)."""
    try:
        outcomes = submit_batch.do_submit_jobs([(entry.user, entry.team, entry.spec) for entry in ready])
    except Exception as exc:
        # The transaction did not commit (its after-commit hooks are robust: notify.py), or its
        # COMMIT failed with the connection, an outage, answered as Django's path answers it.
        if not is_database_unavailable(exc):
            log.warning("a group of %d submits failed; Django submits each again", len(ready), exc_info=True)
            return False
        database_outages.note(exc)
        for entry in ready:
            entry.submit.answer = finish(entry.submit.request, database_unavailable(entry.submit.request.path))
        return True
    for entry, outcome in zip(ready, outcomes, strict=True):
        try:
            response = _answer(entry, outcome)
        except (APIException, Http404) as exc:  # the job submitted before went meanwhile: a 404
            handled = exception_handler(exc, {})
            response = _json(handled.data, handled.status_code)
        except Exception:  # written: never submitted again
            log.error("Internal Server Error: %s", entry.submit.request.path, exc_info=True)
            response = JsonResponse({"detail": SERVER_ERROR}, status=500)
            response._has_been_logged = True
        entry.submit.answer = finish(entry.submit.request, response)
    return True


def _answer(entry: _Checked, outcome: submit_batch.Outcome) -> HttpResponse:
    """What JobListCreate.post answers: the new job (201), the job submitted before with this
    spec (200), or the 409 of an id taken by another spec."""
    if outcome.status == 409:
        response = exception_handler(Conflict(outcome.detail), {})
        return _json(response.data, response.status_code)
    job = outcome.job if outcome.job is not None else job_with_tasks(outcome.job_id, entry.user)
    return _json(JobDetailSerializer(job).data, outcome.status)


def _json(data, status: int) -> HttpResponse:
    response = HttpResponse(JSONRenderer().render(data), status=status, content_type="application/json")
    response["Allow"] = ALLOW
    patch_vary_headers(response, ["Accept"])  # the view has more renderers than JSON
    return response


def finish(request: ASGIRequest, response: HttpResponse) -> HttpResponse:
    """The headers Django's middleware adds on the way out (MIDDLEWARE, innermost first):
    X-Frame-Options, Content-Length (CommonMiddleware), then SecurityMiddleware's (nosniff,
    Referrer-Policy, Cross-Origin-Opener-Policy, HSTS over HTTPS), from the settings as they are;
    and the log line Django's handler writes for an answer of 400 or more ("Conflict: /api/v1/jobs")."""
    response = XFrameOptionsMiddleware(_unused).process_response(request, response)
    if not response.has_header("Content-Length"):
        response.headers["Content-Length"] = str(len(response.content))
    response = SecurityMiddleware(_unused).process_response(request, response)
    if response.status_code >= 400:
        log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
    return response


def _unused(request):
    raise AssertionError("only process_response is called")
