"""The channel layer: channels_redis's, with a BZPOPMIN short enough for a short socket timeout.

Every command to Redis needs a socket timeout, or a Redis that stops answering (SIGSTOP, a lost
network) holds a scheduler pass or a request on its group_send for ever. The layer's receive
loop blocks in BZPOPMIN for `brpop_timeout` seconds, so the socket timeout must be longer than
that: with channels_redis's 5 s it must exceed 5 s (redis-py 8's own default of exactly 5 s
ends the loop of every socket idle for 5 s, and live views stop updating). A 1 s BZPOPMIN
costs one command a second per web process and lets the timeout be 2 s."""

from channels_redis.core import RedisChannelLayer

from mlqueue.breaker import RedisBreaker
from mlqueue.redis_client import BLOCKING_SOCKET_TIMEOUT_S, BLOCKING_WAIT_S

BZPOPMIN_S = BLOCKING_WAIT_S
SOCKET_TIMEOUT_S = BLOCKING_SOCKET_TIMEOUT_S


class ShortWaitRedisChannelLayer(RedisChannelLayer):
    brpop_timeout = BZPOPMIN_S


TRY_AGAIN_LATER = 1013  # the WebSocket close code for "the server cannot serve this now"
_groups = RedisBreaker("WebSocket groups (live views and agents' wake-ups wait for the next heartbeat or reload)")


async def join_group(consumer, group: str) -> bool:
    """Add the consumer's channel to `group`; with the layer's Redis away, close the socket
    with 1013 (try again later) instead of failing the handshake with a traceback. The agent's
    heartbeats and a page's reload carry the same news meanwhile."""
    try:
        await consumer.channel_layer.group_add(group, consumer.channel_name)
    except Exception as exc:  # channels_redis raises redis-py's errors, or OSError, or a timeout
        _groups.failed(exc)
        await consumer.close(code=TRY_AGAIN_LATER)
        return False
    _groups.worked()
    return True
