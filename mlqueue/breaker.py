"""A circuit breaker for Redis, which mlqueue treats as a cache: after an error, Redis is not
asked again for a few seconds, so that no heartbeat, submit or pass waits on a dead Redis's
timeout each time. One line is logged when it goes away and one when it is back."""

import logging
import time

import redis
from django.conf import settings

from mlqueue.redis_client import redis_client

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5.0


class RedisBreaker:
    def __init__(self, what: str):
        self.what = what
        self._client = None
        self.down_until = 0.0

    def client(self) -> redis.Redis | None:
        """The client, or None while Redis is held to be down (or not configured)."""
        if not settings.REDIS_URL or time.monotonic() < self.down_until:
            return None
        if self._client is None:
            self._client = redis_client()
        return self._client

    def allowed(self) -> bool:
        return time.monotonic() >= self.down_until

    def failed(self, exc: Exception) -> None:
        if not self.failing:
            log.warning("Redis unavailable for %s (%s); carrying on without it", self.what, exc)
        self.down_until = time.monotonic() + RETRY_AFTER_S

    def worked(self) -> None:
        if self.failing:
            log.warning("Redis is back for %s", self.what)
        self.down_until = 0.0

    @property
    def failing(self) -> bool:
        return self.down_until != 0.0
