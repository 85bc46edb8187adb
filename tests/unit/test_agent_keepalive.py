"""An agent's WebSocket is kept alive by its heartbeats while it carries them, and by pings only
while it does not: websockets' own keepalive pinged every socket every 20 s, and a fleet whose
sockets opened together after a restart of the web tier sent 2,500 pings at once every 20 s.

The server here is a bare one: it completes the WebSocket handshake, may greet the agent, and
then reads nothing more, so no ping is ever answered: a socket whose peer has gone silent."""

import base64
import hashlib
import json
import socket
import threading
import time

import pytest

from agents.node import heartbeat_socket
from agents.node.client import AgentClient
from agents.node.heartbeat_socket import HeartbeatSocket

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
KEEPALIVE_S = 0.2


class SilentServer:
    """Accepts WebSocket handshakes on 127.0.0.1, sends `greeting` (if any) as a text frame,
    then never reads again. Counts the sockets it took."""

    def __init__(self, greeting: dict | None):
        self.greeting = greeting
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                conn.settimeout(10)  # a client that connects and says nothing ends, not the server
                self._greet(self._wrap(conn))
            except (OSError, StopIteration):  # a client that went away or sent no WebSocket handshake
                conn.close()

    def _wrap(self, conn: socket.socket) -> socket.socket:
        return conn

    def _greet(self, conn: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(4096)
            if not chunk:
                raise ConnectionError("closed before its handshake")
            request += chunk
        key = next(
            line.split(b":", 1)[1].strip()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + GUID.encode()).digest())
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        if self.greeting is not None:
            payload = json.dumps(self.greeting).encode()
            conn.sendall(bytes([0x81, len(payload)]) + payload)  # one unmasked text frame
        self.accepted.append(conn)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture(autouse=True)
def short_keepalive(monkeypatch):
    monkeypatch.setattr(heartbeat_socket, "KEEPALIVE_S", KEEPALIVE_S)
    monkeypatch.setattr(heartbeat_socket, "RECONNECT_S", 0.05)  # reopened at once


def agent_on(server: SilentServer) -> tuple[HeartbeatSocket, threading.Event, threading.Thread]:
    stop = threading.Event()
    agent = HeartbeatSocket(AgentClient(f"http://127.0.0.1:{server.port}"), "n1", on_wake=lambda: None, stopping=stop)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    return agent, stop, thread


def until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_socket_without_heartbeats_on_it_is_pinged_and_closed_when_the_pong_is_late():
    server = SilentServer(greeting=None)  # a server that never says it takes heartbeats
    agent, stop, thread = agent_on(server)
    try:
        assert until(lambda: len(server.accepted) >= 1)
        # silent for KEEPALIVE_S, pinged, no pong within KEEPALIVE_S: closed and opened again
        assert until(lambda: len(server.accepted) >= 2, timeout=2 * KEEPALIVE_S + heartbeat_socket.CLOSE_TIMEOUT_S + 2)
        assert not agent.carries_heartbeats
    finally:
        stop.set()
        server.close()
        thread.join(5)


def test_a_socket_carrying_heartbeats_is_not_pinged_its_heartbeats_keep_it_alive():
    server = SilentServer(greeting={"hello": {"heartbeats": True}})
    agent, stop, thread = agent_on(server)
    try:
        assert until(lambda: agent.carries_heartbeats)
        # silent: an unanswered ping would have closed it (and it would have been opened again)
        time.sleep(3 * KEEPALIVE_S + heartbeat_socket.CLOSE_TIMEOUT_S + 0.5)
        assert agent.carries_heartbeats and len(server.accepted) == 1
        # its keepalive: a heartbeat whose reply is late closes the socket, HTTP carries it,
        # without waiting long for a closing handshake the silent server never sends
        began = time.monotonic()
        assert agent.heartbeat({"tasks": []}, timeout=KEEPALIVE_S) is None
        assert time.monotonic() - began < KEEPALIVE_S + heartbeat_socket.CLOSE_TIMEOUT_S + 1
        # closed: not carrying heartbeats, or (RECONNECT_S is short here) already opened again
        assert until(lambda: not agent.carries_heartbeats or len(server.accepted) >= 2)
    finally:
        stop.set()
        server.close()
        thread.join(5)
