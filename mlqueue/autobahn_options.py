"""autobahn (daphne's WebSocket protocol) logs its 29 options at debug level for every socket it
opens, and builds that line with pprint.pformat whether debug is on or not: 1.1 ms of the event
loop per socket here, a fifth of a web process's time while it takes 800 sockets at once, as
after a restart (py-spy on bench/heartbeats.py --open-spread 0). Its module's pformat becomes
repr, 50 µs: the same text on one line, were that debug line ever written."""


def dump_options_cheaply() -> None:
    try:
        from autobahn.websocket import protocol
    except ImportError:  # served by another ASGI server: nothing to do
        return
    protocol.pformat = repr
