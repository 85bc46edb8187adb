"""A TCP proxy a test can cut: agent -> proxy -> web, or web -> proxy -> Postgres. `cut()`
closes every connection and stops listening, as a network partition or a stopped server would;
`restore()` listens again on the same port, as the server coming back. `refuse(prefix)` drops
each new connection whose first bytes are `prefix` (b"GET /ws/": the WebSocket handshakes, while
HTTP requests go through), until `refuse(None)`."""

import socket
import threading


class Proxy:
    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.port = 0
        self.sockets: list[socket.socket] = []
        self.refused: bytes | None = None
        self.restore()

    def refuse(self, prefix: bytes | None) -> None:
        self.refused = prefix

    def restore(self) -> None:
        """Listen (again) on this proxy's port, which the first call picks."""
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.open = True
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while self.open:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.refused is None:
                self._connect(client, b"")
            else:  # its first bytes decide, read without holding up the next accept
                threading.Thread(target=self._screen, args=(client, self.refused), daemon=True).start()

    def _screen(self, client: socket.socket, prefix: bytes) -> None:
        try:
            first = client.recv(65536)
        except OSError:
            first = b""
        if not first or first.startswith(prefix):
            client.close()
            return
        self._connect(client, first)

    def _connect(self, client: socket.socket, first: bytes) -> None:
        try:
            upstream = socket.create_connection(self.target)
            upstream.sendall(first)
        except OSError:
            client.close()
            return
        self.sockets += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.open = False
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone leaves it listening
        except OSError:
            pass
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass
        self.sockets = []
