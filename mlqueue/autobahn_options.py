"""autobahn (daphne's WebSocket protocol) builds text for debug lines whether debug is on or not.

- It logs its 29 options for every socket it opens with pprint.pformat: 1.1 ms of the event loop
  per socket here, a fifth of a web process's time while it takes 800 sockets at once, as after
  a restart (py-spy on bench/heartbeats.py --open-spread 0). Its module's pformat becomes repr,
  50 µs: the same text on one line, were that debug line ever written.
- For every frame it reads and every one it sends it colours a method's name and two values
  for a debug line (`hltype`, `hlval`: three click.style calls each), ~10 µs of the event loop
  per socket heartbeat, a request and a reply (py-spy --gil on bench/heartbeats.py --transport
  ws: 4.5% of a web process's time). In the two modules that do it per frame they become lazy:
  the same text, built only if the line is written."""

from autobahn import util


def make_debug_lines_cheap() -> None:
    try:
        from autobahn.twisted import websocket
        from autobahn.websocket import protocol
    except ImportError:  # served by another ASGI server: nothing to do
        return
    protocol.pformat = repr
    for module in (protocol, websocket):
        module.hltype, module.hlval = Highlighted.of(util.hltype), Highlighted.of(util.hlval)


class Highlighted:
    """`highlight(value)`, computed when formatted (a log line written), not when made."""

    __slots__ = ("highlight", "value")

    def __init__(self, highlight, value):
        self.highlight, self.value = highlight, value

    @classmethod
    def of(cls, highlight):
        return lambda value: cls(highlight, value)

    def __str__(self) -> str:
        return self.highlight(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)
