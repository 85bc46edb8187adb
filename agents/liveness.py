"""When each node was last heard from. Kept in Redis (a sorted set: node -> last heartbeat),
never in Postgres: 2,500 nodes every 5 s would be 500 writes a second. Embedded (no Redis),
the local file cache stands in, shared by the processes of the one machine."""
import redis
from django.conf import settings
from django.core.cache import cache

ZSET = "mlq:heartbeats"
KEY = "mlq:hb:{}"
TTL_S = 24 * 3600
_client = None


def _redis():
    global _client
    if _client is None and settings.REDIS_URL:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    return _client


def record(node_name: str, at: float) -> None:
    client = _redis()
    if client is not None:
        client.zadd(ZSET, {node_name: at})
    else:
        cache.set(KEY.format(node_name), at, TTL_S)


def last_seen(node_names: list[str]) -> dict[str, float]:
    """node -> epoch seconds of its last heartbeat (absent if never heard from)."""
    client = _redis()
    if client is not None:
        if not node_names:
            return {}
        scores = client.zmscore(ZSET, node_names)
        return {name: score for name, score in zip(node_names, scores) if score is not None}
    found = cache.get_many([KEY.format(name) for name in node_names])
    prefix = len(KEY.format(""))
    return {key[prefix:]: value for key, value in found.items()}


def forget_all() -> None:
    """For tests: every node as never heard from."""
    client = _redis()
    if client is not None:
        client.delete(ZSET)
    cache.clear()
