"""The web tier's application makes autobahn's per-socket option dump cheap (one repr, not a
pprint.pformat of 29 options, for a debug line nobody reads)."""

import pprint

from autobahn.twisted.websocket import WebSocketServerProtocol
from autobahn.websocket import protocol

from mlqueue.autobahn_options import dump_options_cheaply


def test_the_option_dump_autobahn_builds_for_each_socket_is_a_repr(monkeypatch):
    monkeypatch.setattr(protocol, "pformat", pprint.pformat)
    dump_options_cheaply()
    options = [(name, None, "WebSocketServerFactory") for name in WebSocketServerProtocol.CONFIG_ATTRS]
    assert protocol.pformat(options) == repr(options)
    assert "\n" not in protocol.pformat(options)


def test_the_asgi_application_applies_it():
    import mlqueue.asgi  # noqa: F401

    assert protocol.pformat is repr
