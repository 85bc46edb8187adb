"""JSON bodies with a size cap, a nesting cap, each key once per object and text Postgres can store.

DRF reads the request stream itself, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE never sees a JSON
body; this parser enforces it. `loads_body` is shared with the heartbeat lane (mlqueue/fastlane.py),
which parses its bodies without DRF."""

import json
import re
from itertools import accumulate

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from mlqueue.errors import BODY_TOO_LARGE, RequestTooLarge

# No request of ours nests past a handful of levels; json.loads recurses (a RecursionError, a
# 500, past ~1,000) and so do the serializers and the error renderer behind it.
MAX_JSON_DEPTH = 64
MALFORMED_JSON = "malformed JSON ({problem})"
NOT_JSON_CONSTANT = "{name} is not valid JSON"
JSON_TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels."
NUL_IN_TEXT = "contains a NUL character (U+0000), which cannot be stored."
LONE_SURROGATE = "contains an unpaired surrogate ({code}), which is not valid Unicode text."
DUPLICATE_KEY = "duplicate key {key!r}: a key may appear only once in an object."

# A JSON string, closed or not: the unrolled loop keeps the scan linear on any input.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class BodyError(ValueError):
    """A body refused before any view sees it; `field` is the dotted path at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def json_depth_exceeds(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than `limit`, without recursing. Exact for
    valid JSON; for invalid JSON json.loads refuses the body anyway."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit


def first_bad_text(data, path: str = "") -> tuple[str, str] | None:
    """(dotted path, message) of the first string, key or value, that Postgres cannot store
    or that is not Unicode text; None if all are fine. The depth is already bounded."""
    if isinstance(data, str):
        found = _BAD_CHAR.search(data)
        if found is None:
            return None
        return path or "body", NUL_IN_TEXT if found[0] == "\x00" else LONE_SURROGATE.format(
            code=f"U+{ord(found[0]):04X}"
        )
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        bad_key = first_bad_text(key, path)
        if bad_key:  # named by where it is: the key itself cannot go into the answer
            return bad_key[0], f"a key {bad_key[1]}"
        problem = first_bad_text(value, f"{path}.{key}" if path else str(key))
        if problem:
            return problem
    return None


def loads_body(raw: bytes, *, check_text: bool = True):
    """The body as JSON, or BodyError naming what is wrong with it. `check_text=False` leaves
    NUL and lone surrogates to the caller (an agent's log chunks: bytes a program wrote)."""
    if json_depth_exceeds(raw):
        raise BodyError("body", JSON_TOO_DEEP)
    try:
        text = raw.decode("utf-8")
        data = _decode(text)
    except _DuplicateKey:
        raise BodyError(*_duplicate_key_problem(text)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyError("body", MALFORMED_JSON.format(problem=exc)) from None
    # NUL and lone surrogates only reach a str through a \u escape: most bodies skip the walk.
    problem = first_bad_text(data) if check_text and _SUSPECT_ESCAPE.search(raw) else None
    if problem:
        raise BodyError(*problem)
    return data


def _refuse_constant(name: str):
    raise ValueError(NOT_JSON_CONSTANT.format(name=name))


class _DuplicateKey(ValueError):
    pass


def _object(pairs: list) -> dict:
    """An object, refused if a key comes twice: json.loads would keep the last value silently
    (`"gpu_count": 1, "gpu_count": 2` read as 2)."""
    obj = dict(pairs)
    if len(obj) < len(pairs):
        raise _DuplicateKey
    return obj


class _Pairs(list):
    """An object kept as its (key, value) pairs, duplicates included, to find where one is."""


# json.loads(text, parse_constant=...) builds a decoder for every call: 3 of its 5 µs for a
# socket heartbeat's message. One decoder, and json.loads's own refusal of a leading BOM.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_object)
_PAIRS_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_Pairs)


def _decode(text: str):
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _duplicate_key_problem(text: str) -> tuple[str, str]:
    """(field, message) for a body with a key given twice: the dotted path of the first such
    key, or the syntax error, if the body has one as well (it is the bigger problem)."""
    try:
        path, key = _first_duplicate_key(_PAIRS_DECODER.decode(text))
    except ValueError as exc:
        return "body", MALFORMED_JSON.format(problem=exc)
    # The key goes into the answer: text that cannot be encoded there is replaced.
    return _BAD_CHAR.sub("\ufffd", path), DUPLICATE_KEY.format(key=_BAD_CHAR.sub("\ufffd", key))


def _first_duplicate_key(data, path: str = "") -> tuple[str, str] | None:
    """(dotted path, key) of the first key given twice in an object, outer objects first; the
    depth is already bounded."""
    if isinstance(data, _Pairs):
        seen = set()
        for key, _ in data:
            if key in seen:
                return (f"{path}.{key}" if path else key), key
            seen.add(key)
        items = data
    else:
        items = enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = _first_duplicate_key(value, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


class BodyParseError(ParseError):
    """A 400 that keeps the field, so the error shape carries `fields` (mlqueue/api_errors.py)."""

    def __init__(self, error: BodyError):
        super().__init__(str(error))
        self.field, self.message = error.field, error.message


class LimitedJSONParser(JSONParser):
    check_text = True

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(BODY_TOO_LARGE.format(limit=limit))
        try:
            return loads_body(raw, check_text=self.check_text)
        except BodyError as exc:
            raise BodyParseError(exc) from None


def replace_bad_text(data):
    """The same JSON with NUL and lone surrogates replaced by U+FFFD, one character for one
    (offsets into a log stay true)."""
    if isinstance(data, str):
        return _BAD_CHAR.sub("\ufffd", data)
    if isinstance(data, list):
        return [replace_bad_text(item) for item in data]
    if isinstance(data, dict):
        return {replace_bad_text(key): replace_bad_text(value) for key, value in data.items()}
    return data


class AgentEventsJSONParser(LimitedJSONParser):
    """Agents' events carry task output, bytes a program wrote: what Postgres cannot hold is
    replaced, not refused, so one NUL never blocks a node's events."""

    check_text = False

    def parse(self, stream, media_type=None, parser_context=None):
        return replace_bad_text(super().parse(stream, media_type, parser_context))
