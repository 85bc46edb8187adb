"""One POST with an overall deadline. httpx's timeouts are per operation (connect, each read,
each write): a receiver that answers a byte every few seconds never trips them and holds the
worker for minutes, past its claim on the delivery. Here every network operation is given what
is left of one deadline, and fails once none is left (httpcore's network backends are the seam).
Only the status line and headers are read: the receiver's body never is."""

import time
from contextlib import contextmanager
from dataclasses import dataclass

import httpcore
import httpx

PAST_DEADLINE = "no answer within {seconds:g} s (the whole attempt's deadline)"


def time_left(deadline: float, seconds: float, timeout: float | None) -> float:
    """What an operation may wait: its own timeout, cut to what is left of the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout(PAST_DEADLINE.format(seconds=seconds))
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation waits at most until the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, *, deadline: float, seconds: float):
        self._stream, self._deadline, self._seconds = stream, deadline, seconds

    def left(self, timeout: float | None) -> float:
        return time_left(self._deadline, self._seconds, timeout)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._deadline_said():
            return self._stream.read(max_bytes, self.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with self._deadline_said():
            self._stream.write(buffer, self.left(timeout))

    @contextmanager
    def _deadline_said(self):
        """A timeout that the deadline cut short says so, not a bare "timed out"."""
        try:
            yield
        except httpcore.TimeoutException:
            if time.monotonic() < self._deadline:
                raise
            raise httpcore.ReadTimeout(PAST_DEADLINE.format(seconds=self._seconds)) from None

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> "DeadlineStream":
        inner = self._stream.start_tls(ssl_context, server_hostname, self.left(timeout))
        return DeadlineStream(inner, deadline=self._deadline, seconds=self._seconds)

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """The system's sockets, each operation bounded by what is left of the deadline."""

    def __init__(self, seconds: float):
        self._seconds = seconds
        self._deadline = time.monotonic() + seconds
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        left = time_left(self._deadline, self._seconds, timeout)
        stream = self._backend.connect_tcp(host, port, left, local_address, socket_options)
        return DeadlineStream(stream, deadline=self._deadline, seconds=self._seconds)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class Answer:
    status: int
    location: str  # the Location header ("" without one)


def post(url: str, *, body: bytes, headers: dict, seconds: float, sni_hostname: str | None = None) -> Answer:
    """POST `body` to `url` (an address, not a name: no proxy, no redirect followed) and return
    the answer's status, all within `seconds`; raises on any failure."""
    parsed = httpx.URL(url)  # percent-encodes what the path holds beyond ASCII
    target = httpcore.URL(scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path)
    extensions = {"timeout": dict.fromkeys(("connect", "read", "write", "pool"), seconds)}
    if sni_hostname:
        extensions["sni_hostname"] = sni_hostname
    with httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False), network_backend=DeadlineBackend(seconds)
    ) as pool:
        with pool.stream("POST", target, headers=list(headers.items()), content=body, extensions=extensions) as answer:
            # Header names as the receiver sent them ("Location"): compared without case.
            location = next((value for name, value in answer.headers if name.lower() == b"location"), b"")
            location = location.decode("latin-1")
            return Answer(answer.status, location)
