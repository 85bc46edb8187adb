"""The Django cache: Redis, with this process's memory standing in while Redis fails.

mlqueue keeps nothing in the cache that it cannot lose (SECURITY.md, teams/login_limits.py): the
submit throttle, the login limits and the queue positions. So a Redis that is down or restarted
must cost a request nothing but those counts: while Redis fails, each web process counts in its
own memory (the limits still hold, per process), and Redis is not asked again for a few seconds
(mlqueue.breaker), so no request waits on its timeout. One line is logged when the fallback
starts and one when Redis is back; what was counted in memory meanwhile is then dropped, as Redis
is the record again."""

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mlqueue.breaker import RedisBreaker

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)  # not a wrong command: Redis did not answer
# A login counter per user name and address tried: room for an attack's worth of names.
MEMORY_ENTRIES = 10_000


# Per process and Redis location, not per backend instance: Django makes a cache backend per
# thread, and under ASGI per request.
_breakers: dict[str, RedisBreaker] = {}


def breaker_for(location: str) -> RedisBreaker:
    if location not in _breakers:
        _breakers[location] = RedisBreaker("the cache (submit and login limits count in each process meanwhile)")
    return _breakers[location]


# Connection pools per process and server: see SharedPoolsClient.
_pools: dict[str, dict] = {}
_clients: dict = {}  # pool -> its redis.Redis


class SharedPoolsClient(RedisCacheClient):
    """Django's Redis client, with its connection pools kept per process rather than per client.
    Django builds a cache backend, and with it a client and its pools, per thread and under
    ASGI per request: every request that touched the cache (the submit throttle, the API
    token check) opened a new connection to Redis and closed it. redis-py's pools are
    thread-safe, start afresh after a fork, and check a connection as they hand it out."""

    def __init__(self, servers, **options):
        super().__init__(servers, **options)
        self._pools = _pools.setdefault(repr((servers, sorted(options.items()))), {})

    def get_client(self, key=None, *, write=False):
        """One redis.Redis per pool and process, not one per cache call: building one fills its
        table of ~170 reply handlers, 0.2 ms of CPU (three per submit: token generation, throttle get
        and set). A Redis object holds no connection of its own (it takes one from the pool
        per command), so threads share it safely."""
        pool = self._get_connection_pool(write)
        if pool not in _clients:
            _clients[pool] = super().get_client(key, write=write)
        return _clients[pool]


class FallbackRedisCache(RedisCache):
    """Django's RedisCache, answered from this process's memory while Redis fails."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedPoolsClient
        # LocMemCache instances of one name share their storage: one memory per process.
        self.memory = LocMemCache(f"mlqueue-fallback:{server}", {**params, "OPTIONS": {"MAX_ENTRIES": MEMORY_ENTRIES}})
        self.breaker = breaker_for(str(server))

    def _either(self, name: str, *args):
        """Redis's answer to `name(*args)`; this process's memory's while Redis fails."""
        if self.breaker.allowed():
            recovering = self.breaker.failing
            try:
                result = getattr(super(), name)(*args)
            except REDIS_DOWN as exc:
                self.breaker.failed(exc)
            else:
                self.breaker.worked()
                if recovering:
                    self.memory.clear()
                return result
        return getattr(self.memory, name)(*args)

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._either("add", key, value, timeout, version)

    def get(self, key, default=None, version=None):
        return self._either("get", key, default, version)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._either("set", key, value, timeout, version)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None):
        return self._either("touch", key, timeout, version)

    def delete(self, key, version=None):
        return self._either("delete", key, version)

    def get_many(self, keys, version=None):
        return self._either("get_many", keys, version)

    def has_key(self, key, version=None):
        return self._either("has_key", key, version)

    def incr(self, key, delta=1, version=None):
        return self._either("incr", key, delta, version)

    def set_many(self, data, timeout=DEFAULT_TIMEOUT, version=None):
        return self._either("set_many", data, timeout, version)

    def delete_many(self, keys, version=None):
        return self._either("delete_many", keys, version)

    def clear(self):
        return self._either("clear")
