"""The agent's WebSocket to the server: its heartbeats, while the server takes them there, and
the server's nudges to heartbeat now.

Heartbeats are sent on it once the server has greeted the socket with
`{"hello": {"heartbeats": true}}` (agents/consumers.py); until then, when it drops, when a
reply is late, or against a server that never says hello, `heartbeat()` answers None and the
agent heartbeats over HTTP, as it always could. The replies are the HTTP heartbeat's, refusals
included, so the agent obeys them the same way.

A closed socket is opened again after a random pause (reconnect_delay): a restart of the web
tier closes every agent's socket in the same instant, and 2,500 agents reconnecting in step
would hit it all at once, and again together after each refusal."""

import itertools
import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.node.client import AgentClient, ApiError

log = logging.getLogger("mlqueue.agent")
RECONNECT_S = 3.0  # a socket that closes is opened again within this, on average half of it
RECONNECT_MAX_S = 60.0  # the longest pause, after attempts failing in a row (HTTP carries on meanwhile)
# How long a handshake may take. Long: the agent heartbeats over HTTP meanwhile, and a server
# taking a fleet's sockets back after a restart answers late; agents that gave up after 5 s
# came back to be answered again, so the server spent the storm on handshakes nobody waited for
# (bench/heartbeats.py --open-spread 0: 35 of 2,500 sockets open after two minutes).
OPEN_TIMEOUT_S = 30.0
KEEPALIVE_S = 20.0  # a socket without heartbeats on it: pinged after this long silent (see _hold)
# How long closing a socket waits for the server's side of the closing handshake. A server that
# went silent never sends it, and a late heartbeat reply closes the socket in the heartbeat's
# own thread: with websockets' default (10 s) the heartbeat then went over HTTP 10 s late.
CLOSE_TIMEOUT_S = 1.0


def reconnect_delay(failures: int, draw: Callable[[], float] = random.random) -> float:
    """The pause before opening the socket again, after `failures` attempts in a row that did
    not carry heartbeats (0: it had carried them until it closed): a moment drawn at random
    within RECONNECT_S, doubled for each failure up to RECONNECT_MAX_S ("full jitter"). The
    draw spreads a fleet's reconnects over the window; the doubling backs off from a server
    that keeps refusing."""
    return draw() * min(RECONNECT_MAX_S, RECONNECT_S * 2 ** min(failures, 16))


@dataclass
class _Waiter:
    """A heartbeat sent on the socket, until its reply comes (None: the socket closed first)."""

    done: threading.Event = field(default_factory=threading.Event)
    reply: dict | None = None


class HeartbeatSocket:
    def __init__(self, client: AgentClient, name: str, *, on_wake: Callable[[], None], stopping: threading.Event):
        self.client, self.name, self.on_wake, self.stopping = client, name, on_wake, stopping
        self._lock = threading.Lock()
        self._open = None  # the connection, once the server said it takes heartbeats on it
        self._waiting: dict[int, _Waiter] = {}
        self._ids = itertools.count(1)

    @property
    def carries_heartbeats(self) -> bool:
        return self._open is not None

    def run(self) -> None:
        """Hold the socket open, reconnecting after a pause (reconnect_delay) whenever it closes."""
        try:
            from websockets.sync.client import connect
        except ImportError:
            return
        failures = 0
        while not self.stopping.is_set():
            try:
                with connect(
                    self.client.websocket_url(self.name),
                    open_timeout=OPEN_TIMEOUT_S,
                    additional_headers={"Authorization": f"Bearer {self.client.token}"},
                    ping_interval=None,  # see _hold
                    close_timeout=CLOSE_TIMEOUT_S,
                ) as connection:
                    self._hold(connection)
            except Exception as exc:  # any failure: heartbeats go over HTTP until it reconnects
                log.debug("%s: the server's socket closed (%s)", self.name, exc)
            failures = 0 if self._closed() else failures + 1
            self.stopping.wait(reconnect_delay(failures))

    def _hold(self, connection) -> None:
        """Read the server's messages until the socket closes. While it carries heartbeats they
        are its keepalive: a reply later than the heartbeat's timeout closes it (`heartbeat`).
        Only a socket that does not (before the server's hello, or a server that never says it)
        is pinged, every KEEPALIVE_S of silence, and closed if the pong is late. websockets'
        own keepalive pinged every socket every 20 s: for 2,500 agents, 125 pings and pongs a
        second on top of their 500 heartbeats, for nothing the heartbeats do not already show
        (their effect on the heartbeats' latency was not separable from the machine's noise:
        BENCHMARKS.md, "the liveness flush")."""
        while True:
            try:
                text = connection.recv(timeout=KEEPALIVE_S)
            except TimeoutError:
                if self._open is not connection and not connection.ping().wait(KEEPALIVE_S):
                    raise TimeoutError(f"no pong within {KEEPALIVE_S:.0f} s") from None
                continue
            self._received(connection, json.loads(text))

    def _received(self, connection, message: dict) -> None:
        if "hello" in message:
            if message["hello"].get("heartbeats"):
                log.info("%s: heartbeating over the server's WebSocket", self.name)
                self._open = connection
        elif "wake" in message:
            self.on_wake()
        elif "id" in message:
            with self._lock:
                waiter = self._waiting.pop(message["id"], None)
            if waiter is not None:  # else its sender gave up on it and went over HTTP
                waiter.reply = message
                waiter.done.set()

    def _closed(self) -> bool:
        """Forget the socket; whether it had carried heartbeats."""
        with self._lock:
            carried = self._open is not None
            if carried:
                log.info("%s: the server's WebSocket closed: heartbeating over HTTP until it reopens", self.name)
            self._open = None
            waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            waiter.done.set()
        return carried

    def heartbeat(self, body: dict, *, timeout: float) -> dict | None:
        """The server's reply to this heartbeat, sent on the socket; None when the socket does
        not carry it (closed, or no reply within `timeout`): send it over HTTP then. Raises
        ApiError when the server refuses it, as the HTTP client does."""
        connection = self._open
        if connection is None:
            return None
        waiter, id_ = _Waiter(), next(self._ids)
        with self._lock:
            self._waiting[id_] = waiter
        try:
            connection.send(json.dumps({"type": "heartbeat", "id": id_, "body": body}))
            answered = waiter.done.wait(timeout)
        except Exception as exc:  # the connection broke under the send
            log.debug("%s: heartbeat not sent on the socket (%s)", self.name, exc)
            answered = False
        finally:
            with self._lock:
                self._waiting.pop(id_, None)
        if not answered:
            connection.close()  # a late or lost reply: start afresh, and use HTTP meanwhile
            return None
        if waiter.reply is None:
            return None
        if waiter.reply["status"] != 200:
            raise ApiError(waiter.reply["status"], json.dumps(waiter.reply["body"])[:500])
        return waiter.reply["body"]
