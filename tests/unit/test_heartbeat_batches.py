"""A batch of socket heartbeats leaves no request waiting: each is answered, or refused with the
failure that kept its batch from being answered, or cancelled with the batch (agents/batches.py)."""

import asyncio

import pytest

from agents import batches
from agents.heartbeats import Beat

BEATS = [Beat(f"node-{i}", f"digest-{i}", {"tasks": []}) for i in range(3)]


@pytest.fixture(autouse=True)
def short_wait(settings):
    settings.MLQ_HEARTBEAT_BATCH_WAIT_S = 0.001
    settings.MLQ_HEARTBEAT_BATCH_MAX = 200


def test_each_request_of_a_batch_gets_its_own_outcome(monkeypatch):
    async def answered(beats):
        return [{"name": beat.name} for beat in beats]

    monkeypatch.setitem(batches._ANSWERS, batches.HEARTBEATS, answered)

    async def scenario():
        return await asyncio.gather(*(batches.answer_heartbeat(beat) for beat in BEATS))

    assert asyncio.run(scenario()) == [{"name": "node-0"}, {"name": "node-1"}, {"name": "node-2"}]


def test_a_batch_whose_answer_fails_refuses_each_request_with_that_failure(monkeypatch):
    """The thread hop itself failing (not a statement: those are answered as refusals inside
    it) reaches every waiter, which would otherwise wait for ever, its socket stuck."""

    async def failing(beats):
        raise RuntimeError("the thread hop failed")

    monkeypatch.setitem(batches._ANSWERS, batches.HEARTBEATS, failing)

    async def scenario():
        return await asyncio.wait_for(asyncio.gather(*(batches.answer_heartbeat(beat) for beat in BEATS)), 10)

    outcomes = asyncio.run(scenario())
    assert [(type(outcome), str(outcome)) for outcome in outcomes] == [(RuntimeError, "the thread hop failed")] * 3


def test_the_next_batch_is_answered_after_one_failed(monkeypatch):
    calls = []

    async def failing_once(beats):
        calls.append(len(beats))
        if len(calls) == 1:
            raise RuntimeError("the thread hop failed")
        return [{"name": beat.name} for beat in beats]

    monkeypatch.setitem(batches._ANSWERS, batches.HEARTBEATS, failing_once)

    async def scenario():
        first = await batches.answer_heartbeat(BEATS[0])
        second = await asyncio.wait_for(batches.answer_heartbeat(BEATS[1]), 10)
        return first, second

    first, second = asyncio.run(scenario())
    assert isinstance(first, RuntimeError) and second == {"name": "node-1"} and calls == [1, 1]


def test_a_drain_cancelled_mid_batch_cancels_its_waiters(monkeypatch):
    started = []

    async def never(beats):
        started.append(len(beats))
        await asyncio.Event().wait()

    monkeypatch.setitem(batches._ANSWERS, batches.HEARTBEATS, never)

    async def scenario():
        waiting = [asyncio.ensure_future(batches.answer_heartbeat(beat)) for beat in BEATS]
        while not started:
            await asyncio.sleep(0.001)
        batches._queues[asyncio.get_running_loop()][batches.HEARTBEATS].draining.cancel()
        return await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)

    outcomes = asyncio.run(scenario())
    assert started == [3] and [type(outcome) for outcome in outcomes] == [asyncio.CancelledError] * 3
