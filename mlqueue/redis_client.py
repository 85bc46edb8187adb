"""The one way mlqueue opens a Redis client, and the timeouts every Redis user keeps to.

Redis is a cache here (DESIGN.md): a Redis that is down or hung (SIGSTOP, a lost network) must
cost a request, a heartbeat or a scheduler pass a fraction of a second, never a hang. Every
command therefore has both timeouts, and a live Redis answers in well under a millisecond:
- `CONNECT_TIMEOUT_S`: to open the socket (a host that does not answer at all);
- `COMMAND_TIMEOUT_S`: for each reply (a Redis that accepted the connection but is hung).
The leader's wake-up subscription keeps the same two: it waits for messages with
`PubSub.get_message(timeout=...)`, which sets its own wait, so the socket timeout bounds only
the SUBSCRIBE and a message already arriving.

Clients that block in Redis on purpose need a socket timeout above their longest block:
channels_redis's BZPOPMIN and Celery's BRPOP (mlqueue/channel_layer.py, settings.py). Those are
built by their libraries from settings; the constants below are theirs too.
"""

import redis
from django.conf import settings

CONNECT_TIMEOUT_S = 0.5
COMMAND_TIMEOUT_S = 0.5
# Clients whose commands block in Redis for BLOCKING_WAIT_S: the channel layer, Celery's broker.
BLOCKING_WAIT_S = 1
BLOCKING_CONNECT_TIMEOUT_S = 1
BLOCKING_SOCKET_TIMEOUT_S = 2
assert BLOCKING_SOCKET_TIMEOUT_S > BLOCKING_WAIT_S


def redis_client(url: str | None = None) -> redis.Redis:
    """A client of `url` (settings.REDIS_URL by default) with mlqueue's command timeouts.
    Opening one connects to nothing yet: the first command does."""
    return redis.Redis.from_url(
        url or settings.REDIS_URL, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=COMMAND_TIMEOUT_S
    )
