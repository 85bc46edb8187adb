"""The web tier's application makes autobahn's debug lines cheap: the per-socket option dump
one repr, not a pprint.pformat of 29 options, and the coloured names and values of each frame's
line built only if the line is written, for debug lines nobody reads."""

import pprint
from unittest.mock import patch

from autobahn import util
from autobahn.twisted import websocket
from autobahn.twisted.websocket import WebSocketServerProtocol
from autobahn.websocket import protocol

from mlqueue.autobahn_options import make_debug_lines_cheap


def test_the_option_dump_autobahn_builds_for_each_socket_is_a_repr(monkeypatch):
    monkeypatch.setattr(protocol, "pformat", pprint.pformat)
    make_debug_lines_cheap()
    options = [(name, None, "WebSocketServerFactory") for name in WebSocketServerProtocol.CONFIG_ATTRS]
    assert protocol.pformat(options) == repr(options)
    assert "\n" not in protocol.pformat(options)


def test_the_asgi_application_applies_it():
    import mlqueue.asgi  # noqa: F401

    assert protocol.pformat is repr


def test_the_names_and_values_it_colours_for_each_frame_are_coloured_only_when_a_line_is_written(monkeypatch):
    for module in (protocol, websocket):
        monkeypatch.setattr(module, "hltype", util.hltype)
        monkeypatch.setattr(module, "hlval", util.hlval)
    make_debug_lines_cheap()
    method = WebSocketServerProtocol().sendData
    for module in (protocol, websocket):
        line = f"{module.hltype(method)} sent {module.hlval(60)} bytes"
        assert line == f"{util.hltype(method)} sent {util.hlval(60)} bytes"
        with patch.object(util, "hl", side_effect=AssertionError("coloured before it was written")):
            module.hltype(method), module.hlval(60)
