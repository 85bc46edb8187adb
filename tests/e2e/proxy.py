"""A TCP proxy a test can cut: agent -> proxy -> web, or web -> proxy -> Postgres. `cut()`
closes every connection and stops listening, as a network partition or a stopped server would;
`restore()` listens again on the same port, as the server coming back."""

import socket
import threading


class Proxy:
    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.port = 0
        self.sockets: list[socket.socket] = []
        self.restore()

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
                upstream = socket.create_connection(self.target)
            except OSError:
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
