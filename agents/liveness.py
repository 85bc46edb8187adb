"""When each node was last heard from. Kept in the cache (Redis in production, a local file
cache when embedded), never in Postgres: 2,500 nodes every 5 s would be 500 writes a second."""
from django.core.cache import cache

KEY = "mlq:hb:{}"
TTL_S = 24 * 3600  # a node silent for a day is long LOST; its key may go


def record(node_name: str, at: float) -> None:
    cache.set(KEY.format(node_name), at, TTL_S)


def last_seen(node_names: list[str]) -> dict[str, float]:
    """node -> epoch seconds of its last heartbeat (absent if never, or a day ago)."""
    found = cache.get_many([KEY.format(name) for name in node_names])
    prefix = len(KEY.format(""))
    return {key[prefix:]: value for key, value in found.items()}
