"""loads_body decodes with one shared decoder, not a decoder per body as json.loads(text,
parse_constant=...) builds: what it accepts and the reason it gives for what it refuses stay
json.loads's."""

import json

import pytest

from mlqueue.parsers import MALFORMED_JSON, NOT_JSON_CONSTANT, BodyError, loads_body


def _refuse_constant(name):
    raise ValueError(NOT_JSON_CONSTANT.format(name=name))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "heartbeat", "id": 7, "body": {"tasks": []}}',
        b'  [1, 2.5, "x", null, true] ',
        b'"\xc3\xa9t\xc3\xa9"',
        b"\xef\xbb\xbf{}",  # a UTF-8 byte order mark
        b'{"a": NaN}',
        b"-Infinity",
        b'{"a": 1} trailing',
        b'{"a": }',
        b"",
    ],
)
def test_a_body_is_accepted_or_refused_as_json_loads_would(raw):
    try:
        expected = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except ValueError as exc:
        with pytest.raises(BodyError) as refused:
            loads_body(raw)
        assert refused.value.message == MALFORMED_JSON.format(problem=exc)
    else:
        assert loads_body(raw) == expected
