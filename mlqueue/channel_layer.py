"""The channel layer: channels_redis's, with a BZPOPMIN short enough for a short socket timeout.

Every command to Redis needs a socket timeout, or a Redis that stops answering (SIGSTOP, a lost
network) holds a scheduler pass or a request on its group_send for ever. The layer's receive
loop blocks in BZPOPMIN for `brpop_timeout` seconds, so the socket timeout must be longer than
that: with channels_redis's 5 s it must exceed 5 s (redis-py 8's own default of exactly 5 s
ends the loop of every socket idle for 5 s, and live views stop updating). A 1 s BZPOPMIN
costs one command a second per web process and lets the timeout be 2 s."""

import asyncio
import os
import threading
import time

from asgiref.sync import async_to_sync
from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool

from mlqueue.breaker import RedisBreaker
from mlqueue.redis_client import BLOCKING_CONNECT_TIMEOUT_S, BLOCKING_SOCKET_TIMEOUT_S, BLOCKING_WAIT_S

BZPOPMIN_S = BLOCKING_WAIT_S
SOCKET_TIMEOUT_S = BLOCKING_SOCKET_TIMEOUT_S


# A group_send is a few commands, each bounded by the socket timeout; this bounds the whole.
SEND_TIMEOUT_S = BLOCKING_CONNECT_TIMEOUT_S + 3 * SOCKET_TIMEOUT_S


# Redis connections per event loop (a web process's, the send loop's). channels_redis's pool
# opens a connection for every command in flight: a restart of the web tier, 2,500 agents'
# sockets joining their groups at once, had each process opening connections by the hundred,
# stalling its loop ("Timeout connecting to server") and then refused past redis-py's 100 ("Too
# many connections"): the sockets closed with 1013 and came back to do it again. Bounded, and
# blocking for a free connection, the burst takes its turn on a few reused connections (each
# command is a round trip well under a millisecond), one BZPOPMIN receive among them.
POOL_MAX = 8
POOL_WAIT_S = SEND_TIMEOUT_S


class ShortWaitRedisChannelLayer(RedisChannelLayer):
    brpop_timeout = BZPOPMIN_S

    def create_pool(self, index):
        host = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(
            host.pop("address"), max_connections=POOL_MAX, timeout=POOL_WAIT_S, **host
        )

    async def _brpop_with_clean(self, index, channel, timeout):
        """One BZPOPMIN of the layer's receive loop, which repeats until a message comes: not
        for a task whose cancellation was lost on the way. Python 3.11's asyncio.wait_for, which
        redis-py wraps around every command it sends, returns the command's result and drops
        the cancellation when both land in the same turn of the loop (cpython#86296). A
        reader cancelled as its socket closed then read on for ever: its consumer waited on it,
        and an event loop closing with it (async_to_sync, asyncio.run) never finished. A
        requested cancellation that was not taken back (Task.uncancel, as asyncio.timeout does
        for its own) ends the loop here, within one BZPOPMIN of the request."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError("cancelled, though a library's wait_for dropped the cancellation")
        return await super()._brpop_with_clean(index, channel, timeout)

    async def group_add(self, group, channel):
        """channels_redis's two commands (ZADD, then EXPIRE) in one round trip."""
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        key = self._group_key(group)
        async with self.connection(self.consistent_hash(group)).pipeline(transaction=False) as pipe:
            pipe.zadd(key, {channel: time.time()})
            pipe.expire(key, self.group_expiry)
            await pipe.execute()


class _SendLoop:
    """One event loop per process, in a daemon thread, for the sends of sync code (a submit's
    on_commit, the leader's passes, firers, Celery tasks). async_to_sync would start a thread
    and an event loop for each send, and channels_redis, whose connections belong to a loop, a
    new Redis connection: about 6 ms of CPU a message. Started again in a forked child, which
    inherits the loop but not its thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def run(self, coroutine, timeout: float):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                self._loop, self._pid = asyncio.new_event_loop(), os.getpid()
                threading.Thread(target=self._loop.run_forever, name="channel-layer-sends", daemon=True).start()
            return self._loop


_sends = _SendLoop()


def group_send_from_sync(layer, group: str, message: dict) -> None:
    """layer.group_send from sync code. A Redis layer sends on this process's send loop; any
    other (the in-memory layer of the embedded mode) reaches its consumers only on their own
    loop, where async_to_sync puts the send when called from a request's thread."""
    if isinstance(layer, RedisChannelLayer):
        _sends.run(layer.group_send(group, message), SEND_TIMEOUT_S)
    else:
        async_to_sync(layer.group_send)(group, message)


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


async def leave_group(consumer, group: str) -> None:
    """Take the consumer's channel out of `group` as its socket closes. A failure is noted, not
    raised: when a web process's sockets all close at once (a restart, 2,500 agents reconnecting)
    their discards can exhaust the layer's Redis connections, and a channel left behind costs
    only a message nobody reads until the layer's group expiry drops it."""
    try:
        await consumer.channel_layer.group_discard(group, consumer.channel_name)
    except Exception as exc:  # as in join_group
        _groups.failed(exc)
    else:
        _groups.worked()
