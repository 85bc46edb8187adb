"""YAML job specs, bounded: the submit page's YAML box and the API's YAML bodies read them the
same way. Size and nesting are checked before the parser runs (it recurses per level and slows
down with depth: 20 KB of "[" took 15 s); aliases are refused (a few lines of nested aliases
expand beyond any limit)."""

from datetime import date, datetime

import yaml
from django.conf import settings
from rest_framework.parsers import BaseParser

from mlqueue.client.specs import YAML_ALIASES, a_kind, read_yaml
from mlqueue.errors import BODY_TOO_LARGE, RequestTooLarge
from mlqueue.parsers import BodyError, BodyParseError, first_bad_text

YAML_SYNTAX = "YAML syntax error at line {line}, column {column}: {problem}."
NOT_A_MAPPING = "the YAML must be a mapping of spec fields (like the API's JSON object); this one is {kind}."
MAX_YAML_BYTES = 64 * 1024  # a full spec is under 2 KB
MAX_YAML_DEPTH = 64  # a spec nests three levels; the parser recurses per level
YAML_TOO_LARGE = "the YAML is {size} bytes; the form reads at most {limit}."
YAML_TOO_DEEP = "the YAML nests deeper than {limit} levels; a job spec nests three."
YAML_VALUE = "YAML value error: {problem}."
YAML_BAD_TEXT = "{path}: {message}"
NOT_UTF8 = "the YAML is not UTF-8 text ({problem})."
YAML_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
NOT_JSON_VALUE = "{kind} has no JSON form: it must be {instead}, as the same body in JSON would have it."
NOT_JSON_KINDS = {
    set: ("a YAML set (!!set)", "a list ([a, b], in its order)"),
    tuple: ("a YAML ordered mapping (!!omap, !!pairs)", "a mapping"),
    bytes: ("YAML binary (!!binary)", "text"),
    date: ("a YAML date (!!timestamp)", "text (quote it)"),
    datetime: ("a YAML timestamp (!!timestamp)", "text (quote it)"),
}


def load_yaml(text: str) -> tuple[dict | None, str]:
    """The YAML as a spec mapping, or why not (a sentence)."""
    try:
        return read_spec_yaml(text), ""
    except BodyError as error:
        return None, error.message if error.field == "body" else YAML_BAD_TEXT.format(
            path=error.field, message=error.message
        )


def read_spec_yaml(text: str) -> dict:
    """The YAML as a spec mapping, or BodyError naming the field at fault (`body`: the whole)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_YAML_BYTES:
        raise BodyError("body", YAML_TOO_LARGE.format(size=size, limit=MAX_YAML_BYTES))
    try:
        problem = _scan_problem(text)
        data = None if problem else read_yaml(text)
    except yaml.YAMLError as exc:
        raise BodyError("body", _yaml_error(exc)) from None
    # e.g. an integer of 5,000 digits; a set as a mapping's key (unhashable: a review found a 500)
    except (ValueError, OverflowError, RecursionError, TypeError) as exc:
        raise BodyError("body", YAML_VALUE.format(problem=exc)) from None
    if problem:
        raise BodyError("body", problem)
    if not isinstance(data, dict):
        raise BodyError("body", NOT_A_MAPPING.format(kind="empty" if data is None else a_kind(data)))
    if found := first_bad_text(data) or first_not_json(data):
        raise BodyError(*found)
    return data


def first_not_json(data, path: str = "") -> tuple[str, str] | None:
    """(dotted path, message) of the first value JSON has no form for: a set (`command: !!set
    {a, b}` came out as the arguments in any order), bytes, a date, an ordered mapping's pairs.
    The API reads a YAML body as it reads the same body in JSON; None if it can. (.nan and .inf
    pass: JSON's 1e400 arrives as inf too, and the fields refuse both, naming the number.)"""
    if isinstance(data, dict | list):
        items = data.items() if isinstance(data, dict) else enumerate(data)
        for key, value in items:
            if found := first_not_json(value, f"{path}.{key}" if path else str(key)):
                return found
        return None
    if data is None or isinstance(data, str | int | float):
        return None
    kind, instead = NOT_JSON_KINDS.get(type(data), (f"a YAML {type(data).__name__}", "text"))
    return path or "body", NOT_JSON_VALUE.format(kind=kind, instead=instead)


_NESTING = {
    yaml.FlowSequenceStartToken: 1,
    yaml.FlowMappingStartToken: 1,
    yaml.BlockSequenceStartToken: 1,
    yaml.BlockMappingStartToken: 1,
    yaml.FlowSequenceEndToken: -1,
    yaml.FlowMappingEndToken: -1,
    yaml.BlockEndToken: -1,
}


def _scan_problem(text: str) -> str:
    """An alias, or nesting past MAX_YAML_DEPTH, seen by the scanner alone (it is linear and
    stops at the first), before the parser and the loader see the document."""
    depth = 0
    for token in yaml.scan(text):
        if isinstance(token, yaml.AliasToken):
            return YAML_ALIASES
        depth += _NESTING.get(type(token), 0)
        if depth > MAX_YAML_DEPTH:
            return YAML_TOO_DEEP.format(limit=MAX_YAML_DEPTH)
    return ""


def _yaml_error(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"YAML error: {exc}"
    return YAML_SYNTAX.format(line=mark.line + 1, column=mark.column + 1, problem=exc.problem)


class LimitedYAMLParser(BaseParser):
    """A YAML body read as the submit page reads its YAML box: over MAX_YAML_BYTES (or the
    request limit, if lower) is a 413; anything else wrong is a 400 naming `body`."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = min(MAX_YAML_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(BODY_TOO_LARGE.format(limit=limit))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyParseError(BodyError("body", NOT_UTF8.format(problem=exc))) from None
        try:
            return read_spec_yaml(text)
        except BodyError as error:
            raise BodyParseError(error) from None


class LimitedXYAMLParser(LimitedYAMLParser):
    media_type = "application/x-yaml"


class LimitedTextYAMLParser(LimitedYAMLParser):
    media_type = "text/yaml"
