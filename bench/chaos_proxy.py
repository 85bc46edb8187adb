"""The fault campaign's network partition: agent -> proxy -> web, on one port that stays the
same across a cut, so the agent reconnects to it when the partition heals.

A cut drops every open connection and then accepts new ones without ever answering or
forwarding them: a partition as a cut cable or a firewall DROP makes it, where the agent's
requests hang until its own timeout (a refused connection would fail fast, which is the
kinder case). `restore()` closes what was held and forwards again."""

import socket
import threading


class PartitionProxy:
    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.live: list[socket.socket] = []  # both ends of every forwarded connection
        self.held: list[socket.socket] = []  # connections accepted during a cut, never answered
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, name="chaos-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut:
                    self.held.append(client)
                    continue
            self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()  # the web tier itself is down: the agent sees a failed connection
            return
        with self.lock:
            self.live += [client, upstream]
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close_all([source, sink])
            with self.lock:
                self.live = [sock for sock in self.live if sock not in (source, sink)]

    def cut(self) -> None:
        with self.lock:
            self.is_cut = True
            dropped, self.live = self.live, []
        _close_all(dropped)

    def restore(self) -> None:
        with self.lock:
            self.is_cut = False
            held, self.held = self.held, []
        _close_all(held)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            everything, self.live, self.held = self.live + self.held, [], []
        _close_all(everything)


def _close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
