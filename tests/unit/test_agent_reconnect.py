"""An agent whose WebSocket closed opens it again after a random pause that backs off while the
server keeps refusing: a restart of the web tier closes 2,500 agents' sockets in the same
instant, and they must not all come back in the same instant, nor retry in step."""

import random
import socket
import threading

import pytest

from agents.node.client import AgentClient
from agents.node.heartbeat_socket import RECONNECT_MAX_S, RECONNECT_S, HeartbeatSocket, reconnect_delay


@pytest.mark.parametrize(
    ("failures", "longest"),
    [(0, RECONNECT_S), (1, 2 * RECONNECT_S), (2, 4 * RECONNECT_S), (4, 16 * RECONNECT_S), (5, RECONNECT_MAX_S)],
)
def test_the_pause_is_drawn_within_a_window_that_doubles_with_each_failure(failures, longest):
    assert reconnect_delay(failures, lambda: 0.0) == 0.0
    assert reconnect_delay(failures, lambda: 0.5) == longest / 2
    assert reconnect_delay(failures, lambda: 1.0) == longest


def test_a_fleet_reconnecting_at_once_is_spread_over_the_window():
    draw = random.Random(19).random
    pauses = sorted(reconnect_delay(0, draw) for _ in range(2500))
    busiest = max(sum(1 for p in pauses if start <= p < start + 0.1) for start in pauses)
    # 2,500 over 3 s is 83 in any tenth of a second on average; never the whole fleet at once.
    assert 0.0 <= pauses[0] and pauses[-1] <= RECONNECT_S
    assert busiest < 150, busiest


def test_a_long_run_of_failures_is_capped():
    assert reconnect_delay(1000, lambda: 1.0) == RECONNECT_MAX_S


class _CountingStop(threading.Event):
    """The agent's stop event, noting each pause the socket takes and stopping after `attempts`."""

    def __init__(self, attempts: int):
        super().__init__()
        self.attempts, self.pauses = attempts, []

    def wait(self, timeout=None):
        self.pauses.append(timeout)
        if len(self.pauses) >= self.attempts:
            self.set()
        return self.is_set()


def test_an_agent_facing_a_server_that_refuses_backs_off_with_random_pauses():
    with socket.socket() as closed:  # a port nobody listens on: every connect is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    stop = _CountingStop(attempts=6)
    heartbeats = HeartbeatSocket(AgentClient(f"http://127.0.0.1:{port}"), "n1", on_wake=lambda: None, stopping=stop)
    heartbeats.run()
    assert not heartbeats.carries_heartbeats
    # after the n-th refusal in a row, a pause within RECONNECT_S x 2^n
    for failures, pause in enumerate(stop.pauses, start=1):
        assert 0.0 <= pause <= min(RECONNECT_MAX_S, RECONNECT_S * 2**failures), (failures, pause)
    assert len(set(stop.pauses)) == len(stop.pauses)  # drawn, not a fixed step
