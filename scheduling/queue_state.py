"""The queue order the leader's last pass published, as the web reads it.

One definition of where it lives and in what form: the leader writes it after each pass
(`publish_queue_order` in scheduling/leader/worker.py), the queue page and `/api/v1/queue`
read positions from it. It is in the cache (Redis in production), not Postgres: a lost order
costs a page its positions until the next pass, nothing else."""

from collections.abc import Iterable

from django.core.cache import cache

QUEUE_ORDER_KEY = "mlq:queue-order"
# Long enough to outlive any pause between passes; short enough that a scheduler that stopped
# publishing does not leave an order that no longer means anything.
QUEUE_ORDER_TTL_S = 600


def stored_order(order: Iterable[int]) -> list[int]:
    """The stored form: the pending job ids, first in line first."""
    return list(order)


def queue_positions() -> dict[int, int]:
    """job id -> its place in line (1 = next), for the jobs the last pass ordered."""
    return {job_id: index + 1 for index, job_id in enumerate(cache.get(QUEUE_ORDER_KEY) or [])}
