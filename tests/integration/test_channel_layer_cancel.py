"""A channel-layer reader ends when cancelled, also when the cancellation was dropped on its way
(Python 3.11's asyncio.wait_for, around each command redis-py sends, can drop one:
mlqueue/channel_layer.py); on the real layer, against Redis."""

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from mlqueue.channel_layer import BZPOPMIN_S, SOCKET_TIMEOUT_S

ENDS_WITHIN_S = 2 * BZPOPMIN_S + SOCKET_TIMEOUT_S  # the read in flight, then the next one's check


def test_a_reader_whose_cancellation_was_dropped_ends_at_its_next_read():
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()

        async def reader():
            asyncio.current_task().cancel()
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass  # dropped without Task.uncancel(), as the race in wait_for drops it
            return await layer.receive(channel)

        task = asyncio.ensure_future(reader())
        await asyncio.wait([task], timeout=ENDS_WITHIN_S)
        ended = task.done()
        if not ended:
            task.cancel()  # this one is not dropped
            await asyncio.wait([task])
        return ended, task.cancelled()

    assert async_to_sync(scenario)() == (True, True)


def test_a_reader_cancelled_while_reading_ends_and_the_next_reader_gets_the_message():
    layer = get_channel_layer()

    async def scenario():
        channel = await layer.new_channel()
        first = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0.2)  # in its BZPOPMIN
        first.cancel()
        await asyncio.wait([first], timeout=ENDS_WITHIN_S)
        await layer.send(channel, {"type": "agent.wake", "reason": "assigned"})
        message = await asyncio.wait_for(layer.receive(channel), ENDS_WITHIN_S)
        return first.cancelled(), message

    assert async_to_sync(scenario)() == (True, {"type": "agent.wake", "reason": "assigned"})
