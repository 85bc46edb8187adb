"""The submit rate: POST /api/v1/jobs, its batches (a job each) and the submit page count
against one limit per user."""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.exceptions import ValidationError
from rest_framework.throttling import UserRateThrottle

SUBMIT_RATE_EXCEEDED = "too many submissions: at most {count} jobs per {period} per user; retry in {wait} s."
DRY_RUN_RATE_EXCEEDED = "too many dry runs: at most {count} per {period} per user; retry in {wait} s."
BATCH_OVER_RATE = (
    "{jobs} jobs in one batch is more than the submit rate allows (at most {count} jobs per {period} per user): "
    "send at most {count} at a time."
)


class SubmitRateThrottle(UserRateThrottle):
    """Submits per user at MLQ_SUBMIT_RATE (read per request, so a test or an override_settings
    sees its own); reads are not limited. Counts live in the cache."""

    scope = "submit"

    def get_rate(self):
        return settings.MLQ_SUBMIT_RATE

    def allow_request(self, request, view):
        return request.method != "POST" or super().allow_request(request, view)

    def take(self, user, count: int) -> int:
        """How many of `count` submits by `user`, one after another, the limit lets through now,
        counted as that many allow_request calls would count them, with one read and one write
        of the user's count (the submit lane's groups, scheduling/web/grouped_submits.py)."""
        if self.rate is None:
            self.taken = 0  # nothing counted, nothing to give back
            return count
        self._read(self.cache_format % {"scope": self.scope, "ident": user.pk})
        self.taken = max(0, min(count, self.num_requests - len(self.history)))
        if self.taken:
            self._count(self.taken)
        return self.taken

    def _read(self, key: str) -> None:
        """The user's submit times still within the period, newest first (DRF's bookkeeping)."""
        self.key, self.history, self.now = key, self.cache.get(key, []), self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()

    def _count(self, count: int) -> None:
        self.history[:0] = [self.now] * count
        self.cache.set(self.key, self.history, self.duration)

    def give_back(self) -> None:
        """Uncount what `take` counted (a group that wrote nothing: Django counts each again)."""
        if not self.taken:
            return
        history = self.cache.get(self.key, [])
        for _ in range(self.taken):
            if self.now in history:
                history.remove(self.now)
        self.cache.set(self.key, history, self.duration)


class DryRunRateThrottle(SubmitRateThrottle):
    """Dry runs per user at MLQ_DRY_RUN_RATE, a count of their own (a dry run before a submit
    spends none of the submit rate): each is a scheduling pass over the whole waiting queue."""

    scope = "dry_run"

    def get_rate(self):
        return settings.MLQ_DRY_RUN_RATE


class BatchSubmitRateThrottle(SubmitRateThrottle):
    """The same limit, counting each job of a batch: a batch of n fits when n more submits would.
    A batch larger than the whole limit could never pass: a 400 naming `jobs` says so."""

    def allow_request(self, request, view):
        from scheduling.submit_batch import batch_limit

        if self.rate is None or (key := self.get_cache_key(request, view)) is None:
            return True
        jobs = request.data.get("jobs") if isinstance(request.data, dict) else None
        # Not a list, or over the batch limit: refused whole by the view's checks, counted as one.
        self.count = len(jobs) if isinstance(jobs, list) and 0 < len(jobs) <= batch_limit() else 1
        if self.count > self.num_requests:
            count, period = settings.MLQ_SUBMIT_RATE.split("/")
            raise ValidationError({"jobs": [BATCH_OVER_RATE.format(jobs=self.count, count=count, period=period)]})
        self._read(key)
        if len(self.history) + self.count > self.num_requests:
            return self.throttle_failure()
        self._count(self.count)
        return True

    def wait(self):
        """Seconds until `count` submits are free: the newest of those that must expire first."""
        must_expire = self.history[self.num_requests - self.count :]
        return max(must_expire[0] + self.duration - self.now, 1) if must_expire else None


def submit_rate_exceeded(wait: float | None) -> exceptions.Throttled:
    count, period = settings.MLQ_SUBMIT_RATE.split("/")
    exc = exceptions.Throttled(wait)
    exc.wait = exc.wait or 1  # DRF has no estimate when a race overfilled the window; Retry-After needs one
    exc.detail = exceptions.ErrorDetail(
        SUBMIT_RATE_EXCEEDED.format(count=count, period=period, wait=exc.wait), code="throttled"
    )
    return exc


def dry_run_rate_exceeded(wait: float | None) -> exceptions.Throttled:
    count, period = settings.MLQ_DRY_RUN_RATE.split("/")
    exc = exceptions.Throttled(wait)
    exc.wait = exc.wait or 1
    exc.detail = exceptions.ErrorDetail(
        DRY_RUN_RATE_EXCEEDED.format(count=count, period=period, wait=exc.wait), code="throttled"
    )
    return exc


def check_submit_rate(request) -> None:
    """For a submit outside DRF's views (the submit page): raises Throttled past the rate."""
    throttle = SubmitRateThrottle()
    if not throttle.allow_request(request, None):
        raise submit_rate_exceeded(throttle.wait())
