"""The submit rate: POST /api/v1/jobs and the submit page count against one limit per user."""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.throttling import UserRateThrottle

SUBMIT_RATE_EXCEEDED = "too many submissions: at most {count} jobs per {period} per user; retry in {wait} s."


class SubmitRateThrottle(UserRateThrottle):
    """Submits per user at MLQ_SUBMIT_RATE (read per request, so a test or an override_settings
    sees its own); reads are not limited. Counts live in the cache."""

    scope = "submit"

    def get_rate(self):
        return settings.MLQ_SUBMIT_RATE

    def allow_request(self, request, view):
        return request.method != "POST" or super().allow_request(request, view)


def submit_rate_exceeded(wait: float | None) -> exceptions.Throttled:
    count, period = settings.MLQ_SUBMIT_RATE.split("/")
    exc = exceptions.Throttled(wait)
    exc.wait = exc.wait or 1  # DRF has no estimate when a race overfilled the window; Retry-After needs one
    exc.detail = exceptions.ErrorDetail(
        SUBMIT_RATE_EXCEEDED.format(count=count, period=period, wait=exc.wait), code="throttled"
    )
    return exc


def check_submit_rate(request) -> None:
    """For a submit outside DRF's views (the submit page): raises Throttled past the rate."""
    throttle = SubmitRateThrottle()
    if not throttle.allow_request(request, None):
        raise submit_rate_exceeded(throttle.wait())
